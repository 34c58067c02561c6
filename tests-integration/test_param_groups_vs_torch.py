"""Parameter groups (task.param_group) trained for 20 steps in tr (CPU backend, FP32) and in torch (float64) with the
same optimizer param groups, from identical weights and batches: a BN CNN and a residual net under AdamW (the norm
layers at half the rate with their own decay, biases at twice the rate), under SGD with momentum (weights at a
tenth of the rate, the fc layer's group by name at three times, overriding), a frozen group (lr_mult 0) that does
not move, and the selections that pick nothing or cannot be honoured."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cnn_resnet_vs_torch import (  # noqa: E402
    BATCH,
    CLASSES,
    _cnn,
    _load,
    _param_modules,
    _resnet,
    assert_same_weights,
    torch_steps,
)
from test_cnn_resnet_vs_torch import _data as _images  # noqa: E402

from tr.algo.optimizer import LARS, SGD, AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402
from tr.core.memory import Role  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

STEPS = 20


def _kind(module: torch.nn.Module, name: str) -> str:
    if isinstance(module, torch.nn.BatchNorm2d):
        return "norm"
    return "bias" if name == "bias" else "weight"


def _torch_groups(tm, lr: float, wd: float, mult: dict, decay: dict, linear_mult: float | None = None):
    """torch param groups mirroring tr's selection: weights take ``wd`` unless ``decay`` says, bias-like none."""
    groups = []
    for _, m in _param_modules(tm):
        for name, p in m.named_parameters(recurse=False):
            kind = _kind(m, name)
            lr_mult = mult.get(kind, 1.0)
            if linear_mult is not None and isinstance(m, torch.nn.Linear):
                lr_mult = linear_mult
            groups.append({"params": [p], "lr": lr * lr_mult,
                           "weight_decay": decay.get(kind, wd if kind == "weight" else 0.0)})
    return groups


def _run(make, opt, lr: float, calls, torch_opt):
    """_run_with, the task configured by ``calls``: param_group's (args, kwargs) in order."""
    def configure(task):
        for args, kw in calls:
            task.param_group(*args, **kw)
        return task

    return _run_with(make, opt, lr, torch_opt, configure)


@pytest.mark.parametrize("make", [_cnn, _resnet], ids=["cnn", "resnet"])
def test_adamw_groups_follow_torch(make):
    calls = [(("norm",), dict(lr_mult=0.5, weight_decay=0.01)), (("bias",), dict(lr_mult=2.0))]
    _run(make, AdamW().weight_decay(0.05), 1e-2, calls,
         lambda tm: torch.optim.AdamW(_torch_groups(tm, 1e-2, 0.05, {"norm": 0.5, "bias": 2.0}, {"norm": 0.01})))


def test_sgd_groups_by_kind_and_by_name_follow_torch():
    # (no weight decay: tr's SGD decays the weight outside the momentum, the seed's rule, torch's inside it)
    calls = [(("weight",), dict(lr_mult=0.1)), (("fc_*",), dict(lr_mult=3.0))]  # fc_w: the later group counts
    _run(_cnn, SGD().momentum(0.9), 0.05, calls,
         lambda tm: torch.optim.SGD(_torch_groups(tm, 0.05, 0.0, {"weight": 0.1}, {}, linear_mult=3.0),
                                    momentum=0.9))


def test_a_frozen_group_does_not_move():
    calls = [(("norm",), dict(lr_mult=0.0))]
    task, start, final = _run(_cnn, SGD().momentum(0.9), 0.05, calls,
                              lambda tm: torch.optim.SGD(_torch_groups(tm, 0.05, 0.0, {"norm": 0.0}, {}),
                                                         momentum=0.9))
    kinds = [k for k, _ in _param_modules(_cnn()[1])]
    for kind, a, b in zip(kinds, start, final):
        assert all(np.array_equal(x, y) for x, y in zip(a, b)) == (kind == "bn"), kind


def _task(opt=None):
    bp, _ = _cnn()
    x, y = _images()
    feeder = ArrayFeeder((x[:16], y[:16]), None, BATCH, shuffle=False, num_classes=CLASSES)
    return (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(bp)
            .optimizer(opt or SGD()).total_epochs(1).data(feeder))


@pytest.mark.parametrize("call,message", [
    (lambda t: t.param_group("ln_*", lr_mult=2.0).compile(), r"param_group\('ln_\*'\) selects no parameter of this "
                                                             r"model: its parameter groups are \["),
    (lambda t: t.param_group("norm", lr_mult=-1.0), r"param_group\('norm'\): lr_mult must be a finite number >= 0"),
    (lambda t: t.param_group("norm", weight_decay=float("nan")), "weight_decay must be a finite number >= 0"),
    (lambda t: t.param_group("", lr_mult=2.0), "a parameter group selects by kind"),
])
def test_a_bad_group_is_a_clear_error(call, message):
    with pytest.raises(ConfigError, match=message):
        call(_task())


def test_groups_with_lars_are_refused_at_compile():
    with pytest.raises(ConfigError, match="parameter groups with LARS are not supported"):
        _task(LARS()).param_group("norm", lr_mult=0.5).compile()


def test_without_groups_the_plan_is_the_two_range_updates_and_groups_are_recorded():
    from tr.task import checkpoint

    plain = _task().compile()
    ops = [c for c in plain.program.steps["train_a"].calls if c.op == "range_optimizer"]
    assert len(ops) == 2 and "param_groups" not in checkpoint.describe(plain)
    grouped = _task().param_group("bias", lr_mult=2.0).compile()
    ops = [c for c in grouped.program.steps["train_a"].calls if c.op == "range_optimizer"]
    assert sorted(c.label for c in ops) == ["parameter group bn_b", "parameter group bn_w",
                                            "parameter group fc_b", "parameter group fc_w",
                                            "parameter group first_conv"]
    assert checkpoint.describe(grouped)["param_groups"] == [{"select": "bias", "lr_mult": 2.0,
                                                             "weight_decay": None}]


