"""Grouped and depthwise conv_fwd / conv_bwd (attribute ``groups``) against torch.nn.functional.conv2d's
``groups`` (float64 reference, NCHW <-> NHWC, KRSC weights [K, R, S, C/groups]); FP32 within 1e-5 of the
reference's scale, FP16 (AMP) within 3e-3, as test_cpu_conv.py; FP16 and BF16 also within one ulp of torch's
float32 results from the same rounded inputs, rounded to the dtype, plus FLOOR * 2^-24 * max|e| where products
cancel, as test_cpu_conv.py."""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, as_dtype, assert_close, assert_within_ulp, nchw, nhwc, op, run, values

FLOOR = 2.0  # test_cpu_conv.py's

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


def _reference(be, t, stride, pad, groups, dtype=torch.float64):
    x, w = nchw(values(be.read(t["x"])), dtype), nchw(values(be.read(t["w"])), dtype)
    y = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad, groups=groups)
    y.backward(nchw(values(be.read(t["dy"])), dtype))
    return nhwc(y), nhwc(w.grad), nhwc(x.grad)


def _fill(be, t, seed, dtype="fp64"):
    rng = np.random.default_rng(seed)
    for name in ("x", "w", "dy"):
        v = rng.standard_normal(t[name].shape.dims)
        be.write(t[name], v if dtype == "fp64" else as_dtype(v, dtype)[0])


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("n,h,w,c,k,r,stride,pad,groups", CASES)
def test_grouped_conv_forward_backward(n, h, w, c, k, r, stride, pad, groups, dtype):
    """FP16 / BF16 (AMP): the op reads and writes the 16-bit dtype (BF16 as bit patterns), computes in FP32."""
    a, t = _setup(n, h, w, c, k, r, stride, pad, groups, dtype)
    be = a.allocate()
    _fill(be, t, h * 13 + k + groups, "fp64" if dtype == "fp32" else dtype)
    attrs = {"kernel": r, "stride": stride, "padding": pad, "groups": groups}
    run(be, op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
        op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs))
    assert be.view(t["y"]).dtype == {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}[dtype]
    if dtype != "bf16":
        y, dw, dx = _reference(be, t, stride, pad, groups)
        tol = 3e-3 if dtype == "fp16" else 1e-5
        assert_close(be.read(t["y"]), y, tol)
        assert_close(be.read(t["dw"]), dw, tol)
        assert_close(be.read(t["dx"]), dx, tol)
    if dtype != "fp32":
        ref32 = _reference(be, t, stride, pad, groups, torch.float32)
        for name, e in zip(("y", "dw", "dx"), ref32, strict=True):
            assert_within_ulp(be.read(t[name]), e, dtype, FLOOR)


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
