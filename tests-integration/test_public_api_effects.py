"""Every public setting does what it says: a table of setter -> observable effect on the compiled plan or the run.

The test walks ``renaissance.__all__`` and every chain setter (public method) of the configuration objects it
exports: DeepLearningTask, Settings, PREPROCESSOR_SETTING, the loss, optimizers, schedulers, the initializer and
the BluePrint's fields. Each must have an entry in EFFECTS (or, for a method that configures nothing, in
NOT_SETTERS with the reason), and each entry proves the effect against a baseline: a setter added without an
entry, or one that is accepted and ignored, fails here.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest
from public_api_kit import (
    BATCH,
    MODEL,
    C,
    H,
    K,
    _cpvs_ready,
    _data,
    _feeder,
    _head_ops,
    _jpeg_batches_differ,
    _opened,
    _pre,
    _sdmp_cached,
    _transfer_ops,
    differs,
    plan,
    plan_differs,
    pre_differs,
    run_differs,
    task,
    weights,
)

import renaissance as R
from tr.backend.cpu.backend import CpuBackend
from tr.core.config import Section
from tr.core.errors import ConfigError, DeviceUnavailableError
from tr.core.norm import NormMode
from tr.data import ArrayDataset, Preprocessor
from tr.graph.archplan import ArchPlan
from tr.task import devices
from tr.task.deep_learning import DeepLearningTask
from tr.task.distributed import DistEnv, backend_options
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

# --- optimizers, schedulers, loss, initializer -----------------------------------------------------------------

LARS_MODEL = R.seq(R.conv(4, 3, p=1), R.relu(), R.gap(), R.fc(K))


def optimizer_differs(base, changed, model=MODEL) -> None:
    assert plan(task(model=model, optimizer=(base,))) != plan(task(model=model, optimizer=(changed,)))


def table(sched) -> np.ndarray:
    return sched.prepare(6, 3).table()


def sched_differs(base, changed) -> None:
    assert not np.array_equal(table(base), table(changed))


def test_the_task_writes_the_schedulers_table_to_the_device():
    sched = R.CosineAnnealingLR(0.3).warmup(1).eta_min(0.01)
    t = task(scheduler=(sched,), total_epochs=(3,)).compile()
    steps = t._feeder.steps(True)
    np.testing.assert_array_equal(t.backend.read(t.program.tensor("lr_table")).ravel(), table_for(sched, 3, steps))


def table_for(sched, epochs: int, steps: int) -> np.ndarray:
    return sched.prepare(epochs, steps).table()


def init_differs(init) -> None:
    assert weights(task()) != weights(task(initializer=(init,)))


# --- DeepLearningTask effects that need more than a plan or weights comparison ----------------------------------

def _history(t: DeepLearningTask, **kw):
    return t.compile().run(**kw).history


def _validate_every() -> None:
    h = _history(task(total_epochs=(2,), validate_every=(2,)))
    assert h[0].top1 is None and h[1].top1 is not None


def _early_stop() -> None:
    r = task(total_epochs=(3,), early_stop_by_top1=(1e-6,)).compile().run()
    assert r.early_stopped and r.epochs == 1


def _num_classes() -> None:
    t = task(model=R.seq(R.conv(4, 3, p=1), R.gap(), R.fc(5)), num_classes=(5,)).compile()
    assert t.spec.num_classes == 5 and t.program.tensor("probs").shape.dims[-1] == 5


def _device() -> None:
    t = task(device=("cuda",))
    from tr.backend.registry import cuda_available

    if cuda_available():
        assert t.compile().backend.name == "cuda"
    else:
        with pytest.raises(DeviceUnavailableError):
            t.compile()


def _distributed() -> None:
    with pytest.raises(ConfigError, match="global batch size 8 does not divide by the world size 3"):
        task(distributed=(DistEnv(0, 3),)).compile()


def _on_step() -> None:
    seen = []
    task(on_step=(lambda k, r: seen.append(k),)).compile().run()
    assert seen == list(range(24 // BATCH))


def _quiet(capsys) -> None:
    task(quiet=(False,)).compile().run()
    assert "Train Loss" in capsys.readouterr().out


def _log_to(tmp_path) -> None:
    task(log_to=(tmp_path,)).compile().run()
    assert (tmp_path / "metrics.csv").read_text().count("\n") >= 2


def _checkpoint_every(tmp_path) -> None:
    task(checkpoint_every=(1, tmp_path, 1, "top1"), total_epochs=(2,)).compile().run()
    assert sorted(p.name for p in tmp_path.iterdir()) in (["best", "epoch-0002"], ["epoch-0002"])


def _ema(capsys) -> None:
    plan_differs(ema=(0.9, False))  # the EMA update and the EMA regions
    r = task(ema=(0.9,), quiet=(False,)).compile().run()
    assert "EMA Top1%" in capsys.readouterr().out and r.history[0].ema_top1 is not None


def _total_epochs() -> None:
    assert len(_history(task(total_epochs=(2,)))) == 2


def _scheduler() -> None:
    assert [r.lr for r in _history(task(scheduler=(R.ConstantLR(0.5),)))] == [0.5]


# --- Settings effects ------------------------------------------------------------------------------------------

def _use_gpu() -> None:
    s = R.Settings().use_gpu("1")
    assert backend_options("cuda", None, devices.device_index(s, None)) == ("cuda", {"device": 1})


def _use_cpu() -> None:
    assert devices.backend_kind("auto", R.Settings().use_cpu()) == "cpu"
    assert devices.backend_kind("auto", R.Settings()) == "auto"


def _use_tf32(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(CpuBackend, "configure", lambda self, tf32=None: seen.append(tf32), raising=False)
    task(R.Settings().global_batch_size(BATCH).use_tf32()).compile()
    assert seen == [True]


def _log_level() -> None:
    logger = logging.getLogger("tr")
    level, handlers = logger.level, list(logger.handlers)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        task(R.Settings().global_batch_size(BATCH).log_level("DEBUG")).compile()
        assert logger.level == logging.DEBUG and any(r.levelno == logging.DEBUG for r in records)
    finally:  # log_level() attached configure_logging's stderr handler: the next tests log as before
        logger.handlers[:] = handlers
        logger.setLevel(level)


def _resolution(setter: str) -> None:
    s = getattr(R.Settings().global_batch_size(BATCH), setter)(H)
    t = task(s).compile()
    assert {v.resolution for v in t.spec.variants().values()} == {H}
    assert (t.spec.train_resolution or t.spec.val_resolution) == H
    with pytest.raises(ConfigError, match=f"{setter}\\(5\\) asks for 5x5 samples, but the data delivers 4x4"):
        task(getattr(R.Settings().global_batch_size(BATCH), setter)(5)).compile()


def _progressive_resizing() -> None:
    """The plan gains a training step at the lower side, and the first epoch trains on batches of that side."""
    pre = _pre(lambda s: s.train_transforms(R.RandomResizedCrop(4)).val_transforms(R.CenterCrop(4)))
    s = R.Settings().global_batch_size(4).progressive_resizing(2, 4, 0, 1, multiple=2)
    t = task(s, data=(PipelineFeeder(pre, 4, seed=3),), total_epochs=(2,)).compile()
    assert t.spec.progressive_resolutions == (2,) and "train_a@2" in t.program.steps
    seen = []
    launch = t.backend.launch
    t.backend.launch = lambda g, *a: (seen.append(g.name), launch(g, *a))[1]
    t.run(1)
    assert "train_a@2" in seen and "train_a" not in seen


def _spec(s: R.Settings) -> object:
    return task(s).compile().spec


# --- the table --------------------------------------------------------------------------------------------------

def _s(**kw) -> R.Settings:
    s = R.Settings().global_batch_size(BATCH)
    for name, args in kw.items():
        s = getattr(s, name)(*args)
    return s


EFFECTS: dict[str, Callable[..., None]] = {
    # DeepLearningTask
    "DeepLearningTask.model": lambda: plan_differs(model=R.seq(R.conv(4, 3, p=1), R.relu(), R.gap(), R.fc(K))),
    "DeepLearningTask.loss": lambda: plan_differs(loss=(R.CrossEntropyLoss().label_smoothing(0.1),)),
    "DeepLearningTask.initializer": lambda: init_differs(R.Initializer().fc(R.InitKind.ZEROS)),
    "DeepLearningTask.optimizer": lambda: plan_differs(optimizer=(R.Adam(),)),
    "DeepLearningTask.scheduler": _scheduler,
    "DeepLearningTask.total_epochs": _total_epochs,
    "DeepLearningTask.num_classes": _num_classes,
    "DeepLearningTask.validate_every": _validate_every,
    "DeepLearningTask.early_stop_by_top1": _early_stop,
    "DeepLearningTask.grad_clip": lambda: run_differs(grad_clip=(1e-4,)),
    "DeepLearningTask.param_group": lambda: run_differs(param_group=("norm", 3.0)),
    "DeepLearningTask.layer_decay": lambda: run_differs(layer_decay=(0.5,)),
    "DeepLearningTask.accumulate": lambda: run_differs(accumulate=(2,)),  # (MODEL has BN: per micro-batch)
    "DeepLearningTask.mixup": lambda: run_differs(mixup=()),
    "DeepLearningTask.freeze_first_layer_after": lambda: differs(lambda t: weights(t, 2), total_epochs=(2,),
                                                                 freeze_first_layer_after=(1,)),
    "DeepLearningTask.tta": lambda: differs(lambda t: t.compile().run().history[0].val_loss, tta=(True, 1)),
    "DeepLearningTask.data": lambda: run_differs(data=(_feeder(seed=9),)),
    "DeepLearningTask.device": _device,
    "DeepLearningTask.distributed": _distributed,
    "DeepLearningTask.on_step": _on_step,
    "DeepLearningTask.quiet": _quiet,
    "DeepLearningTask.log_to": _log_to,
    "DeepLearningTask.checkpoint_every": _checkpoint_every,
    "DeepLearningTask.ema": _ema,
    "DeepLearningTask.sema": lambda: run_differs(sema=(0.5,)),  # the weights become their EMA at the epoch's end
    # Settings
    "Settings.use_gpu": _use_gpu,
    "Settings.use_cpu": _use_cpu,
    "Settings.amp": lambda: plan_differs(settings=_s(amp=())),
    "Settings.loss_scaling": lambda: _plans_differ(_s(amp=()), _s(amp=(), loss_scaling=("static",))),
    "Settings.manual_seed": lambda: differs(weights, settings=_s(manual_seed=(7,))),
    "Settings.global_batch_size": lambda: differs(lambda t: t.compile().spec.batch, settings=_s(global_batch_size=(4,)),
                                                  data=(_feeder(4),)),
    "Settings.input_resolution": lambda: _resolution("input_resolution"),
    "Settings.train_resolution": lambda: _resolution("train_resolution"),
    "Settings.val_resolution": lambda: _resolution("val_resolution"),
    "Settings.progressive_resizing": _progressive_resizing,
    "Settings.use_tf32": _use_tf32,
    "Settings.log_level": _log_level,
    # PREPROCESSOR_SETTING
    "PreprocessorSettings.dataset": lambda: pre_differs(lambda s: s.dataset(ArrayDataset(
        (np.full((16, 6, 6, 1), 7, np.uint8), np.zeros(16, np.int32)), num_classes=K))),
    "PreprocessorSettings.download": lambda: _check(_opened(lambda s: s.download(True)) == {
        "download": True, "workers": 1}),
    "PreprocessorSettings.load_workers": lambda: _check(_opened(lambda s: s.load_workers(3))["workers"] == 3),
    "PreprocessorSettings.preprocess_workers": lambda: _check(
        Preprocessor(_pre(lambda s: s.preprocess_workers(3)), _station()).workers == 3),
    "PreprocessorSettings.normalization": lambda: pre_differs(lambda s: s.normalization(NormMode.MNIST)),
    "PreprocessorSettings.train_transforms": lambda: pre_differs(lambda s: s.train_transforms(R.RandomErasing(1.0))),
    "PreprocessorSettings.val_transforms": lambda: pre_differs(lambda s: s.val_transforms(R.GaussianNoise()), False),
    "PreprocessorSettings.shuffle": lambda: pre_differs(lambda s: s.shuffle(False)),
    "PreprocessorSettings.shuffle_train_set": lambda: pre_differs(lambda s: s.shuffle_train_set(False)),
    "PreprocessorSettings.drop_last": lambda: pre_differs(
        lambda s: s.drop_last(True), observe=lambda s, t: PipelineFeeder(s, 5, seed=3).steps(True)),
    "PreprocessorSettings.cpvs": lambda: pre_differs(lambda s: s.cpvs(False), observe=_cpvs_ready),
    "PreprocessorSettings.using_cpvs": lambda: pre_differs(lambda s: s.using_cpvs(False), observe=_cpvs_ready),
    "PreprocessorSettings.sdmp_factor": lambda: pre_differs(lambda s: s.sdmp_factor(3), observe=_sdmp_cached),
    "PreprocessorSettings.jpeg_dct_scaling": lambda: _jpeg_batches_differ(lambda s: s.jpeg_dct_scaling(True)),
    "PreprocessorSettings.device_augment": lambda: pre_differs(lambda s: s.device_augment(True), observe=_head_ops),
    "PreprocessorSettings.device_decode": lambda: _jpeg_batches_differ(lambda s: s.device_decode(True),
                                                                       observe=_transfer_ops),
    "PreprocessorSettings.pad_channels_to": lambda: pre_differs(
        lambda s: s.pad_channels_to(4), observe=lambda s, t: PipelineFeeder(s, 4, seed=3).sample_shape),
    "PreprocessorSettings.seed": lambda: pre_differs(
        lambda s: s.seed(99), observe=lambda s, t: list(Preprocessor(s, _station()).epoch_order(0))),
    # the loss
    "CrossEntropyLoss.label_smoothing": lambda: plan_differs(loss=(R.CrossEntropyLoss().label_smoothing(0.2),)),
    # the BluePrint's fields (a dataclass: its "setters" are its constructor arguments)
    "BluePrint.name": lambda: _check(
        ArchPlan.from_blueprint(R.BluePrint(MODEL, name="mine"), (H, H, C), K, False).name == "mine"),
    "BluePrint.input_shape": lambda: _refused(task(model=R.BluePrint(MODEL, input_shape=(5, 5, C))),
                                              r"input_shape=\(5, 5, 2\) \(H, W, C\) differs from the data's"),
    "BluePrint.num_classes": lambda: _check(task(model=R.BluePrint(MODEL, num_classes=K), data=(
        ArrayFeeder(_data(), None, BATCH),)).compile().spec.num_classes == K),  # the feeder does not know K
}


def _check(ok: bool) -> None:
    assert ok


def _refused(t: DeepLearningTask, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        t.compile()


def _plans_differ(a: R.Settings, b: R.Settings) -> None:
    assert plan(task(a)) != plan(task(b))


def _station():
    from tr.data import TransferStation

    return TransferStation(4, (6, 6, 1), np.float32)


# optimizers: every setter changes an attribute of the optimizer's ops
for _cls in (R.SGD, R.LARS, R.Adam, R.AdamW):
    _model = LARS_MODEL if _cls is R.LARS else MODEL
    _changes = {"momentum": (0.5,), "weight_decay": (1e-3,), "nesterov": (True,), "trust_coefficient": (0.02,),
                "eps": (1e-4,), "trust_ratio_clip": (7.0,), "betas": (0.8, 0.99)}
    for _name, _args in _changes.items():
        if hasattr(_cls, _name):
            EFFECTS[f"{_cls.__name__}.{_name}"] = (
                lambda c=_cls, n=_name, a=_args, m=_model: optimizer_differs(c(), getattr(c(), n)(*a), m))

# schedulers: every setter changes the table of learning rates the device reads
_SCHED_BASE = {R.MultiStepLR: lambda: R.MultiStepLR(0.1).milestones([2]), R.StepLR: lambda: R.StepLR(0.1).step_size(2),
               R.CosineAnnealingWithWarmRestartsLR: lambda: R.CosineAnnealingWithWarmRestartsLR(0.1).t_0(2),
               R.WSDLR: lambda: R.WSDLR(0.1).decay_start(0.3)}
_SCHED_CHANGES = {"base_lr": (0.5,), "warmup": (2,),
                  "step_size": (3,), "gamma": (0.5,), "milestones": ([3],), "power": (1.0,), "end_lr": (0.05,),
                  "eta_min": (0.05,), "t_0": (3,), "t_mult": (2,), "decay_start": (0.5,)}
# the schedulers whose table the plain step mode changes (the others decay at epoch boundaries only)
_STEP_MODE_ACTS = (R.MultiStepLR, R.PolynomialLR, R.CosineAnnealingLR, R.CosineAnnealingWithWarmRestartsLR, R.WSDLR)


def _step_mode_effect(cls, base, setter: str) -> None:
    """``setter`` (step_by_batch or step_by_epoch) changes the table against the other step mode. A scheduler that
    decays at epoch boundaries only has one table in both plain modes (asserted): its step mode shows on the
    seed's warm-up held per epoch."""
    warm, held = base().warmup(2), {}
    if cls not in _STEP_MODE_ACTS:
        np.testing.assert_array_equal(table(warm.step_by_epoch()), table(warm.step_by_batch()))
        held = {"warmup_by_epoch": True}
    if setter == "step_by_batch":
        sched_differs(warm.step_by_epoch(**held), warm.step_by_batch())
    else:
        sched_differs(warm.step_by_batch(), warm.step_by_batch().step_by_epoch(**held))


