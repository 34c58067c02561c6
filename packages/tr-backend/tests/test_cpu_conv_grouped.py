"""Grouped and depthwise conv_fwd / conv_bwd (attribute ``groups``) against torch.nn.functional.conv2d's
``groups`` (float64 reference, NCHW <-> NHWC, KRSC weights [K, R, S, C/groups]); FP32 within 1e-5 of the
reference's scale, FP16 (AMP) within 3e-3, as test_cpu_conv.py."""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, assert_close, nchw, nhwc, op, run

# (N, H, W, C, K, R, stride, padding, groups)
CASES = [
    (2, 6, 6, 4, 4, 3, 1, 1, 4),     # depthwise 3x3
    (2, 7, 7, 6, 6, 3, 2, 1, 6),     # depthwise, stride 2 (MobileNet's downsampling)
    (2, 8, 8, 3, 6, 5, 1, 2, 3),     # depthwise with multiplier 2, 5x5
    (2, 6, 5, 8, 4, 3, 1, 0, 2),     # two groups, unpadded
    (3, 5, 5, 6, 9, 1, 1, 0, 3),     # pointwise grouped (ShuffleNet-style)
    (1, 9, 9, 4, 8, 3, 3, 1, 4),     # stride > 1 with padding and a multiplier
]


def _setup(n, h, w, c, k, r, stride, pad, groups, dtype="fp32", with_dx=True):
    p = (h + 2 * pad - r) // stride + 1
    q = (w + 2 * pad - r) // stride + 1
    a = SimpleArena()
    t = {"x": a.add("x", (n, h, w, c), dtype), "w": a.add("w", (k, r, r, c // groups), dtype),
         "y": a.add("y", (n, p, q, k), dtype), "dy": a.add("dy", (n, p, q, k), dtype),
         "dw": a.add("dw", (k, r, r, c // groups), dtype)}
    if with_dx:
        t["dx"] = a.add("dx", (n, h, w, c), dtype)
    return a, t


def _reference(be, t, stride, pad, groups):
    x, w = nchw(be.read(t["x"]).astype(np.float64)), nchw(be.read(t["w"]).astype(np.float64))
    y = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad, groups=groups)
    y.backward(nchw(be.read(t["dy"]).astype(np.float64)))
    return nhwc(y), nhwc(w.grad), nhwc(x.grad)


def _fill(be, t, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    for name in ("x", "w", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims).astype(dtype))


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("n,h,w,c,k,r,stride,pad,groups", CASES)
def test_grouped_conv_forward_backward(n, h, w, c, k, r, stride, pad, groups, dtype):
    """FP16 (AMP): the op reads and writes FP16, computes in FP32 (the view's dtype is FP16)."""
    a, t = _setup(n, h, w, c, k, r, stride, pad, groups, dtype)
    be = a.allocate()
    _fill(be, t, h * 13 + k + groups, np.float16 if dtype == "fp16" else np.float64)
    attrs = {"kernel": r, "stride": stride, "padding": pad, "groups": groups}
    run(be, op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
        op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs))
    assert be.view(t["y"]).dtype == (np.float16 if dtype == "fp16" else np.float32)
    y, dw, dx = _reference(be, t, stride, pad, groups)
    tol = 3e-3 if dtype == "fp16" else 1e-5
    assert_close(be.read(t["y"]), y, tol)
    assert_close(be.read(t["dw"]), dw, tol)
    assert_close(be.read(t["dx"]), dx, tol)


def test_grouped_conv_repeated_launches_and_wgrad_only():
    """A captured graph relaunched on new data keeps dx's zero border and sums dw afresh; without dx only dw."""
    a, t = _setup(2, 6, 6, 4, 8, 3, 2, 1, 4)
    be = a.allocate()
    attrs = {"stride": 2, "padding": 1, "groups": 4}
    g = be.capture("g", [op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
                         op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs)])
    for seed in range(3):
        _fill(be, t, seed)
        be.launch(g)
        y, dw, dx = _reference(be, t, 2, 1, 4)
        assert_close(be.read(t["y"]), y)
        assert_close(be.read(t["dw"]), dw)
        assert_close(be.read(t["dx"]), dx)
    a, t = _setup(2, 5, 5, 3, 3, 3, 1, 1, 3, with_dx=False)
    be = a.allocate()
    _fill(be, t, 9)
    run(be, op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], stride=1, padding=1, groups=3))
    assert_close(be.read(t["dw"]), _reference(be, t, 1, 1, 3)[1])


def test_groups_that_do_not_fit_the_shapes_are_refused():
    a = SimpleArena()
    x, w, y = a.add("x", (1, 5, 5, 6)), a.add("w", (4, 3, 3, 2)), a.add("y", (1, 5, 5, 4))
    be = a.allocate()
    with pytest.raises(Exception, match=r"groups=4 must divide x's C=6"):
        be.capture("g", [op("conv_fwd", x=x, w=w, y=y, padding=1, groups=4)])
    with pytest.raises(Exception, match=r"has C=2 but x .* has C=6 \(C/groups = 3\)"):
        be.capture("g", [op("conv_fwd", x=x, w=w, y=y, padding=1, groups=2)])
    with pytest.raises(Exception, match="groups"):
        be.capture("g", [op("conv_fwd", x=x, w=w, y=y, padding=1, groups=0)])
