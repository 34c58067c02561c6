"""Max, average and global average pooling against torch.nn.functional (float64 reference).

Cases cover overlapping windows (stride < kernel), tiling (stride = kernel), gaps (stride > kernel),
padding, rectangular kernels and sizes the stride does not divide. Max pooling values, masks and gradients
must match exactly (they are selections and sums of equal-order values); averages within 1e-6 relative.
FP16 and BF16: against torch in float32 from the same rounded inputs, its results rounded to the dtype.
"""

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
    nchw,
    nhwc,
    op,
    run,
    values,
)

# (N, H, W, C, kernel, stride, padding)
CASES = [
    (2, 6, 6, 3, 2, 2, 0),
    (2, 7, 7, 4, 3, 2, 1),
    (1, 9, 8, 2, 3, 1, 1),
    (2, 8, 8, 3, 2, 3, 0),
    (1, 7, 6, 5, (3, 2), (2, 1), (1, 0)),
    (3, 5, 5, 2, 5, 1, 2),
]


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


def _setup(n, h, w, c, k, s, p, with_mask=True):
    (kh, kw), (sh, sw), (ph, pw) = _pair(k), _pair(s), _pair(p)
    po, qo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    a = SimpleArena()
    t = {"x": a.add("x", (n, h, w, c)), "y": a.add("y", (n, po, qo, c)), "yi": a.add("yi", (n, po, qo, c)),
         "dy": a.add("dy", (n, po, qo, c)), "dx": a.add("dx", (n, h, w, c))}
    if with_mask:
        t["mask"] = a.add("mask", (n, po, qo, c), "int8")
    return a, t


@pytest.mark.parametrize("n,h,w,c,k,s,p", CASES)
def test_maxpool(n, h, w, c, k, s, p):
    a, t = _setup(n, h, w, c, k, s, p)
    be = a.allocate()
    rng = np.random.default_rng(h * 7 + c)
    be.write(t["x"], rng.standard_normal(t["x"].shape.dims))
    be.write(t["dy"], rng.standard_normal(t["dy"].shape.dims))
    attrs = {"kernel": k, "stride": s, "padding": p}
    run(be, op("maxpool_fwd", x=t["x"], y=t["y"], mask=t["mask"], **attrs),
        op("maxpool_inf", x=t["x"], y=t["yi"], **attrs),
        op("maxpool_bwd", dy=t["dy"], mask=t["mask"], dx=t["dx"], **attrs))
    x = nchw(be.read(t["x"]))
    y, idx = F.max_pool2d(x, _pair(k), _pair(s), _pair(p), return_indices=True)
    y.backward(nchw(be.read(t["dy"])))
    np.testing.assert_array_equal(be.read(t["y"]), nhwc(y).astype(np.float32))
    np.testing.assert_array_equal(be.read(t["yi"]), nhwc(y).astype(np.float32))
    assert_close(be.read(t["dx"]), nhwc(x.grad), 1e-6)
    # mask code kh*KW + kw -> the flat input index torch reports
    (_, kw), (sh, sw), (ph, pw) = _pair(k), _pair(s), _pair(p)
    code = be.read(t["mask"]).astype(np.int64)
    po, qo = code.shape[1:3]
    rows = np.arange(po)[None, :, None, None] * sh - ph + code // kw
    cols = np.arange(qo)[None, None, :, None] * sw - pw + code % kw
    np.testing.assert_array_equal(rows * w + cols, idx.numpy().transpose(0, 2, 3, 1))


def test_maxpool_ties_first_position_wins():
    a, t = _setup(1, 4, 4, 1, 2, 2, 0)
    be = a.allocate()
    x = np.array([[1, 1, 0, 2], [1, 1, 2, 2], [5, 3, 3, 3], [5, 5, 3, 4]], np.float32).reshape(1, 4, 4, 1)
    be.write(t["x"], x)
    be.write(t["dy"], np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 2, 2, 1))
    run(be, op("maxpool_fwd", x=t["x"], y=t["y"], mask=t["mask"], kernel=2, stride=2),
        op("maxpool_bwd", dy=t["dy"], mask=t["mask"], dx=t["dx"], kernel=2, stride=2))
    np.testing.assert_array_equal(be.read(t["mask"]).ravel(), [0, 1, 0, 3])
    expect = np.zeros((4, 4), np.float32)
    expect[0, 0], expect[0, 3], expect[2, 0], expect[3, 3] = 1, 2, 3, 4
    np.testing.assert_array_equal(be.read(t["dx"])[0, :, :, 0], expect)


@pytest.mark.parametrize("n,h,w,c,k,s,p", CASES)
def test_avgpool_excludes_padding(n, h, w, c, k, s, p):
    (kh, kw), (ph, pw) = _pair(k), _pair(p)
    if ph > kh // 2 or pw > kw // 2:
        pytest.skip("torch limits padding to half the kernel")
    a, t = _setup(n, h, w, c, k, s, p, with_mask=False)
    be = a.allocate()
    rng = np.random.default_rng(h * 5 + c)
    be.write(t["x"], rng.standard_normal(t["x"].shape.dims))
    be.write(t["dy"], rng.standard_normal(t["dy"].shape.dims))
    attrs = {"kernel": k, "stride": s, "padding": p}
    run(be, op("avgpool_fwd", x=t["x"], y=t["y"], **attrs), op("avgpool_bwd", dy=t["dy"], dx=t["dx"], **attrs))
    x = nchw(be.read(t["x"]))
    y = F.avg_pool2d(x, _pair(k), _pair(s), _pair(p), count_include_pad=False)
    y.backward(nchw(be.read(t["dy"])))
    assert_close(be.read(t["y"]), nhwc(y), 1e-6)
    assert_close(be.read(t["dx"]), nhwc(x.grad), 1e-6)