# setter options (an argument that changes what its setter does): "<setter>(<argument>)" -> its effect
OPTION_EFFECTS: dict[str, Callable[..., None]] = {
    # the global norm's clipping trains to other weights than the element clamp of the same bound
    "DeepLearningTask.grad_clip(mode='norm')": lambda: _differ(weights(task(grad_clip=(1e-3,)), 1),
                                                               weights(task(grad_clip=(1e-3, "norm")), 1)),
}


def _differ(a: object, b: object) -> None:
    assert a != b


# ReduceLROnPlateau's own setters change the LRs a run takes: observed over 5 epochs from a rule that reduces every
# second epoch whatever the metric does (threshold 1: nothing counts as an improvement)
_PLATEAU = R.ReduceLROnPlateau(0.1).threshold(1.0).patience(1).factor(0.5).monitor("train_loss")
_PLATEAU_CHANGES = {"factor": (0.2,), "patience": (0,), "threshold": (0.0,), "cooldown": (1,), "min_lr": (0.04,),
                    "monitor": ("top1",)}


def _plateau_lrs(rule) -> tuple[list[float], float]:
    t = task(scheduler=(rule,), total_epochs=(5,)).compile()
    return [r.lr for r in t.run().history], t._plateau.lr


for _name, _args in _PLATEAU_CHANGES.items():
    EFFECTS[f"ReduceLROnPlateau.{_name}"] = (
        lambda n=_name, a=_args: _differ(_plateau_lrs(_PLATEAU), _plateau_lrs(getattr(_PLATEAU, n)(*a))))
