"""act_fwd / act_bwd / act_inf for every kind in tr.core.ops.ACTIVATIONS against PyTorch (float64).

Inputs include the kinks (0, +-3, 6) and large magnitudes (+-100, where exp overflows). Tolerance: FP32
within 1e-5 of the reference relative to the data's scale, except gelu (erf by the Numerical Recipes
approximation, fractional error < 1.2e-7, evaluated in float32): 2e-5. FP16 within 2e-3.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_testkit import SimpleArena, assert_close, op, run

from tr.core.ops import ACTIVATIONS

TORCH = {
    "relu": F.relu, "tanh": torch.tanh, "silu": F.silu, "sigmoid": torch.sigmoid, "relu6": F.relu6,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01), "hardswish": F.hardswish, "elu": lambda x: F.elu(x, 1.0),
    "gelu": lambda x: F.gelu(x, approximate="none"),
}
TOL = {"gelu": 2e-5}


def _inputs(n=2, h=3, w=4, c=5):
    rng = np.random.default_rng(11)
    x = 4.0 * rng.standard_normal((n, h, w, c))
    special = np.array([0.0, 3.0, -3.0, 6.0, -6.0, 100.0, -100.0, 1e-4, -1e-4, 2.5, -2.5, 0.5])
    x.reshape(-1)[:special.size] = special
    return x


def _reference(kind, x, dy):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = TORCH[kind](xt)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy()


def test_catalogue_kinds_are_all_tested():
    assert set(TORCH) == set(ACTIVATIONS)


@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_activation_forward_backward(kind):
    shape = (2, 3, 4, 5)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "y", "dy", "dx", "yi")}
    be = a.allocate()
    x = _inputs(*shape).astype(np.float32)
    dy = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("act_fwd", x=t["x"], y=t["y"], kind=kind), op("act_inf", x=t["x"], y=t["yi"], kind=kind),
        op("act_bwd", x=t["x"], dy=t["dy"], dx=t["dx"], kind=kind))
    y, dx = _reference(kind, x.astype(np.float64), dy.astype(np.float64))
    tol = TOL.get(kind, 1e-5)
    assert_close(be.read(t["y"]), y, tol)
    assert_close(be.read(t["yi"]), y, tol)
    assert_close(be.read(t["dx"]), dx, tol)


@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("alias", ["x", "dy"])
def test_activation_backward_in_place(kind, alias):
    shape = (1, 2, 3, 7)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "dy")}
    be = a.allocate()
    x = _inputs(*shape).astype(np.float32)
    dy = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("act_bwd", x=t["x"], dy=t["dy"], dx=t[alias], kind=kind))
    _, dx = _reference(kind, x.astype(np.float64), dy.astype(np.float64))
    assert_close(be.read(t[alias]), dx, TOL.get(kind, 1e-5))


def test_relu_mask_forward_and_backward():
    shape = (3, 2, 2, 4)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "y", "dy", "dx")}
    t["mask"] = a.add("mask", shape, "int8")
    be = a.allocate()
    x = _inputs(*shape)
    be.write(t["x"], x)
    be.write(t["dy"], np.arange(np.prod(shape)).reshape(shape) + 1.0)
    run(be, op("act_fwd", x=t["x"], y=t["y"], mask=t["mask"], kind="relu"))
    be.write(t["x"], np.zeros(shape))  # the backward must use the mask, not x
    run(be, op("act_bwd", x=t["x"], dy=t["dy"], dx=t["dx"], mask=t["mask"], kind="relu"))
    mask = be.read(t["mask"])
    assert mask.dtype == np.int8 and set(np.unique(mask)) <= {0, 1}
    np.testing.assert_array_equal(mask, (x > 0).astype(np.int8))
    np.testing.assert_array_equal(be.read(t["dx"]), np.where(x > 0, be.read(t["dy"]), 0))


@pytest.mark.parametrize("kind", ["relu", "silu", "gelu", "hardswish"])
def test_activation_fp16(kind):
    shape = (2, 2, 3, 8)
    a = SimpleArena()
    t = {name: a.add(name, shape, "fp16") for name in ("x", "y", "dy", "dx")}
    be = a.allocate()
    x = np.clip(_inputs(*shape), -8, 8).astype(np.float16)
    dy = np.random.default_rng(14).standard_normal(shape).astype(np.float16)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("act_fwd", x=t["x"], y=t["y"], kind=kind), op("act_bwd", x=t["x"], dy=t["dy"], dx=t["dx"], kind=kind))
    y, dx = _reference(kind, x.astype(np.float64), dy.astype(np.float64))
    assert be.view(t["y"]).dtype == np.float16
    assert_close(be.read(t["y"]), y, 2e-3)
    assert_close(be.read(t["dx"]), dx, 2e-3)


def test_normal_cdf_approximation_accuracy():
    from tr.backend.cpu.ops.activation import _phi_cdf

    x = np.linspace(-12, 12, 4001).astype(np.float32)
    out, t, u = (np.empty_like(x) for _ in range(3))
    _phi_cdf(x, out, t, u)
    ref = np.array([0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x])
    rel = np.abs(out - ref) / np.maximum(ref, 1e-30)
    assert float(np.max(np.abs(out - ref))) < 3e-7
    # the left tail keeps its relative accuracy (float32 rounding of x^2 dominates far out)
    assert float(np.max(rel[(x < 0) & (x > -5)])) < 2e-6
    assert float(np.max(rel[x < 0])) < 5e-5


def test_unknown_kind_is_a_capture_error():
    a = SimpleArena()
    x, y = a.add("x", (1, 1, 1, 4)), a.add("y", (1, 1, 1, 4))
    be = a.allocate()
    with pytest.raises(Exception, match=r"op #0 act_fwd .*kind 'swish' is not one of"):
        be.capture("g", [op("act_fwd", x=x, y=y, kind="swish")])
