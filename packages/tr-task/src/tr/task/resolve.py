"""One resolved configuration: every value a compile derives from the task's setters, the settings, the data
and the launch, computed and checked once, before anything is allocated.

``resolve(config)`` reads a task's configuration tree (tr.task.config: the frozen settings, the task's section
with its BluePrint, loss, optimizer, scheduler, EMA, device and distributed launch, and the data: the task's
feeder, or one built from the data section, completed and sharded here) and returns a :class:`Resolved`: the
world, this process's batch and device, the data's shapes, batches and steps, the class count, the
resolutions, the schedule and the recorded environment. Each fact is checked in one place with one
error (the batch split by tr.core.settings.check_batch_split, the classes and shapes by tr.task.plan_inputs),
and the plan is built from it: the CompileSpec (``compile_spec``) and what every rank must agree on
(``agreement``) are its projections.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tr.algo.scheduler import ConstantLR
from tr.core import env as tr_env
from tr.core.errors import ConfigError
from tr.core.settings import Settings, check_batch_split
from tr.data.settings import PreprocessorSettings
from tr.task import devices, plan_inputs, tta
from tr.task.config import Config
from tr.task.distributed import DistEnv, auto_env
from tr.task.feeder import Feeder, complete_feeder
from tr.task.pipeline import feeder_from_preprocessor

if TYPE_CHECKING:
    from tr.graph.spec import CompileSpec


@dataclass(frozen=True)
class Resolved:
    config: Config  # the tree resolved (its data section a frozen snapshot when the data came from it)
    env: DistEnv | None  # the data-parallel launch; None: one process
    timeout_s: float | None  # distributed()'s bootstrap timeout
    backend: str  # "cpu", "cuda" or "auto", reconciled with use_cpu()/use_gpu()
    cuda_device: int | None  # this process's device (None: the backend's default)
    local_batch: int  # this process's share of the global batch
    feeder: Feeder  # completed (tr.task.feeder.complete_feeder) and sharded to this rank
    num_classes: int
    input_shape: tuple[int, int, int]  # (H, W, C) of one sample
    resolutions: dict[str, int | None]  # CompileSpec's train_resolution and val_resolution
    train_sides: tuple[int, ...]  # progressive resizing: every epoch's training side; (): one side
    has_val: bool
    steps_per_epoch: int  # optimizer steps (with accumulate > 1, windows of micro-steps)
    micro_steps: int  # the training steps an epoch launches (= steps_per_epoch without accumulation)
    schedule: Any  # the task's scheduler prepared for (total epochs, steps per epoch)
    optimizer: dict[str, Any]  # CompileSpec's optimizer fields (tr.task.plan_inputs.optimizer_spec)
    recorded_env: dict[str, Any]  # the plan-changing TR_* variables as this compile reads them

    @property
    def settings(self) -> Settings:
        return self.config.settings

    @property
    def world_size(self) -> int:
        return 1 if self.env is None else self.env.world_size

    @property
    def rank(self) -> int:
        return 0 if self.env is None else self.env.rank

    def compile_spec(self) -> CompileSpec:
        """The plan's CompileSpec: a projection of this configuration."""
        from tr.graph.spec import CompileSpec, loss_scale_fields

        s, t, f = self.settings, self.config.task, self.feeder
        return CompileSpec(
            input_shape=self.input_shape, num_classes=self.num_classes, batch=f.batch, **self.resolutions,
            progressive_resolutions=tuple(sorted(set(self.train_sides[:-1]) - {self.train_sides[-1]}))
            if self.train_sides else (),
            last_train_batch=f.last_batch(True), val_batch=f.batch if self.has_val else None,
            last_val_batch=f.last_batch(False) if self.has_val else None, amp=s.amp_enabled,
            amp_dtype=s.amp_dtype,
            **loss_scale_fields(s), label_smoothing=float(t.loss.smoothing), loss=t.loss.kind,
            grad_clip=max(0.0, t.grad_clip), grad_clip_mode=t.grad_clip_mode, param_groups=t.param_groups,
            layer_decay=t.layer_decay, freeze_first_layer=t.freeze_first_after is not None,
            lr_table_steps=self.schedule.total_steps,
            world_size=self.world_size, **self.optimizer, accumulate=t.accumulate,
            micro_steps=self.micro_steps if t.accumulate > 1 else None,
            ema_decay=t.ema.decay if t.ema is not None else None,
            ema_warmup=float(t.ema.warmup) if t.ema is not None else 0.0,
            input=f.input_plan(), mixup=t.mixup)

    def agreement(self, spec: CompileSpec, parameters: list[list[int]]) -> dict[str, Any]:
        """What every rank of a data-parallel run must hold alike (tr.task.distributed.Group.agree)."""
        s = self.settings
        return {"global batch": s.batch_size, "seed": s.seed, "data seed": getattr(self.feeder, "seed", None),
                "steps per epoch": self.steps_per_epoch,
                "accumulate": self.config.task.accumulate, "epochs": self.config.task.epochs, "validates": self.has_val,
                "amp": s.amp_mode, "optimizer": spec.optimizer, "parameters": parameters,
                "environment": self.recorded_env}  # TR_FC_DRELU & co.: one plan on every rank