def test_global_average_pool():
    a = SimpleArena()
    t = {"x": a.add("x", (3, 5, 4, 6)), "y": a.add("y", (3, 1, 1, 6)), "dy": a.add("dy", (3, 1, 1, 6)),
         "dx": a.add("dx", (3, 5, 4, 6))}
    be = a.allocate()
    rng = np.random.default_rng(9)
    be.write(t["x"], rng.standard_normal((3, 5, 4, 6)))
    be.write(t["dy"], rng.standard_normal((3, 1, 1, 6)))
    run(be, op("gap_fwd", x=t["x"], y=t["y"]), op("gap_bwd", dy=t["dy"], dx=t["dx"]))
    x = nchw(be.read(t["x"]))
    y = x.mean(dim=(2, 3), keepdim=True)
    y.backward(nchw(be.read(t["dy"])))
    assert_close(be.read(t["y"]), nhwc(y), 1e-6)
    assert_close(be.read(t["dx"]), nhwc(x.grad), 1e-6)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_max_pooling(dtype):
    """y selects a rounded input: exactly. dx (3x3 windows, stride 2: up to 4 dy a position) is a float32 sum of at
    most 4 values of 11 or 8 significant bits, exact in float32 in any order, rounded once: torch's float32 sum rounded
    to the dtype, exactly."""
    a = SimpleArena()
    t = {"x": a.add("x", (2, 6, 6, 8), dtype), "y": a.add("y", (2, 3, 3, 8), dtype),
         "mask": a.add("mask", (2, 3, 3, 8), "int8"), "dy": a.add("dy", (2, 3, 3, 8), dtype),
         "dx": a.add("dx", (2, 6, 6, 8), dtype)}
    be = a.allocate()
    rng = np.random.default_rng(10)
    be.write(t["x"], as_dtype(rng.standard_normal((2, 6, 6, 8)), dtype)[0])
    be.write(t["dy"], as_dtype(rng.standard_normal((2, 3, 3, 8)), dtype)[0])
    run(be, op("maxpool_fwd", x=t["x"], y=t["y"], mask=t["mask"], kernel=3, stride=2, padding=1),
        op("maxpool_bwd", dy=t["dy"], mask=t["mask"], dx=t["dx"], kernel=3, stride=2, padding=1))
    if dtype == "fp16":
        x = nchw(be.read(t["x"]).astype(np.float64))
        y = F.max_pool2d(x, 3, 2, 1)
        y.backward(nchw(be.read(t["dy"]).astype(np.float64)))
        np.testing.assert_array_equal(be.read(t["y"]), nhwc(y).astype(np.float16))
        assert_close(be.read(t["dx"]), nhwc(x.grad), 1e-3)
    x = nchw(values(be.read(t["x"])), torch.float32)
    y = F.max_pool2d(x, 3, 2, 1)
    y.backward(nchw(values(be.read(t["dy"])), torch.float32))
    assert_rounded(be.read(t["y"]), nhwc(y), dtype)
    assert_rounded(be.read(t["dx"]), nhwc(x.grad), dtype)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_average_pooling(dtype):
    """avg pool and gap read and write the 16-bit dtype and average in float32 (tr: a sum in kernel-position order
    times 1/count; torch: its sum over the window divided by the count), rounded once: within one ulp of torch's
    float32 results rounded to the dtype, plus 2 * 2^-24 * max|e| where the window's values cancel."""
    a = SimpleArena()
    t = {"x": a.add("x", (2, 7, 7, 8), dtype), "y": a.add("y", (2, 4, 4, 8), dtype),
         "dy": a.add("dy", (2, 4, 4, 8), dtype), "dx": a.add("dx", (2, 7, 7, 8), dtype),
         "g": a.add("g", (2, 1, 1, 8), dtype), "dg": a.add("dg", (2, 1, 1, 8), dtype),
         "gx": a.add("gx", (2, 7, 7, 8), dtype)}
    be = a.allocate()
    rng = np.random.default_rng(12)
    for name in ("x", "dy", "dg"):
        be.write(t[name], as_dtype(rng.standard_normal(t[name].shape.dims), dtype)[0])
    run(be, op("avgpool_fwd", x=t["x"], y=t["y"], kernel=3, stride=2, padding=1),
        op("avgpool_bwd", dy=t["dy"], dx=t["dx"], kernel=3, stride=2, padding=1),
        op("gap_fwd", x=t["x"], y=t["g"]), op("gap_bwd", dy=t["dg"], dx=t["gx"]))
    x = nchw(values(be.read(t["x"])), torch.float32)
    y = F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)
    y.backward(nchw(values(be.read(t["dy"])), torch.float32))
    assert_within_ulp(be.read(t["y"]), nhwc(y), dtype, 2.0)
    assert_within_ulp(be.read(t["dx"]), nhwc(x.grad), dtype, 2.0)
    x = nchw(values(be.read(t["x"])), torch.float32)
    g = x.mean(dim=(2, 3), keepdim=True)
    g.backward(nchw(values(be.read(t["dg"])), torch.float32))
    assert_within_ulp(be.read(t["g"]), nhwc(g), dtype, 2.0)
    assert_within_ulp(be.read(t["gx"]), nhwc(x.grad), dtype, 2.0)
