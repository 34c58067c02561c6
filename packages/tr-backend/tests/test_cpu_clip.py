"""clip_grad_norm on the CPU backend against torch.nn.utils.clip_grad_norm_: the global norm over a span of several
gradient regions (scaled by a loss scale the op divides out), the divisor the optimizer then divides by (clipping
active and not), a flagged step, and the rule's refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from backend_testkit import BN_B, DEEP_CONV, FC_B, FC_W, SCALAR_FP32, SCALAR_INT32, SimpleArena, op

from tr.core.errors import BackendError
from tr.core.memory import Region, Role, Span

SHAPES = [((7,), BN_B), ((5,), FC_B), ((5, 1, 1, 9), FC_W), ((4, 3, 3, 2), DEEP_CONV)]


def _arena():
    a = SimpleArena()
    grads = [a.add(f"g_{group.name}", shape, "fp32", Region(Role.GRAD, group)) for shape, group in SHAPES]
    t = {name: a.add(name, (1,), region=SCALAR_FP32) for name in ("scale", "divisor", "norm")}
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    return a, grads, t


def _clip(max_norm: float, scale: float, flag: int = 0, seed: int = 0):
    a, grads, t = _arena()
    be = a.allocate()
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(g.shape.dims).astype(np.float32) for g in grads]
    for g, v in zip(grads, values):
        be.write(g, v * np.float32(scale))  # scaled, as AMP's backward leaves them
    be.write(t["scale"], [scale])
    be.write(t["flag"], [flag])
    call = op("clip_grad_norm", g=Span.of(Role.GRAD), scale=t["scale"], flag=t["flag"], divisor=t["divisor"],
              norm=t["norm"], max_norm=max_norm)
    be.launch(be.capture("clip", [call]))
    read = {k: float(be.read(t[k]).ravel()[0]) for k in ("divisor", "norm")}
    scaled = [be.read(g).astype(np.float64) for g in grads]
    return read, values, scaled


@pytest.mark.parametrize("max_norm,scale", [(0.5, 1.0), (0.5, 1024.0), (100.0, 8.0), (3.0, 4.0)])
def test_the_divisor_gives_torch_s_clipped_gradients(max_norm, scale):
    got, values, scaled = _clip(max_norm, scale)
    params = [torch.nn.Parameter(torch.zeros(v.shape, dtype=torch.float64)) for v in values]
    for p, v in zip(params, values):
        p.grad = torch.from_numpy(v.astype(np.float64))
    total = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    assert got["norm"] == pytest.approx(total, rel=1e-6)
    clipping = max_norm / (total + 1e-6) < 1.0
    assert (got["divisor"] != scale) == clipping
    for g, p in zip(scaled, params):  # what the optimizer reads: g / divisor
        np.testing.assert_allclose(g / got["divisor"], p.grad.numpy(), rtol=1e-6, atol=1e-12)


def test_a_flagged_step_keeps_the_loss_scale_as_divisor():
    got, _, _ = _clip(0.1, 64.0, flag=1)
    assert got["divisor"] == 64.0 and got["norm"] > 0.1


@pytest.mark.parametrize("max_norm", [0.0, -1.0, float("inf"), float("nan")])
def test_a_max_norm_that_is_not_a_finite_positive_number_is_refused(max_norm):
    a, _, t = _arena()
    be = a.allocate()
    call = op("clip_grad_norm", g=Span.of(Role.GRAD), scale=t["scale"], flag=t["flag"], divisor=t["divisor"],
              norm=t["norm"], max_norm=max_norm)
    with pytest.raises(BackendError, match="attribute 'max_norm' = "):
        be.capture("clip", [call])