def resolve(config: Config) -> Resolved:
    """Every derived value of the configuration tree ``config`` (its settings frozen), each checked once
    (ConfigError / CompileError naming the value); builds, shards and checks the data (a data section is
    committed, and the Resolved holds its frozen snapshot). When the settings name several devices and no launch
    made this process one rank, this process becomes the launcher of one process per device
    (tr.task.devices.relaunch_per_device: SystemExit with their exit code), after the devices were checked."""
    s, t = config.settings, config.task
    env, timeout = t.distributed or (auto_env(), None)
    env = env if env is not None and env.distributed else None
    backend = devices.backend_kind(t.device, s)
    if env is None and len(s.gpu_ids) > 1:
        devices.relaunch_per_device(s)
    local_batch = devices.local_batch(s, env)
    cuda_device = devices.device_index(s, env)
    if t.data is None:  # the data section, checked whole and committed; the run reads a frozen copy of it,
        config = dataclasses.replace(config, data=_committed(config))  # immune to later edits of the global
    feeder = complete_feeder(t.data if t.data is not None else feeder_from_preprocessor(s, pre=config.data))
    k = t.accumulate
    if k > 1:  # micro-batches of global / (ranks x k) (tr.graph.accumulate)
        world = 1 if env is None else env.world_size
        check_batch_split(s.batch_size, world * k, f"{world} rank(s) x task.accumulate({k})")
        feeder.micro_batches(k)
    if env is not None:
        feeder.shard(env.rank, env.world_size)
    if feeder.batch * k != local_batch:
        raise ConfigError(f"the feeder's batch {feeder.batch}{f' x task.accumulate({k})' if k > 1 else ''} differs "
                          f"from the local batch size {local_batch} of the settings")
    plan_inputs.staging(s, feeder)
    num_classes = plan_inputs.num_classes(t.num_classes, t.model, getattr(feeder, "num_classes", None))
    feeder.check_labels(num_classes)  # labels past the logits are refused now, not wrapped in a step
    micro = feeder.steps(True)
    steps = -(-micro // k)  # optimizer steps: windows of k micro-steps, the epoch's last possibly shorter
    has_val = feeder.num_samples(False) > 0
    if t.ema is not None and t.ema.validate and not has_val:
        raise ConfigError("EMA validation needs validation data (the feeder has none): ema(validate=False)")
    if t.freeze_first_after is not None and t.freeze_first_after > t.epochs:
        raise ConfigError(f"task.freeze_first_layer_after({t.freeze_first_after}) is past total_epochs({t.epochs}): "
                          "the first layer would never freeze")
    input_shape = plan_inputs.input_shape(t.model, feeder.sample_shape)
    tta.check(t.tta, t.loss.kind, input_shape)
    schedule = (t.scheduler or ConstantLR().base_lr(0.1)).prepare(t.epochs, steps)
    if getattr(schedule, "needs_validation", False) and not has_val:
        raise ConfigError(f"ReduceLROnPlateau monitors {schedule.metric!r}, which needs validation data (the feeder "
                          "has none): monitor('train_loss')")
    resolutions = plan_inputs.resolutions(s, feeder.sample_shape, has_val)
    sides = plan_inputs.train_sides(s, t.epochs, feeder)
    return Resolved(
        config=config, env=env, timeout_s=timeout, backend=backend, cuda_device=cuda_device, local_batch=local_batch,
        feeder=feeder, num_classes=num_classes,
        input_shape=input_shape,
        resolutions=resolutions, train_sides=sides, has_val=has_val,
        steps_per_epoch=steps, micro_steps=micro, schedule=schedule, optimizer=plan_inputs.optimizer_spec(t.optimizer),
        recorded_env=tr_env.recorded())


def _committed(config: Config) -> PreprocessorSettings:
    """A frozen copy of the data section, committed (tr.data's whole-configuration check) first."""
    if config.data is None:
        raise ConfigError("no data: call data(feeder) or configure tr.data's PREPROCESSOR_SETTING")
    return config.data.commit().snapshot()
