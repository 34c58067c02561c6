"""act_fwd / act_bwd / act_inf for every kind in tr.core.ops.ACTIVATIONS against PyTorch (float64).

Inputs include the kinks (0, +-3, 6) and large magnitudes (+-100, where exp overflows). Tolerance: FP32
within 1e-5 of the reference relative to the data's scale, except gelu (erf by the Numerical Recipes
approximation, fractional error < 1.2e-7, evaluated in float32): 2e-5. FP16 within 2e-3. FP16 and BF16 also
against torch in float32 from the same rounded inputs, its results rounded to the dtype (below: EXACT, FLOOR).
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_testkit import (
    HALF_DTYPES,
    SimpleArena,
    as_dtype,
    assert_close,
    assert_rounded,
    assert_within_ulp,
    op,
    run,
)

from tr.core.ops import ACTIVATIONS

TORCH = {
    "relu": F.relu, "tanh": torch.tanh, "silu": F.silu, "sigmoid": torch.sigmoid, "relu6": F.relu6,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01), "hardswish": F.hardswish, "elu": lambda x: F.elu(x, 1.0),
    "gelu": lambda x: F.gelu(x, approximate="none"),
}
TOL = {"gelu": 2e-5}
# FP16 / BF16: against torch in float32 from the same rounded inputs, the results rounded to the dtype. Kinds whose
# float32 operations are torch's (a selection, a product by one slope) exactly; the others within one ulp of the
# output (the transcendental functions and their derivatives are other float32 evaluations of the same values),
# plus 2 * 2^-24 * max|e| where terms cancel: tanh's 1 - tanh^2 and gelu's 1 + erf for |x| > 5 leave a value far
# below the tensor's scale whose float32 error, in either evaluation, is of the order of 2^-24 of the terms
# (measured: up to 38 BF16 ulps of such a value, all within this floor; tr's gelu is the closer to float64 there).
EXACT = ("relu", "relu6", "leaky_relu")
FLOOR = 2.0


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


def _reference32(kind, x32, dy32):
    """torch's y and dx in float32 from the same (rounded) x and dy."""
    xt = torch.tensor(x32, dtype=torch.float32, requires_grad=True)
    y = TORCH[kind](xt)
    y.backward(torch.tensor(dy32, dtype=torch.float32))
    return y.detach(), xt.grad


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


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_activation_half(kind, dtype):
    shape = (2, 2, 3, 8)
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("x", "y", "dy", "dx")}
    be = a.allocate()
    x, x32 = as_dtype(np.clip(_inputs(*shape), -8, 8), dtype)
    dy, dy32 = as_dtype(np.random.default_rng(14).standard_normal(shape), dtype)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("act_fwd", x=t["x"], y=t["y"], kind=kind), op("act_bwd", x=t["x"], dy=t["dy"], dx=t["dx"], kind=kind))
    assert be.view(t["y"]).dtype == x.dtype  # float16, or BF16's uint16 bit patterns
    if dtype == "fp16":
        y, dx = _reference(kind, x32.astype(np.float64), dy32.astype(np.float64))
        assert_close(be.read(t["y"]), y, 2e-3)
        assert_close(be.read(t["dx"]), dx, 2e-3)
    y, dx = _reference32(kind, x32, dy32)
    if kind in EXACT:
        assert_rounded(be.read(t["y"]), y, dtype)
        assert_rounded(be.read(t["dx"]), dx, dtype)
    else:
        assert_within_ulp(be.read(t["y"]), y, dtype, FLOOR)
        assert_within_ulp(be.read(t["dx"]), dx, dtype, FLOOR)


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
