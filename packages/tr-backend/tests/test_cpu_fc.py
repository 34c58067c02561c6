"""fc_fwd / fc_bwd against PyTorch (float64 reference).

Tolerances: FP32 results must be within 1e-5 of the reference relative to the data's scale (max |ref|,
at least 1); GEMM sums of up to ~1000 float32 products stay well inside that. FP16 (AMP) results are
compared with the float64 reference computed from the FP16-rounded inputs, within 2e-3 (FP16 rounding of
the output is 2^-11 relative).
"""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, assert_close, op, run

CASES = [  # (N, (H, W, C), out, bias, activation)
    (4, (1, 1, 7), 5, True, None),
    (3, (2, 3, 4), 6, True, "relu"),
    (8, (1, 1, 33), 17, False, None),
    (1, (5, 5, 3), 2, False, "relu"),
    (16, (1, 1, 64), 1, True, None),
]


def _build(n, hwc, o, bias, dtype="fp32", with_dx=True):
    k = int(np.prod(hwc))
    a = SimpleArena()
    t = {"x": a.add("x", (n, *hwc), dtype), "w": a.add("w", (o, 1, 1, k), dtype)}
    if bias:
        t["b"] = a.add("b", (o,))
        t["db"] = a.add("db", (o,))
    t["y"] = a.add("y", (n, 1, 1, o), dtype)
    t["dy"] = a.add("dy", (n, 1, 1, o), dtype)
    t["dw"] = a.add("dw", (o, 1, 1, k))
    if with_dx:
        t["dx"] = a.add("dx", (n, *hwc), dtype)
    return a, t, k


