"""DeepLearningTask: the seed's chain API, compile() into one arena, run() the epoch loop."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from tr.algo.loss import CrossEntropyLoss
from tr.algo.scheduler import ConstantLR, Scheduler
from tr.core.errors import CompileError, ConfigError, PhaseError
from tr.core.log import get_logger
from tr.core.phase import Phase
from tr.core.settings import GLOBAL_SETTING, Settings
from tr.task.base import TaskBase
from tr.task.distributed import (
    DistEnv,
    Group,
    auto_env,
    backend_options,
    bootstrap_timeout,
    broadcast_parameters,
    global_count,
    init_group,
    op_timeout,
    read_env,
)
from tr.task.executor import StepLauncher, capture_steps, scalar
from tr.task.feeder import Feeder
from tr.task.report import EpochRecord, EpochTable, ProgressBar, TrainingResult
from tr.task.weights import initialize_program

log = get_logger(__name__)

_OPT_NAMES = {"SGD": "sgd", "SGD_MOMENTUM": "momentum", "SGD_NESTEROV": "nesterov", "LARS": "lars",
              "LARS_NESTEROV": "lars_nesterov", "ADAM": "adam", "ADAMW": "adamw"}


def optimizer_spec(opt) -> dict[str, Any]:
    """The CompileSpec fields of a tr.algo optimizer config."""
    hp = opt.hyperparams()
    out: dict[str, Any] = {"optimizer": _OPT_NAMES[opt.kind.name], "weight_decay": float(hp.get("weight_decay", 0))}
    if "momentum" in hp:
        out["momentum"] = float(hp["momentum"])
    if "beta1" in hp:
        out["momentum"], out["beta2"] = float(hp["beta1"]), float(hp["beta2"])
    if "eps" in hp:
        out["eps"] = float(hp["eps"])
    if "trust_coefficient" in hp:
        out["trust_coefficient"] = float(hp["trust_coefficient"])
    return out


_METRICS = {"train_loss", "val_loss", "val_top1", "val_top5"}


class DeepLearningTask(TaskBase):
    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self._settings_source = settings or GLOBAL_SETTING
        self._blueprint = None
        self._loss = CrossEntropyLoss()
        self._optimizer = None
        self._scheduler: Scheduler | None = None
        self._initializer = None
        self._epochs = 35
        self._num_classes: int | None = None
        self._validate_every = (1, 0)
        self._early_stop = 1.0
        self._grad_clip = -1.0
        self._metrics = {"train_loss", "val_loss", "val_top1"}
        self._feeder: Feeder | None = None
        self._device = "auto"
        self._log_table = True
        self._on_step = None
        self._dist: tuple[DistEnv, float | None] | None = None
        self.group: Group | None = None  # this process's rank group when training data-parallel
        self._val_samples = 0.0  # what validation sums are divided by (global mean of per-rank counts)
        self.program = None
        self.backend = None
        self._steps = None
        self.settings: Settings | None = None

    # --- the chain API (PLANNING only) ------------------------------------------------------------
    def _plan(self, action: str) -> DeepLearningTask:
        self._require(Phase.PLANNING, action)
        return self

    def model(self, blueprint) -> DeepLearningTask:
        self._plan("model()")
        from tr.graph.blueprint import BluePrint, Layer

        if not isinstance(blueprint, (BluePrint, Layer)):
            raise ConfigError(f"model() takes a BluePrint or a layer such as seq(...), got {blueprint!r}")
        self._blueprint = blueprint
        return self

    def loss(self, loss: CrossEntropyLoss) -> DeepLearningTask:
        self._plan("loss()")
        if not isinstance(loss, CrossEntropyLoss):
            raise ConfigError(f"loss must be a CrossEntropyLoss (the only loss tr compiles), got {loss!r}")
        self._loss = loss
        return self

    def initializer(self, init) -> DeepLearningTask:
        self._plan("initializer()")
        self._initializer = init
        return self

    def optimizer(self, opt) -> DeepLearningTask:
        self._plan("optimizer()")
        if not hasattr(opt, "kind"):
            raise ConfigError(f"optimizer must be SGD, LARS, Adam or AdamW from tr.algo, got {opt!r}")
        self._optimizer = opt
        return self

    def scheduler(self, sched: Scheduler) -> DeepLearningTask:
        self._plan("scheduler()")
        if not isinstance(sched, Scheduler):
            raise ConfigError(f"scheduler must be a tr.algo scheduler, got {sched!r}")
        self._scheduler = sched
        return self

    def total_epochs(self, n: int) -> DeepLearningTask:
        self._plan("total_epochs()")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"total_epochs must be an integer >= 1, got {n!r}")
        self._epochs = n
        return self

    def num_classes(self, n: int) -> DeepLearningTask:
        self._plan("num_classes()")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"num_classes must be an integer >= 2, got {n!r}")
        self._num_classes = n
        return self

    def validate_every(self, interval: int = 1, offset: int = 0) -> DeepLearningTask:
        self._plan("validate_every()")
        if not isinstance(interval, int) or interval < 1:
            raise ConfigError(f"validate_every interval must be >= 1, got {interval!r}")
        if not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"validate_every offset must be >= 0, got {offset!r}")
        self._validate_every = (interval, offset)
        return self

    def early_stop_by_top1(self, threshold: float = 1.0) -> DeepLearningTask:
        self._plan("early_stop_by_top1()")
        if not 0.0 < float(threshold) <= 1.0:
            raise ConfigError(f"early_stop_by_top1 threshold must be in (0, 1], got {threshold!r}")
        self._early_stop = float(threshold)
        return self

    def grad_clip(self, max_abs: float) -> DeepLearningTask:
        self._plan("grad_clip()")
        if not (float(max_abs) > 0 or float(max_abs) == -1):
            raise ConfigError(f"grad_clip must be > 0 (or -1 to disable), got {max_abs!r}")
        self._grad_clip = float(max_abs)
        return self

    def metrics(self, *names: str) -> DeepLearningTask:
        self._plan("metrics()")
        bad = [n for n in names if n not in _METRICS]
        if bad:
            raise ConfigError(f"unknown metric(s) {bad}; choose from {sorted(_METRICS)}")
        self._metrics = set(names)
        return self

    def data(self, feeder: Feeder) -> DeepLearningTask:
        """Where batches come from (default: tr.data's PREPROCESSOR_SETTING)."""
        self._plan("data()")
        self._feeder = feeder
        return self

    def device(self, name: str) -> DeepLearningTask:
        self._plan("device()")
        if name not in ("cpu", "cuda", "auto"):
            raise ConfigError(f"device must be 'cpu', 'cuda' or 'auto', got {name!r}")
        self._device = name
        return self

    def distributed(self, env: DistEnv | None = None, timeout_s: float | None = None) -> DeepLearningTask:
        """Train data-parallel, one process per device: ``env`` (default: the launcher's variables, see
        tr.task.distributed) names this rank, the settings' global batch size is split evenly over the ranks,
        the feeder serves this rank's share. ``timeout_s`` bounds the bootstrap (default TR_DIST_TIMEOUT or
        300 s). Automatic, with the defaults, when tr-run/torchrun/mpirun start more than one rank."""
        self._plan("distributed()")
        env = read_env() if env is None else env
        if not isinstance(env, DistEnv):
            raise ConfigError(f"distributed() takes a tr.task.distributed.DistEnv, got {env!r}")
        bootstrap_timeout(timeout_s)
        self._dist = (env, timeout_s)
        return self

    def on_step(self, fn) -> DeepLearningTask:
        """Call ``fn(step_in_epoch, result)`` after every training step (result = [loss, top1, top5]).

        For tests and debugging: it reads device memory every step, which a production loop never does.
        """
        self._on_step = fn
        return self

    def quiet(self, quiet: bool = True) -> DeepLearningTask:
        self._log_table = not quiet
        return self

    # --- compile ----------------------------------------------------------------------------------
    def compile(self) -> DeepLearningTask:
        self._no_backwards("compile()")
        self._require(Phase.PLANNING, "compile()")
        if self._blueprint is None:
            raise CompileError("compile(): no model; call model(seq(...)) first")
        if self._optimizer is None:
            raise CompileError("compile(): no optimizer; call optimizer(SGD()/Adam()/...) first")
        s = self.settings = self._settings_source.snapshot()
        self._settings_source.freeze()
        env, timeout = self._dist or (auto_env(), None)
        env = env if env is not None and env.distributed else None
        local_batch = s.local_batch_size if env is None else self._local_batch(s, env)
        feeder = self._feeder or self._default_feeder(s)
        self._feeder = feeder
        if env is not None and hasattr(feeder, "shard"):
            feeder.shard(env.rank, env.world_size)
        if feeder.batch != local_batch:
            raise ConfigError(f"the feeder's batch {feeder.batch} differs from the local batch size "
                              f"{local_batch} of the settings")
        num_classes = self._num_classes or getattr(feeder, "num_classes", None)
        if num_classes is None:
            raise CompileError("compile(): the number of classes is unknown; call num_classes(n)")
        self._num_classes = num_classes
        steps = feeder.steps(True)
        sched = self._scheduler or ConstantLR().base_lr(0.1)
        self._sched = sched.prepare(self._epochs, steps)

        from tr.backend.registry import get_backend
        from tr.graph.compiler import compile_program
        from tr.graph.spec import CompileSpec

        h, w, c = feeder.sample_shape
        has_val = feeder.num_samples(False) > 0
        spec = CompileSpec(
            input_shape=(h, w, c), num_classes=num_classes, batch=feeder.batch,
            last_train_batch=feeder.last_batch(True),
            val_batch=feeder.batch if has_val else None,
            last_val_batch=feeder.last_batch(False) if has_val else None,
            amp=s.amp_enabled, label_smoothing=float(self._loss.smoothing),
            grad_clip=max(0.0, self._grad_clip), lr_table_steps=self._sched.total_steps,
            world_size=s.world_size if env is None else env.world_size, **optimizer_spec(self._optimizer),
        )
        self.program = compile_program(self._blueprint, spec)
        self._advance(Phase.MEMORY_LOCKED)
        if env is not None:  # join the world; every rank must then hold the same plan
            self.group = init_group(env, timeout)
            self.group.agree("the plan", {
                "global batch": s.batch_size, "seed": s.seed, "data seed": getattr(feeder, "seed", None),
                "steps per epoch": steps, "epochs": self._epochs, "validates": has_val, "amp": s.amp_enabled,
                "optimizer": spec.optimizer, "parameters": [list(i.tensor.shape.dims) for i in self.program.inits]})
        kind, options = backend_options(self._device, self.group)
        self.backend = get_backend(kind, **options)
        if self._device == "auto" and self.backend.name != "cuda":
            from tr.backend.cuda import cuda_status

            log.info("no usable CUDA device (%s): training on the CPU backend", cuda_status()[1])
        if hasattr(self.backend, "configure"):
            self.backend.configure(tf32=s.tf32)
        self.backend.allocate(self.program.layout)
        if hasattr(self.backend, "host_buffers") and hasattr(feeder, "adopt_buffers"):
            # staging buffers in the backend's pinned memory: DMA-able, never page-locked after the fact
            feeder.adopt_buffers(self.backend.host_buffers(feeder.batch, feeder.sample_shape, feeder.dtype))
        self.backend.bind_host_buffers(feeder.buffers())
        initialize_program(self.backend, self.program, s, self._initializer,
                           rank=0 if env is None else env.rank)
        # the learning rate of every step, read on the device by lr_lookup: the loop never writes it
        self.backend.write(self.program.tensor("lr_table"), self._sched.table())
        # validation metrics are sums over this rank's samples, averaged over ranks by VAL_RESULT_COMM
        self._val_samples = float(feeder.num_samples(False))
        if self.group is not None:
            broadcast_parameters(self.backend, self.program, self.group.collective)
            self._val_samples = global_count(self.group.collective, feeder.num_samples(False))
        self._steps = capture_steps(self.backend, self.program, has_val)
        self._advance(Phase.COMPILED)
        log.info("compiled: %d ops, arena %.1f MiB on %s", self.program.num_ops,
                 self.program.layout.total_bytes / 2**20, self.backend.name)
        return self

    @staticmethod
    def _local_batch(s: Settings, env: DistEnv) -> int:
        if len(s.gpu_ids) > 1:
            raise ConfigError(f"use_gpu lists {len(s.gpu_ids)} devices, but with a launcher each of the "
                              f"{env.world_size} processes drives one device (LOCAL_RANK picks it)")
        if s.batch_size % env.world_size:
            raise ConfigError(f"the global batch size {s.batch_size} does not divide by the world size "
                              f"{env.world_size}")
        return s.batch_size // env.world_size

    def _default_feeder(self, s: Settings) -> Feeder:
        try:
            from tr.task.pipeline import feeder_from_preprocessor
        except ImportError as e:  # pragma: no cover - tr-data always installed with tr-task
            raise ConfigError("no data: call data(feeder) or configure tr.data's PREPROCESSOR_SETTING") from e
        return feeder_from_preprocessor(s)

    # --- run --------------------------------------------------------------------------------------
    def run(self) -> TrainingResult:
        if self._phase is not Phase.COMPILED:
            raise PhaseError(f"run() needs a compiled task; the task is in {self._phase.name}: call compile() first")
        wd = self._watchdog()
        self._launch = StepLauncher(self.backend, wd)
        try:
            return self._train()
        finally:
            if wd is not None:
                wd.stop()

    def _watchdog(self):
        """With an NCCL communicator: a started NcclWatchdog (tr.backend.cuda.watchdog), else None."""
        nccl = getattr(self.backend, "nccl", None)
        if nccl is None:
            return None
        from tr.backend.cuda.watchdog import NcclWatchdog

        # a collective may legitimately wait this long for a slow rank (the gloo collective's op timeout)
        timeout = getattr(getattr(self.group, "collective", None), "timeout_s", None) or op_timeout()
        return NcclWatchdog(nccl, timeout).start()

    def _train(self) -> TrainingResult:
        feeder, be, prog, st = self._feeder, self.backend, self.program, self._steps
        launch = self._launch
        wd = launch.watchdog
        has_val = feeder.num_samples(False) > 0
        main = self.group is None or self.group.is_main  # only rank 0 prints
        table = EpochTable(validate=has_val) if self._log_table and main else None
        result = TrainingResult()
        interval, offset = self._validate_every
        t_all = time.perf_counter()
        steps = feeder.steps(True)
        skipped_before = int(scalar(be, prog, "skipped")[0])
        for epoch in range(self._epochs):
            if wd is not None:
                wd.arm()
            t0 = time.perf_counter()
            be.launch(st.clear_metrics)
            be.launch(st.epoch_begin)
            bar = ProgressBar(steps, f"epoch {epoch + 1}")
            bar.enabled = bar.enabled and main
            lr0 = float(self._sched.lr_at(epoch, 0))
            for k, buf, _n in feeder.epoch(epoch, True):
                launch(st.transfer[buf], (st.train_last if k == steps - 1 else st.train)[buf], buf)
                feeder.release(k)
                if self._on_step is not None:
                    self._on_step(k, be.read(prog.tensor("result")).reshape(-1))
                bar.update(k + 1)
            bar.close()
            be.launch(st.epoch_end)
            launch.synchronize()
            skipped_total = int(scalar(be, prog, "skipped")[0])  # counted on the device, read once an epoch
            skipped, skipped_before = skipped_total - skipped_before, skipped_total
            if skipped:
                log.warning("epoch %d: %d step(s) with non-finite gradients skipped (loss scale now %g)",
                            epoch + 1, skipped, float(scalar(be, prog, "loss_scale")[0]))
            train_loss = float(scalar(be, prog, "accum")[0]) / feeder.num_samples(True)
            rec = EpochRecord(epoch + 1, train_loss, lr0, 0.0, skipped_steps=skipped)
            result.skipped_steps += skipped
            if has_val and (epoch + 1 - offset) >= 0 and (epoch + 1 - offset) % interval == 0:
                rec.val_loss, rec.top1, rec.top5 = self._validate(epoch)
                if rec.top1 > result.best_top1:
                    result.best_top1, result.best_top5, result.best_epoch = rec.top1, rec.top5, epoch + 1
            if wd is not None:
                wd.disarm()  # host work between epochs (a checkpoint) may take long on one rank
            rec.seconds = time.perf_counter() - t0
            result.history.append(rec)
            result.epochs = epoch + 1
            if table:
                table.row(rec)
            if not math.isfinite(train_loss):
                log.warning("epoch %d: training loss is %s", epoch + 1, train_loss)
            if rec.top1 is not None and rec.top1 >= self._early_stop:
                log.info("Early stop triggered at epoch %d (top1 %.4f >= %.4f)", epoch + 1, rec.top1,
                         self._early_stop)
                result.early_stopped = True
                break
        if table:
            table.close()
        result.seconds = time.perf_counter() - t_all
        return result

    def _validate(self, epoch: int) -> tuple[float, float, float]:
        feeder, be, st = self._feeder, self.backend, self._steps
        steps = feeder.steps(False)
        be.launch(st.clear_metrics)
        launch = self._launch
        for k, buf, _n in feeder.epoch(epoch, False):
            launch(st.transfer[buf], (st.val_last if k == steps - 1 else st.val)[buf], buf)
            feeder.release(k)
        be.launch(st.val_end)
        launch.synchronize()
        acc = scalar(be, self.program, "accum").astype(np.float64) / self._val_samples
        return float(acc[0]), float(acc[1]), float(acc[2])

    # --- inspection -------------------------------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """Copies of every parameter tensor (master weights, FP32), by name."""
        if self._phase is not Phase.COMPILED:
            raise PhaseError("weights() needs a compiled task")
        return {i.tensor.name: self.backend.read(i.tensor).copy() for i in self.program.inits}

    def parameters(self) -> list[tuple[np.ndarray, ...]]:
        """Per weight-bearing module, in layer order: copies of its parameters, (weight, bias) or (weight,)
        of a conv or fc, (gamma, beta) of a batch norm. A fused conv+BN layer (cbr) gives its conv and its
        BN as two entries, as the BluePrint declared them."""
        if self._phase is not Phase.COMPILED:
            raise PhaseError("parameters() needs a compiled task")
        bn_regions = ("W_BN_WEIGHT", "W_BN_BIAS")
        by_module: dict[tuple[int, int], list] = {}
        for i in self.program.inits:
            is_bn = i.tensor.region.name in bn_regions
            if i.kind in ("weight", "bias") or is_bn:
                by_module.setdefault((i.layer, int(is_bn)), []).append(i)
        out = []
        for key in sorted(by_module):
            specs = sorted(by_module[key], key=lambda i: 0 if i.kind == "weight" or i.tensor.region.name == "W_BN_WEIGHT"
                           else 1)
            out.append(tuple(self.backend.read(i.tensor).copy() for i in specs))
        return out

    @property
    def launches_per_step(self) -> int:
        """Host launches per training step: the transfer graph and the whole-step graph."""
        return self._steps.launches_per_step

    def host_us_per_step(self, n: int = 200) -> float:
        """Host time to queue one training step (transfer + step launches and their event bookkeeping),
        in microseconds, not counting the wait for the copy: what the loop costs besides waiting for data
        and the device. Trains n more steps on the batches in the device buffers (a benchmark helper:
        call it after run())."""
        self._require(Phase.COMPILED, "host_us_per_step()")
        st, launch = self._steps, StepLauncher(self.backend)
        self.backend.synchronize()
        total = 0.0
        for k in range(n):
            t0 = time.perf_counter()
            launch(st.transfer[k % 2], st.train[k % 2], k % 2, wait=False)
            total += time.perf_counter() - t0
            launch.wait(k % 2)
        self.backend.synchronize()
        return total / n * 1e6

    def time_train_step(self, n: int = 100, warmup: int = 10) -> float:
        """Seconds per launch of the captured full-batch training step (data already on the device).

        A benchmark helper: it trains ``warmup + n`` more steps on the batch in buffer A, so call it after
        run(), never between compile() and run() of a measured training.
        """
        self._require(Phase.COMPILED, "time_train_step()")
        be, g = self.backend, self._steps.train[0]
        for _ in range(warmup):
            be.launch(g)
        be.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            be.launch(g)
        be.synchronize()
        return (time.perf_counter() - t0) / n

    def describe(self) -> dict[str, Any]:
        return {"backend": getattr(self.backend, "name", None), "ops": self.program.num_ops if self.program else 0}
