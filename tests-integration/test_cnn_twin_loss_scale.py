"""benchmarks/cnn_torch.py calibrates GradScaler's loss scale with backward passes only: the scale halves until the
gradients are finite, and no optimizer step runs meanwhile (no momentum buffer, no weight moved), so a fused SGD
that advances its momentum on a skipped step (torch 2.11) never sees one (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from cnn_torch import calibrate_loss_scale  # noqa: E402


def _setup(init_scale: float):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    x, y = torch.randn(64, 16) * 100, torch.randint(0, 10, (64,))

    def forward_backward():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        return loss

    return model, opt, scaler, forward_backward


def test_an_overflowing_scale_is_halved_without_an_optimizer_step():
    model, opt, scaler, fb = _setup(2.0**126)  # FP32 gradients of ~1e2 overflow at this scale
    before = [p.detach().clone() for p in model.parameters()]
    passes = calibrate_loss_scale(scaler, opt, fb)
    assert passes > 1
    assert scaler.get_scale() == 2.0 ** (126 - (passes - 1))  # one halving per overflowing pass
    assert not opt.state  # no momentum buffer was made
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    fb()  # at the calibrated scale the first real step applies
    scaler.step(opt)
    s = scaler.get_scale()
    scaler.update()
    assert scaler.get_scale() == s and opt.state


def test_a_scale_that_does_not_overflow_takes_one_pass():
    _, opt, scaler, fb = _setup(1024.0)
    assert calibrate_loss_scale(scaler, opt, fb) == 1 and scaler.get_scale() == 1024.0


def test_a_loss_that_is_not_finite_is_refused():
    model, opt, scaler, fb = _setup(1024.0)
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="loss itself is not finite"):
        calibrate_loss_scale(scaler, opt, fb, limit=5)