@pytest.mark.parametrize("n,hwc,o,bias,act", CASES)
def test_fc_forward_backward_fp32(n, hwc, o, bias, act):
    rng = np.random.default_rng(n * 100 + o)
    a, t, k = _build(n, hwc, o, bias)
    be = a.allocate()
    vals = {name: rng.standard_normal(t[name].shape.dims) for name in ("x", "w", "dy")}
    if bias:
        vals["b"] = rng.standard_normal(o)
    for name, v in vals.items():
        be.write(t[name], v)
    run(be,
        op("fc_fwd", x=t["x"], w=t["w"], b=t.get("b"), y=t["y"], activation=act),
        op("fc_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], db=t.get("db"), dx=t["dx"]))

    x = torch.tensor(be.read(t["x"]).reshape(n, k), dtype=torch.float64, requires_grad=True)
    w = torch.tensor(be.read(t["w"]).reshape(o, k), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(be.read(t["b"]).ravel(), dtype=torch.float64, requires_grad=True) if bias else None
    lin = torch.nn.functional.linear(x, w, b)
    y = torch.relu(lin) if act == "relu" else lin
    assert_close(be.read(t["y"]).reshape(n, o), y.detach().numpy())
    lin.backward(torch.tensor(be.read(t["dy"]).reshape(n, o), dtype=torch.float64))
    assert_close(be.read(t["dw"]).reshape(o, k), w.grad.numpy())
    assert_close(be.read(t["dx"]).reshape(n, k), x.grad.numpy())
    if bias:
        assert_close(be.read(t["db"]).ravel(), b.grad.numpy())


def test_fc_first_layer_without_dx():
    a, t, k = _build(5, (1, 1, 9), 4, True, with_dx=False)
    be = a.allocate()
    rng = np.random.default_rng(1)
    for name in ("x", "w", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims))
    run(be, op("fc_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], db=t["db"]))
    dy = be.read(t["dy"]).reshape(5, 4).astype(np.float64)
    assert_close(be.read(t["dw"]).reshape(4, k), dy.T @ be.read(t["x"]).reshape(5, k))
    assert_close(be.read(t["db"]).ravel(), dy.sum(0))


def test_fc_amp_fp16_tensors_fp32_bias():
    n, hwc, o = 6, (2, 2, 5), 7
    a, t, k = _build(n, hwc, o, True, dtype="fp16")
    be = a.allocate()
    rng = np.random.default_rng(2)
    for name in ("x", "w", "dy"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims).astype(np.float16))
    be.write(t["b"], rng.standard_normal(o))
    run(be,
        op("fc_fwd", x=t["x"], w=t["w"], b=t["b"], y=t["y"], activation="relu"),
        op("fc_bwd", x=t["x"], w=t["w"], dy=t["dy"], dw=t["dw"], db=t["db"], dx=t["dx"]))
    assert be.view(t["y"]).dtype == np.float16 and be.view(t["dw"]).dtype == np.float32
    x = be.read(t["x"]).reshape(n, k).astype(np.float64)
    w = be.read(t["w"]).reshape(o, k).astype(np.float64)
    dy = be.read(t["dy"]).reshape(n, o).astype(np.float64)
    ref_y = np.maximum(x @ w.T + be.read(t["b"]).ravel(), 0)
    assert_close(be.read(t["y"]).reshape(n, o), ref_y, 2e-3)
    assert_close(be.read(t["dw"]).reshape(o, k), dy.T @ x, 1e-5)  # FP32 output: only input rounding
    assert_close(be.read(t["dx"]).reshape(n, k), dy @ w, 2e-3)
    assert_close(be.read(t["db"]).ravel(), dy.sum(0), 1e-5)


def test_fc_rejects_mismatched_weight():
    a = SimpleArena()
    x, w, y = a.add("x", (2, 1, 1, 8)), a.add("w", (3, 1, 1, 7)), a.add("y", (2, 1, 1, 3))
    be = a.allocate()
    with pytest.raises(Exception, match=r"graph 'g', op #0 fc_fwd \(layer 4.*w .* holds 7 inputs"):
        be.capture("g", [op("fc_fwd", layer=4, x=x, w=w, y=y)])


def test_fc_bf16_tensors():
    """BF16 is stored as uint16 bit patterns; ops widen to float32, compute, and round back (nearest even)."""
    from tr.backend.cpu.convert import to_float32

    n, k, o = 4, 16, 8
    a = SimpleArena()
    x, w, y = a.add("x", (n, 1, 1, k), "bf16"), a.add("w", (o, 1, 1, k), "bf16"), a.add("y", (n, 1, 1, o), "bf16")
    be = a.allocate()
    rng = np.random.default_rng(3)
    be.write(x, rng.standard_normal((n, 1, 1, k)))
    be.write(w, rng.standard_normal((o, 1, 1, k)))
    run(be, op("fc_fwd", x=x, w=w, y=y))
    xs = to_float32(be.read(x), x.dtype).reshape(n, k).astype(np.float64)
    ws = to_float32(be.read(w), w.dtype).reshape(o, k).astype(np.float64)
    assert be.view(y).dtype == np.uint16
    assert_close(to_float32(be.read(y), y.dtype).reshape(n, o), xs @ ws.T, 1e-2)


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("fp16", 2e-3)])
@pytest.mark.parametrize("hidden", [5, 128, 200])  # under one word, exactly one 128-bit row, a padded row
def test_relu_mask_fuses_the_relu_backward_into_the_next_dx(dtype, tol, hidden):
    """fc(relu) -> fc: the first writes its relu's bit mask, the second's dx is dy w with that relu's backward
    applied (DRELU), the same as torch's relu backward; the mask's bits are the pre-activation's sign in
    cuBLASLt's layout (bit f of sample n at n*ld + f, LSB first, ld = hidden rounded up to 128)."""
    from tr.core.ops import relu_mask_bytes, relu_mask_ld

    n, k, o = 6, 9, 4
    a = SimpleArena()
    t = {"x": a.add("x", (n, 1, 1, k), dtype), "w1": a.add("w1", (hidden, 1, 1, k), dtype),
         "b1": a.add("b1", (hidden,)), "h": a.add("h", (n, 1, 1, hidden), dtype),
         "mask": a.add("mask", (n, 1, 1, relu_mask_bytes(hidden)), "int8"),
         "w2": a.add("w2", (o, 1, 1, hidden), dtype), "dy": a.add("dy", (n, 1, 1, o), dtype),
         "dw2": a.add("dw2", (o, 1, 1, hidden)), "dh": a.add("dh", (n, 1, 1, hidden), dtype)}
    be = a.allocate()
    rng = np.random.default_rng(hidden)
    for name in ("x", "w1", "w2", "dy", "b1"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims))
    be.write(t["mask"], np.full(t["mask"].shape.dims, -1))  # every bit set: the padding must come back 0
    run(be, op("fc_fwd", x=t["x"], w=t["w1"], b=t["b1"], y=t["h"], mask=t["mask"], activation="relu"),
        op("fc_bwd", x=t["h"], w=t["w2"], dy=t["dy"], dw=t["dw2"], dx=t["dh"], mask=t["mask"]))
    x = torch.tensor(be.read(t["x"]).reshape(n, k).astype(np.float64))
    w1 = torch.tensor(be.read(t["w1"]).reshape(hidden, k).astype(np.float64))
    b1 = torch.tensor(be.read(t["b1"]).ravel().astype(np.float64))
    pre = torch.nn.functional.linear(x, w1, b1).requires_grad_(True)
    h = torch.relu(pre)
    assert_close(be.read(t["h"]).reshape(n, hidden), h.detach().numpy(), tol)
    w2 = torch.tensor(be.read(t["w2"]).reshape(o, hidden).astype(np.float64))
    torch.nn.functional.linear(h, w2).backward(torch.tensor(be.read(t["dy"]).reshape(n, o).astype(np.float64)))
    assert_close(be.read(t["dh"]).reshape(n, hidden), pre.grad.numpy(), tol)
    bits = np.unpackbits(be.read(t["mask"]).reshape(n, -1).view(np.uint8), axis=1, bitorder="little")
    assert bits.shape[1] == relu_mask_ld(hidden)
    assert (bits[:, :hidden] == (pre.detach().numpy() > 0)).all() and not bits[:, hidden:].any()
    stored = be.read(t["h"]).reshape(n, hidden).astype(np.float32)
    assert bits[:, :hidden][stored > 0].all()  # wherever the stored activation is positive the relu passed


def test_relu_mask_rules_name_the_problem():
    a = SimpleArena()
    x, w, y = a.add("x", (2, 1, 1, 8)), a.add("w", (3, 1, 1, 8)), a.add("y", (2, 1, 1, 3))
    short = a.add("short", (2, 1, 1, 8), "int8")
    good = a.add("good", (2, 1, 1, 16), "int8")
    wrong = a.add("wrong", (2, 1, 1, 16))
    dy, dw = a.add("dy", (2, 1, 1, 3)), a.add("dw", (3, 1, 1, 8))
    be = a.allocate()
    with pytest.raises(Exception, match=r"mask .* must be \[2, 1, 1, 16\]: 128 bits a sample for the 3 outputs"):
        be.capture("g", [op("fc_fwd", x=x, w=w, y=y, mask=short, activation="relu")])
    with pytest.raises(Exception, match="fc_fwd writes one only with activation 'relu'"):
        be.capture("g", [op("fc_fwd", x=x, w=w, y=y, mask=good)])
    with pytest.raises(Exception, match="argument .mask. has dtype FP32; expected INT8"):
        be.capture("g", [op("fc_fwd", x=x, w=w, y=y, mask=wrong, activation="relu")])
    with pytest.raises(Exception, match="fc_bwd has no dx here"):
        be.capture("g", [op("fc_bwd", x=x, w=w, dy=dy, dw=dw, mask=good)])
