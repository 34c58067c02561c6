"""Global-norm gradient clipping (grad_clip(c, mode="norm")) trained for 20 steps in tr (CPU backend, FP32) and in
torch (float64) with torch.nn.utils.clip_grad_norm_ before every step, from identical weights and batches: an MLP
under SGD with momentum and under AdamW (decoupled decay on the weights only, as tr's groups), and a small BN CNN
under SGD. The norm tr computed each step is torch's total norm, the loss agrees at every step and the final
weights agree; clipping is active on most steps (a bound below the gradients' norm), so the test is not vacuous.
Also: AMP's scaled gradients are clipped as their unscaled values, and the bad inputs are clear errors."""

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
    assert_same_weights,
    torch_steps,
)
from test_cnn_resnet_vs_torch import _data as _images  # noqa: E402

from tr.algo.optimizer import SGD, AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import fc, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

STEPS, IN = 20, 12


def _vectors():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((STEPS * BATCH, 1, 1, IN)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    return x, y


def _mlp():
    bp = seq(fc(16, True), relu(), fc(CLASSES, True))
    tm = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(IN, 16), torch.nn.ReLU(),
                             torch.nn.Linear(16, CLASSES))
    return bp, tm


def _train(bp, tm, x, y, opt, lr, max_norm, torch_opt):
    feeder = ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
            .model(bp).optimizer(opt).scheduler(ConstantLR().base_lr(lr)).grad_clip(max_norm, mode="norm")
            .total_epochs(1).data(feeder)).compile()
    tm = tm.double()
    _load(tm, task.parameters())
    losses, norms = [], []

    def step(k, r):
        losses.append(float(r[0]))
        norms.append(float(task.backend.read(task.program.tensor("grad_norm")).ravel()[0]))

    task.on_step(step)
    task.run()
    clipped = 0

    def clip(k: int) -> None:
        nonlocal clipped
        total = float(torch.nn.utils.clip_grad_norm_(tm.parameters(), max_norm))
        clipped += total > max_norm
        assert norms[k] == pytest.approx(total, rel=2e-4), f"step {k}"

    torch_steps(tm, torch_opt(tm), x, y, STEPS, losses, clip)
    assert clipped >= STEPS // 2, f"clipping was active on {clipped} of {STEPS} steps only"
    assert_same_weights(tm, task.parameters())
    return task


def test_an_mlp_under_sgd_with_momentum_follows_torch():
    x, y = _vectors()
    bp, tm = _mlp()
    _train(bp, tm, x, y, SGD().momentum(0.9), 0.1, 0.5,
           lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))


def test_an_mlp_under_adamw_follows_torch():
    x, y = _vectors()
    bp, tm = _mlp()

    def adamw(m):
        decay = [p for n, p in m.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in m.named_parameters() if n.endswith("bias")]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 1e-2}, {"params": rest, "weight_decay": 0.0}],
                                 lr=1e-2)

    _train(bp, tm, x, y, AdamW().weight_decay(1e-2), 1e-2, 0.5, adamw)


def test_a_bn_cnn_under_sgd_follows_torch():
    x, y = _images()
    bp, tm = _cnn()
    _train(bp, tm, x[:STEPS * BATCH], y[:STEPS * BATCH], SGD().momentum(0.9), 0.05, 0.5,
           lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))


def test_amp_clips_the_unscaled_gradients():
    """Under AMP the gradients carry the loss scale and the norm is theirs divided by it: runs at two loss scales
    (powers of two: the FP16 gradients' bits differ only in their exponents) train to the same bytes, and the
    norms follow the FP32 run's within FP16's rounding. (Not the FP32 run's weights over 20 steps: a ReLU that
    FP16 rounds to the other side of its kink changes one step's gradient by ~2 %, which clipping carries on.)"""
    x, y = _vectors()

    def trained(amp: bool, init: float) -> tuple[list[np.ndarray], list[float]]:
        s = Settings().manual_seed(7).global_batch_size(BATCH)
        if amp:
            s.amp().loss_scaling("dynamic", init=init)
        feeder = ArrayFeeder((x.astype(np.float16) if amp else x, y), None, BATCH, shuffle=False,
                             num_classes=CLASSES, dtype=np.float16 if amp else np.float32)
        task = (DeepLearningTask(s).device("cpu").quiet().model(_mlp()[0]).optimizer(SGD().momentum(0.9))
                .scheduler(ConstantLR().base_lr(0.1)).grad_clip(0.5, mode="norm").total_epochs(1).data(feeder))
        task.compile()
        norms: list[float] = []
        task.on_step(lambda k, r: norms.append(float(task.backend.read(task.program.tensor("grad_norm"))[0, 0, 0, 0])))
        task.run()
        return [w for m in task.parameters() for w in m], norms

    small, norms = trained(True, 1024.0)
    large, same_norms = trained(True, 65536.0)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(small, large)) and norms == same_norms
    _, fp32_norms = trained(False, 0.0)
    assert min(norms) > 0.5  # every step clips
    assert np.median(np.abs(np.array(norms) / np.array(fp32_norms) - 1)) < 1e-3


