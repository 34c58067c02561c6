"""conv_fwd / conv_bwd against torch.nn.functional.conv2d (float64 reference, NCHW <-> NHWC, KRSC weights).

Shapes cover 1x1, 3x3, 5x5, 7x7 and rectangular kernels, strides 1-3 (including stride > kernel), zero and
non-zero padding, and sizes the stride does not divide. Tolerance: FP32 within 1e-5 of the reference
relative to the data's scale; FP16 (AMP) within 3e-3 (output rounding 2^-11 plus input rounding).
FP16 and BF16 also against torch in float32 from the same rounded inputs, its results rounded to the dtype: within
one ulp (both sum the window's products in float32, in other orders), plus FLOOR * 2^-24 * max|e| where the
products cancel to a value far below the tensor's scale (there the float32 sums differ by many ulps of the result).
"""

import numpy as np
import pytest
import torch
from backend_testkit import (
    HALF_DTYPES,
    SimpleArena,
    as_dtype,
    assert_close,
    assert_within_ulp,
    nchw,
    nhwc,
    op,
    run,
    values,
)

FLOOR = 2.0  # measured over 40 seeds of test_conv_amp's shapes: at most 0.62 of these units past one ulp (FP16 dx)

# (N, H, W, C, K, (R, S), stride, padding)
CASES = [
    (2, 5, 5, 3, 4, (1, 1), 1, 0),
    (2, 6, 7, 3, 5, (3, 3), 1, 1),
    (3, 8, 8, 4, 6, (3, 3), 2, 1),
    (1, 9, 7, 2, 3, (5, 5), 1, 2),
    (2, 7, 9, 3, 4, (1, 1), 2, 0),
    (2, 6, 5, 3, 2, (3, 2), (2, 1), (1, 0)),
    (1, 11, 11, 3, 4, (7, 7), 2, 3),
    (2, 6, 6, 5, 3, (3, 3), 1, 0),
    (2, 7, 8, 2, 3, (2, 2), 3, 1),
]


def _out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


def _setup(n, h, w, c, k, rs, stride, pad, dtype="fp32", with_dx=True):
    (r, s), (sh, sw), (ph, pw) = rs, _pair(stride), _pair(pad)
    p, q = _out(h, r, sh, ph), _out(w, s, sw, pw)
    a = SimpleArena()
    t = {"x": a.add("x", (n, h, w, c), dtype), "w": a.add("w", (k, r, s, c), dtype),
         "y": a.add("y", (n, p, q, k), dtype), "dy": a.add("dy", (n, p, q, k), dtype),
         "dw": a.add("dw", (k, r, s, c), dtype)}
    if with_dx:
        t["dx"] = a.add("dx", (n, h, w, c), dtype)
    return a, t


def _reference(be, t, stride, pad, dtype=torch.float64):
    """y, dw, dx of torch's conv2d in ``dtype`` on the arena's (rounded) values, NHWC."""
    x, w = (nchw(values(be.read(t[k])), dtype) for k in ("x", "w"))
    y = torch.nn.functional.conv2d(x, w, stride=_pair(stride), padding=_pair(pad))
    y.backward(nchw(values(be.read(t["dy"])), dtype))
    return nhwc(y), nhwc(w.grad), nhwc(x.grad)


def assert_half(be, t, ref32, dtype) -> None:
    """y, dw, dx within one ulp of torch's float32 results rounded to ``dtype`` (see the module's docstring)."""
    for name, e in zip(("y", "dw", "dx"), ref32, strict=True):
        assert_within_ulp(be.read(t[name]), e, dtype, FLOOR)


@pytest.mark.parametrize("n,h,w,c,k,rs,stride,pad", CASES)
def test_conv_forward_backward_fp32(n, h, w, c, k, rs, stride, pad):
    a, t = _setup(n, h, w, c, k, rs, stride, pad)
    be = a.allocate()
    rng = np.random.default_rng(h * 31 + k)
    for name in ("x", "w", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims))
    attrs = {"kernel": rs, "stride": stride, "padding": pad}
    run(be, op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
        op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs))
    y, dw, dx = _reference(be, t, stride, pad)
    assert_close(be.read(t["y"]), y)
    assert_close(be.read(t["dw"]), dw)
    assert_close(be.read(t["dx"]), dx)


def test_conv_repeated_launches_keep_padding_zero():
    """The private padded buffers keep their zero border across launches with new data."""
    a, t = _setup(2, 6, 6, 3, 4, (3, 3), 2, 1)
    be = a.allocate()
    attrs = {"stride": 2, "padding": 1}
    g = be.capture("g", [op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
                         op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs)])
    rng = np.random.default_rng(5)
    for _ in range(3):
        for name in ("x", "w", "dy"):
            be.write(t[name], rng.standard_normal(t[name].shape.dims))
        be.launch(g)
        y, dw, dx = _reference(be, t, 2, 1)
        assert_close(be.read(t["y"]), y)
        assert_close(be.read(t["dw"]), dw)
        assert_close(be.read(t["dx"]), dx)


def test_conv_first_layer_wgrad_only():
    a, t = _setup(2, 5, 5, 3, 4, (3, 3), 1, 1, with_dx=False)
    be = a.allocate()
    rng = np.random.default_rng(6)
    for name in ("x", "w", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims))
    run(be, op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], stride=1, padding=1))
    _, dw, _ = _reference(be, t, 1, 1)
    assert_close(be.read(t["dw"]), dw)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1)])
