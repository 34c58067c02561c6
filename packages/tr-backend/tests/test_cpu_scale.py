"""scale_fwd / scale_bwd (squeeze-excitation's join y = x * s, s [N,1,1,C]) on the CPU backend against torch
autograd in float64; FP32 within 1e-5 of the reference's scale, FP16 (AMP) within 3e-3, as the other ops.
FP16 and BF16 also against torch in float32 from the same rounded values, its results rounded to the dtype: y and dx
(one product) exactly, ds (a sum of H*W products, in another order) within one ulp, plus 2 * 2^-24 * max|ds| where
the products cancel to a small sum (measured on these shapes: every ds equal)."""

import numpy as np
import pytest
import torch
from backend_testkit import (
    SimpleArena,
    as_dtype,
    assert_close,
    assert_rounded,
    assert_within_ulp,
    op,
    run,
    values,
)

from tr.core.errors import ShapeError, TrError


def _setup(n, h, w, c, dtype):
    a = SimpleArena()
    t = {k: a.add(k, shape, dtype) for k, shape in
         (("x", (n, h, w, c)), ("s", (n, 1, 1, c)), ("y", (n, h, w, c)), ("dy", (n, h, w, c)),
          ("dx", (n, h, w, c)), ("ds", (n, 1, 1, c)))}
    return a, t


def _torch(be, t, dtype):
    """y, dx, ds of torch's x * s (broadcast) in ``dtype`` on the arena's (rounded) values."""
    x = torch.tensor(values(be.read(t["x"])), dtype=dtype, requires_grad=True)
    s = torch.tensor(values(be.read(t["s"])), dtype=dtype, requires_grad=True)
    y = x * s
    y.backward(torch.tensor(values(be.read(t["dy"])), dtype=dtype))
    return y.detach(), x.grad, s.grad


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("n,h,w,c", [(2, 5, 7, 3), (4, 1, 1, 16), (3, 8, 8, 96)])
def test_scale_matches_torch(n, h, w, c, dtype):
    a, t = _setup(n, h, w, c, dtype)
    be = a.allocate()
    rng = np.random.default_rng(n * 100 + c)
    for name in ("x", "s", "dy"):
        v = rng.standard_normal(t[name].shape.dims)
        be.write(t[name], v if dtype == "fp32" else as_dtype(v, dtype)[0])
    run(be, op("scale_fwd", x=t["x"], s=t["s"], y=t["y"]),
        op("scale_bwd", x=t["x"], s=t["s"], dy=t["dy"], ds=t["ds"], dx=t["dx"]))
    if dtype != "bf16":
        y, dx, ds = _torch(be, t, torch.float64)
        tol = 3e-3 if dtype == "fp16" else 1e-5
        assert_close(be.read(t["y"]), y.numpy(), tol)
        assert_close(be.read(t["dx"]), dx.numpy(), tol)
        assert_close(be.read(t["ds"]), ds.numpy(), tol)
    if dtype != "fp32":  # one float32 product rounded once: exactly; ds, a float32 sum of H*W products: one ulp
        y, dx, ds = _torch(be, t, torch.float32)
        assert_rounded(be.read(t["y"]), y, dtype)
        assert_rounded(be.read(t["dx"]), dx, dtype)
        assert_within_ulp(be.read(t["ds"]), ds, dtype, 2.0)


def test_a_factor_per_pixel_is_refused_with_the_shapes():
    a = SimpleArena()
    x, s, y = a.add("x", (2, 4, 4, 3), "fp32"), a.add("s", (2, 4, 4, 3), "fp32"), a.add("y", (2, 4, 4, 3), "fp32")
    with pytest.raises(ShapeError, match=r"s \[2,4,4,3\] must be \[2,1,1,3\]"):
        a.allocate().capture("g", [op("scale_fwd", x=x, s=s, y=y)])
    b = SimpleArena()
    x, s, y = b.add("x", (2, 4, 4, 3), "fp32"), b.add("s", (2, 1, 1, 3), "fp32"), b.add("y", (2, 4, 4, 4), "fp32")
    with pytest.raises(TrError, match="y .* must have x's shape"):
        b.allocate().capture("g", [op("scale_fwd", x=x, s=s, y=y)])


def test_without_dx_only_the_factors_gradient():
    a, t = _setup(2, 3, 3, 4, "fp32")
    be = a.allocate()
    rng = np.random.default_rng(7)
    for name in ("x", "s", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims))
    run(be, op("scale_bwd", x=t["x"], s=t["s"], dy=t["dy"], ds=t["ds"]))
    want = (be.read(t["dy"]).astype(np.float64) * be.read(t["x"])).sum(axis=(1, 2), keepdims=True)
    assert_close(be.read(t["ds"]), want)