# threshold 1: relative, nothing improves on the first best (inf * 0 is NaN); absolute, the first epoch does
OPTION_EFFECTS["ReduceLROnPlateau.threshold(mode='abs')"] = lambda: _differ(
    _plateau_lrs(R.ReduceLROnPlateau(0.1).threshold(1.0).patience(0).monitor("train_loss")),
    _plateau_lrs(R.ReduceLROnPlateau(0.1).threshold(1.0, "abs").patience(0).monitor("train_loss")))
for _cls in (R.ConstantLR, R.StepLR, R.MultiStepLR, R.ExponentialLR, R.PolynomialLR, R.CosineAnnealingLR,
             R.CosineAnnealingWithWarmRestartsLR, R.WSDLR, R.ReduceLROnPlateau):
    _base = _SCHED_BASE.get(_cls, lambda c=_cls: c(0.1))
    for _name, _args in _SCHED_CHANGES.items():
        if hasattr(_cls, _name):
            EFFECTS[f"{_cls.__name__}.{_name}"] = (
                lambda b=_base, n=_name, a=_args: sched_differs(b(), getattr(b(), n)(*a)))
    # the warmup's start needs a warmup, step_by_epoch is the default: compared against another base
    EFFECTS[f"{_cls.__name__}.warmup_start_factor"] = (
        lambda b=_base: sched_differs(b().warmup(2), b().warmup(2).warmup_start_factor(0.5)))
    EFFECTS[f"{_cls.__name__}.warmup_start_lr"] = (
        lambda b=_base: sched_differs(b().warmup(2), b().warmup(2).warmup_start_lr(0.01)))
    for _name in ("step_by_batch", "step_by_epoch"):
        EFFECTS[f"{_cls.__name__}.{_name}"] = lambda c=_cls, b=_base, n=_name: _step_mode_effect(c, b, n)
    # the option of a setter: the seed's epoch mode holds the warm-up per epoch too
    OPTION_EFFECTS[f"{_cls.__name__}.step_by_epoch(warmup_by_epoch=True)"] = (
        lambda b=_base: sched_differs(b().warmup(2).step_by_epoch(), b().warmup(2).step_by_epoch(warmup_by_epoch=True)))