def _module_layers(task) -> list[int]:
    """The tr layer of each module task.parameters() lists (its order: (layer, a norm's) sorted)."""
    keys = {(i.layer, int(i.tensor.region.group.norm)) for i in task.program.inits
            if i.tensor.region.role is Role.PARAM}
    return [layer for layer, _ in sorted(keys)]


@pytest.mark.parametrize("make", [_cnn, _resnet], ids=["cnn", "resnet"])
def test_layer_wise_rate_decay_follows_torch(make):
    """layer_decay(0.6): layer k of n trains at 0.6 ** (n - 1 - k) times the rate, the head at the full rate, on top
    of a param group's multiplier (biases at twice): torch's per-layer param groups (BEiT/timm's recipe)."""
    bp, tm = make()
    probe = (_task().model(bp).layer_decay(0.6).compile())
    calls = [c for c in probe.program.steps["train_a"].calls if c.op == "tensor_optimizer"]
    layers = sorted({c.layer for c in calls})
    factor = {layer: 0.6 ** (len(layers) - 1 - k) for k, layer in enumerate(layers)}
    trained = [i for i in probe.program.inits if i.tensor.region.role is Role.PARAM]
    # one update a tensor; (the cnn's conv and BN are one fused layer: two layers there, five in the resnet)
    assert factor[layers[-1]] == 1.0 and len(calls) == len(trained) and len(layers) >= 2
    module_layers = _module_layers(probe)

    def torch_opt(m):
        groups = []
        for (kind, mod), layer in zip(_param_modules(m), module_layers):
            for name, p in mod.named_parameters(recurse=False):
                mult = 2.0 if (name == "bias" and kind != "bn") else 1.0
                wd = 0.05 if (name == "weight" and kind != "bn") else 0.0
                groups.append({"params": [p], "lr": 1e-2 * factor[layer] * mult, "weight_decay": wd})
        return torch.optim.AdamW(groups)

    task, _, _ = _run_with(make, AdamW().weight_decay(0.05), 1e-2, torch_opt,
                           lambda t: t.param_group("bias", lr_mult=2.0).layer_decay(0.6))
    assert _module_layers(task) == module_layers


def _run_with(make, opt, lr, torch_opt, configure):
    """Train ``make``'s model STEPS steps in tr (the task ``configure``d) and in torch (``torch_opt``), from the same
    weights: the loss at every step and the final weights agree. Returns (task, its parameters before, after)."""
    bp, tm = make()
    tm = tm.double()
    x, y = _images()
    x, y = x[:STEPS * BATCH], y[:STEPS * BATCH]
    feeder = ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES)
    task = configure(DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
                     .model(bp).optimizer(opt).scheduler(ConstantLR().base_lr(lr)).total_epochs(1).data(feeder))
    task.compile()
    _load(tm, task.parameters())
    start = [tuple(a.copy() for a in p) for p in task.parameters()]
    losses = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    torch_steps(tm, torch_opt(tm), x, y, STEPS, losses)
    final = task.parameters()
    assert_same_weights(tm, final)
    return task, start, final


@pytest.mark.parametrize("decay", [0, 1.5, -0.1, True, "0.5"])
def test_a_bad_layer_decay_is_refused_at_the_call(decay):
    with pytest.raises(ConfigError, match=r"layer_decay must be a number in \(0, 1\]"):
        _task().layer_decay(decay)


def test_layer_decay_with_lars_is_refused_at_compile():
    with pytest.raises(ConfigError, match="layer_decay with LARS is not supported"):
        _task(LARS()).layer_decay(0.7).compile()


def test_groups_by_tensor_name_follow_torch():
    """param_group("L0.*") picks the first layer's tensors by name (each tensor then takes its own update); a later
    kind group overrides it where both pick: against torch param groups built from the same layer map."""
    bp, _ = _resnet()
    module_layers = _module_layers(_task().model(bp).param_group("L0.*", lr_mult=0.3).compile())

    def torch_opt(m):
        groups = []
        for (kind, mod), layer in zip(_param_modules(m), module_layers):
            for name, p in mod.named_parameters(recurse=False):
                mult = 0.3 if layer == 0 else 1.0
                if name == "bias" and kind == "fc":
                    mult = 2.0  # the "bias" group, given after
                wd = 0.05 if (name == "weight" and kind != "bn") else 0.0
                groups.append({"params": [p], "lr": 1e-2 * mult, "weight_decay": wd})
        return torch.optim.AdamW(groups)

    task, _, _ = _run_with(_resnet, AdamW().weight_decay(0.05), 1e-2, torch_opt,
                           lambda t: t.param_group("L0.*", lr_mult=0.3).param_group("bias", lr_mult=2.0))
    calls = [c for c in task.program.steps["train_a"].calls if c.op == "tensor_optimizer"]
    assert {c.attrs["lr_scale"] for c in calls} == {0.3, 1.0, 2.0}


def test_a_tensor_name_pattern_that_picks_nothing_names_the_tensors():
    with pytest.raises(ConfigError, match=r"param_group\('L99\.\*'\) selects no parameter of this model: its "
                                          r"trained tensors are \['L0\.w'"):
        _task().param_group("L99.*", lr_mult=2.0).compile()