def test_conv_amp(stride, pad, dtype):
    a, t = _setup(2, 6, 6, 4, 5, (3, 3), stride, pad, dtype=dtype)
    be = a.allocate()
    rng = np.random.default_rng(7)
    for name in ("x", "w", "dy"):
        be.write(t[name], as_dtype(rng.standard_normal(t[name].shape.dims), dtype)[0])
    attrs = {"stride": stride, "padding": pad}
    run(be, op("conv_fwd", x=t["x"], w=t["w"], y=t["y"], **attrs),
        op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], dx=t["dx"], **attrs))
    assert be.view(t["y"]).dtype == (np.float16 if dtype == "fp16" else np.uint16)  # BF16: its bit patterns
    if dtype == "fp16":
        y, dw, dx = _reference(be, t, stride, pad)
        assert_close(be.read(t["y"]), y, 3e-3)
        assert_close(be.read(t["dw"]), dw, 3e-3)
        assert_close(be.read(t["dx"]), dx, 3e-3)
    assert_half(be, t, _reference(be, t, stride, pad, torch.float32), dtype)


def test_conv_shape_errors_name_the_op():
    a = SimpleArena()
    x, w, y = a.add("x", (1, 5, 5, 3)), a.add("w", (4, 3, 3, 3)), a.add("y", (1, 5, 5, 4))
    be = a.allocate()
    with pytest.raises(Exception, match=r"op #0 conv_fwd \(layer 2, c1\): y .* must be \[1,3,3,\*\]"):
        be.capture("g", [op("conv_fwd", layer=2, label="c1", x=x, w=w, y=y)])
    with pytest.raises(Exception, match="disagrees with the weight"):
        be.capture("g", [op("conv_fwd", x=x, w=w, y=y, kernel=5, padding=1)])


@pytest.mark.parametrize("dtype,groups,tol", [("fp32", 1, 1e-5), ("fp32", 3, 1e-5), ("fp16", 1, 3e-3),
                                             ("bf16", 1, None), ("bf16", 3, None)])
def test_conv_bias_against_torch(dtype, groups, tol):
    """conv_fwd's optional b is torch's conv2d bias; conv_bwd's db its gradient (FP32 even under AMP). BF16: y, dw
    and dx within one ulp of torch's float32 results rounded (the CPU adds the bias before its one rounding; CUDA rounds
    the convolution's output first, test_cuda_conv_bias.py), db within 1e-5 of torch's float64 sum of the rounded dy."""
    n, h, w, c, k, r = 2, 7, 6, 6, 9, 3
    a = SimpleArena()
    t = {"x": a.add("x", (n, h, w, c), dtype), "w": a.add("w", (k, r, r, c // groups), dtype),
         "b": a.add("b", (1, 1, 1, k), dtype), "y": a.add("y", (n, h, w, k), dtype),
         "dy": a.add("dy", (n, h, w, k), dtype), "dw": a.add("dw", (k, r, r, c // groups), dtype),
         "db": a.add("db", (1, 1, 1, k), "fp32"), "dx": a.add("dx", (n, h, w, c), dtype)}
    be = a.allocate()
    rng = np.random.default_rng(11)
    for name in ("x", "w", "b", "dy"):
        be.write(t[name], as_dtype(rng.standard_normal(t[name].shape.dims), dtype)[0])
    attrs = {"kernel": r, "stride": 1, "padding": 1, "groups": groups}
    run(be, op("conv_fwd", x=t["x"], w=t["w"], b=t["b"], y=t["y"], **attrs),
        op("conv_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], db=t["db"], dx=t["dx"], **attrs))

    def torch_conv(dt):
        x, wt = nchw(values(be.read(t["x"])), dt), nchw(values(be.read(t["w"])), dt)
        bias = torch.tensor(values(be.read(t["b"])).reshape(k), dtype=dt, requires_grad=True)
        y = torch.nn.functional.conv2d(x, wt, bias, padding=1, groups=groups)
        y.backward(nchw(values(be.read(t["dy"])), dt))
        return nhwc(y), nhwc(wt.grad), nhwc(x.grad), bias.grad.numpy()

    y, dw, dx, db = torch_conv(torch.float64)
    assert_close(be.read(t["db"]).reshape(k), db, tol or 1e-5)
    if tol is None:
        assert_half(be, t, torch_conv(torch.float32)[:3], dtype)
        return
    assert_close(be.read(t["y"]), y, tol)
    assert_close(be.read(t["dw"]), dw, tol)
    assert_close(be.read(t["dx"]), dx, tol)


def test_conv_bias_of_the_wrong_size_is_refused():
    a = SimpleArena()
    x, w, b, y = a.add("x", (1, 5, 5, 3)), a.add("w", (4, 3, 3, 3)), a.add("b", (1, 1, 1, 3)), a.add("y", (1, 3, 3, 4))
    dy, dw, db = a.add("dy", (1, 3, 3, 4)), a.add("dw", (4, 3, 3, 3)), a.add("db", (1, 1, 1, 4), "fp16")
    be = a.allocate()
    with pytest.raises(Exception, match=r"conv_fwd.*'b' \[1,1,1,3\] has 3 elements; expected 4"):
        be.capture("g", [op("conv_fwd", x=x, w=w, b=b, y=y)])
    with pytest.raises(Exception, match=r"conv_bwd.*'db' has dtype FP16; expected FP32"):
        be.capture("g", [op("conv_bwd", x=x, w=w, dy=dy, dw=dw, db=db)])