# the initializer policy: every setter changes the initial weights
for _name, _init in {"conv": lambda i: i.conv(R.InitKind.XAVIER_NORMAL), "fc": lambda i: i.fc(R.InitKind.ONES),
                     "fan": lambda i: i.fan(R.FanMode.FAN_OUT), "gain": lambda i: i.gain(3.0),
                     "scale": lambda i: i.scale(0.5),
                     "constant": lambda i: i.fc(R.InitKind.CONSTANT).constant(0.25)}.items():
    EFFECTS[f"Initializer.{_name}"] = lambda f=_init: init_differs(f(R.Initializer()))


def _embedding_init() -> None:  # a model with a position embedding (the only "embedding" weight)
    vit = R.seq(R.conv(4, 2, 2, bias=True), R.tokens(), R.layernorm(), R.class_token(), R.fc(K))
    assert weights(task(model=vit)) != weights(task(model=vit, initializer=(R.Initializer().embedding(0.5),)))


EFFECTS["Initializer.embedding"] = _embedding_init

# Public methods of those classes that configure nothing (queries, the lifecycle, the math the ops are checked
# against): they are not settings.
# what every configuration section has besides its setters: freeze/thaw/snapshot/copy and the readers
SECTION = {m for m, _ in inspect.getmembers(Section, inspect.isfunction) if not m.startswith("_")}
NOT_SETTERS = {
    "DeepLearningTask": {"compile", "run", "weights", "parameters", "describe", "host_us_per_step",
                         "time_train_step", "save", "resume", "predict", "load_torch", "to_torch", "dry_run"},
    "Settings": SECTION,
    "PreprocessorSettings": SECTION | {"commit", "open_dataset", "chain", "sample_shape"},
    "CrossEntropyLoss": {"forward", "backward"},
    "optimizer": {"hyperparams", "bias_hyperparams"},
    "scheduler": {"prepare", "curve", "lr", "lr_at", "table", "start", "better", "observe", "table_with"},
    "Initializer": {"spec_for"},
}
CONFIGS = {"DeepLearningTask": DeepLearningTask, "Settings": R.Settings,
           "PreprocessorSettings": type(R.PREPROCESSOR_SETTING), "CrossEntropyLoss": R.CrossEntropyLoss,
           "Initializer": R.Initializer,
           **{c.__name__: c for c in (R.SGD, R.LARS, R.Adam, R.AdamW)},
           **{c.__name__: c for c in (R.ConstantLR, R.StepLR, R.MultiStepLR, R.ExponentialLR, R.PolynomialLR,
                                      R.CosineAnnealingLR, R.CosineAnnealingWithWarmRestartsLR, R.WSDLR,
                                      R.ReduceLROnPlateau)}}