@pytest.mark.parametrize("call,message", [
    (lambda t: t.grad_clip(1.0, mode="l2"), r"grad_clip mode must be one of \('value', 'norm', 'agc'\), got 'l2'"),
    (lambda t: t.grad_clip(-0.5, mode="norm"), r"grad_clip must be a finite number > 0 \(or -1 to disable\)"),
    (lambda t: t.grad_clip(float("inf"), mode="norm"), r"grad_clip must be a finite number > 0"),
    (lambda t: t.grad_clip("1", mode="norm"), r"grad_clip must be a finite number > 0"),
])
def test_bad_clipping_is_refused_at_the_call(call, message):
    with pytest.raises(ConfigError, match=message):
        call(DeepLearningTask())


def test_norm_clipping_is_recorded_and_off_leaves_the_plan_without_it():
    x, y = _vectors()
    feeder = ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES)
    base = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(_mlp()[0])
            .optimizer(SGD()).total_epochs(1).data(feeder))
    plain = base.compile()
    assert "grad_norm" not in plain.program.named and plain.spec.grad_clip_mode == "value"
    ops = [c.op for step in plain.program.steps.values() for c in step.calls]
    assert "clip_grad_norm" not in ops
    clipped = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(_mlp()[0])
               .optimizer(SGD()).total_epochs(1).grad_clip(2.0, mode="norm")
               .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES))).compile()
    assert (clipped.spec.grad_clip, clipped.spec.grad_clip_mode) == (2.0, "norm")
    from tr.task import checkpoint

    d = checkpoint.describe(clipped)
    assert (d["grad_clip"], d["grad_clip_mode"]) == (2.0, "norm") and "grad_clip_mode" not in checkpoint.describe(plain)


def _unitwise_norm(t: torch.Tensor) -> torch.Tensor:
    """timm's unitwise_norm: the whole tensor's norm when 1-D, else each first-dim row's (keepdim)."""
    if t.ndim <= 1:
        return torch.linalg.vector_norm(t, 2)
    return torch.linalg.vector_norm(t, 2, dim=tuple(range(1, t.ndim)), keepdim=True)


def _agc(params, clip: float, eps: float = 1e-3) -> int:
    """timm's adaptive_clip_grad (timm/utils/agc.py), written out: unit-wise norms over every dim but the first.
    Returns how many units it clipped."""
    clipped = 0
    for p in params:
        g = p.grad.detach()
        wn = _unitwise_norm(p.detach()).clamp(min=eps) * clip
        gn = _unitwise_norm(g)
        p.grad.detach().copy_(torch.where(gn < wn, g, g * (wn / gn.clamp(min=1e-6))))
        clipped += int((gn >= wn).sum())
    return clipped


@pytest.mark.parametrize("make", [_cnn, _mlp], ids=["bn_cnn", "mlp"])
def test_adaptive_clipping_follows_timm_s_rule(make):
    """grad_clip(c, mode="agc"): every tensor but the head's clipped unit by unit as timm's adaptive_clip_grad
    (exclude_head) before each SGD step; clipping is active (a small c)."""
    x, y = (_images() if make is _cnn else _vectors())
    x, y = x[:STEPS * BATCH], y[:STEPS * BATCH]
    bp, tm = make()
    feeder = ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
            .model(bp).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(0.1))
            .grad_clip(0.02, mode="agc").total_epochs(1).data(feeder)).compile()
    assert sum(c.op == "clip_agc" for c in task.program.steps["train_a"].calls) >= 2
    tm = tm.double()
    _load(tm, task.parameters())
    losses = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    body = [p for _, m in _param_modules(tm)[:-1] for p in m.parameters(recurse=False)]  # the head excluded
    clipped = 0

    def agc(k: int) -> None:
        nonlocal clipped
        clipped += _agc(body, 0.02)

    torch_steps(tm, torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9), x, y, STEPS, losses, agc)
    assert_same_weights(tm, task.parameters(), biases=False)
    assert clipped >= STEPS, f"AGC clipped {clipped} units in {STEPS} steps: the test would not see it"


def test_adaptive_clipping_divides_the_loss_scale_out():
    """Under AMP the scaled gradients are clipped as their unscaled values: two loss scales, the same bytes."""
    x, y = _vectors()

    def trained(init: float) -> list[bytes]:
        s = Settings().manual_seed(7).global_batch_size(BATCH).amp().loss_scaling("dynamic", init=init)
        feeder = ArrayFeeder((x.astype(np.float16), y), None, BATCH, shuffle=False, num_classes=CLASSES,
                             dtype=np.float16)
        task = (DeepLearningTask(s).device("cpu").quiet().model(_mlp()[0]).optimizer(SGD().momentum(0.9))
                .scheduler(ConstantLR().base_lr(0.1)).grad_clip(0.02, mode="agc").total_epochs(1).data(feeder))
        task.compile().run()
        return [w.tobytes() for m in task.parameters() for w in m]

    assert trained(1024.0) == trained(65536.0)