def _group(cls: type) -> str:
    if cls in (R.SGD, R.LARS, R.Adam, R.AdamW):
        return "optimizer"
    return "scheduler" if issubclass(cls, R.ConstantLR.__mro__[1]) else cls.__name__


def public_setters() -> set[str]:
    out = set()
    for name, cls in CONFIGS.items():
        skip = NOT_SETTERS.get(_group(cls), set())
        for m, _ in inspect.getmembers(cls, inspect.isfunction):
            if not m.startswith("_") and m not in skip:
                out.add(f"{name}.{m}")
    out |= {f"BluePrint.{f.name}" for f in fields(R.BluePrint) if f.name != "root"}
    return out


def test_every_public_setter_is_in_the_table():
    have = public_setters()
    assert sorted(have - set(EFFECTS)) == [], "setters without a proven effect: add them to EFFECTS"
    assert sorted(set(EFFECTS) - have) == [], "EFFECTS names setters that no longer exist"
    options = {k.split("(", 1)[0] for k in OPTION_EFFECTS}
    assert sorted(options - have) == [], "OPTION_EFFECTS names setters that no longer exist"


@pytest.mark.parametrize("key", sorted(EFFECTS) + sorted(OPTION_EFFECTS))
def test_setter_has_its_effect(key, request):
    fn = EFFECTS.get(key) or OPTION_EFFECTS[key]
    fixtures = [n for n, p in inspect.signature(fn).parameters.items() if p.default is inspect.Parameter.empty]
    fn(**{n: request.getfixturevalue(n) for n in fixtures})  # capsys, tmp_path, monkeypatch
