"""tokens_fwd / tokens_bwd / token_pick_* (a Vision Transformer's token sequence, [N,1,T,C]) on the CPU backend
against torch autograd: a patch embedding's output flattened to tokens, a class token concatenated in front and a
position embedding added (torchvision's VisionTransformer: torch.cat([class_token.expand(n, -1, -1), x], 1) +
pos_embedding), and class-token pooling (x[:, 0]). FP32 exactly (one float32 add an element; the batch sums add the
samples in order, as the reference's float64 sum rounded to float32 does on these sizes within 1 ulp); FP16 and BF16
from the same rounded inputs, results rounded once (exact: the same float32 expressions)."""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, as_dtype, assert_close, assert_rounded, op, run, values

from tr.core.errors import ShapeError, TrError


def _setup(n, h, w, c, dtype, cls=True, pos=True):
    t_ = h * w + int(cls)
    a = SimpleArena()
    t = {k: a.add(k, shape, dt) for k, shape, dt in
         (("x", (n, h, w, c), dtype), ("y", (n, 1, t_, c), dtype), ("dy", (n, 1, t_, c), dtype),
          ("dx", (n, h, w, c), dtype), ("cls", (1, 1, 1, c), "fp32"), ("pos", (1, 1, t_, c), "fp32"),
          ("dcls", (1, 1, 1, c), "fp32"), ("dpos", (1, 1, t_, c), "fp32"), ("pick", (n, 1, 1, c), dtype),
          ("dpick", (n, 1, 1, c), dtype), ("dtok", (n, 1, t_, c), dtype))}
    return a, t


def _torch(be, t, cls: bool, pos: bool, dtype):
    x = torch.tensor(values(be.read(t["x"])), dtype=dtype, requires_grad=True)
    n, c = x.shape[0], x.shape[3]
    tok = x.reshape(n, -1, c)
    ct = torch.tensor(values(be.read(t["cls"])), dtype=dtype, requires_grad=True)
    pe = torch.tensor(values(be.read(t["pos"])), dtype=dtype, requires_grad=True)
    if cls:
        tok = torch.cat([ct.reshape(1, 1, c).expand(n, -1, -1), tok], 1)
    if pos:
        tok = tok + pe.reshape(1, -1, c)
    tok.backward(torch.tensor(values(be.read(t["dy"])), dtype=dtype).reshape(tok.shape))
    return tok.detach(), x.grad, ct.grad, pe.grad


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("cls,pos", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("n,h,w,c", [(2, 3, 3, 8), (3, 1, 5, 16), (1, 14, 14, 4)])
def test_tokens_match_torch(n, h, w, c, cls, pos, dtype):
    a, t = _setup(n, h, w, c, dtype, cls, pos)
    be = a.allocate()
    rng = np.random.default_rng(n * 31 + h + c)
    for name in ("x", "dy"):
        v = rng.standard_normal(t[name].shape.dims)
        be.write(t[name], v if dtype == "fp32" else as_dtype(v, dtype)[0])
    for name in ("cls", "pos"):
        be.write(t[name], rng.standard_normal(t[name].shape.dims).astype(np.float32))
    extra = {**({"cls": t["cls"]} if cls else {}), **({"pos": t["pos"]} if pos else {})}
    grads = {**({"dcls": t["dcls"]} if cls else {}), **({"dpos": t["dpos"]} if pos else {})}
    run(be, op("tokens_fwd", x=t["x"], y=t["y"], **extra), op("tokens_bwd", dy=t["dy"], dx=t["dx"], **grads))
    y, dx, dcls, dpos = _torch(be, t, cls, pos, torch.float32)
    if dtype == "fp32":
        np.testing.assert_array_equal(be.read(t["y"]).reshape(y.shape), y.numpy())
        np.testing.assert_array_equal(be.read(t["dx"]).reshape(dx.shape), dx.numpy())
    else:
        assert_rounded(be.read(t["y"]).reshape(y.shape), y, dtype)
        assert_rounded(be.read(t["dx"]).reshape(dx.shape), dx, dtype)
    ref = _torch(be, t, cls, pos, torch.float64)
    if cls:
        assert_close(be.read(t["dcls"]).reshape(-1), ref[2].numpy().reshape(-1), 1e-6)
    if pos:
        assert_close(be.read(t["dpos"]).reshape(-1), ref[3].numpy().reshape(-1), 1e-6)


def test_the_batch_sums_add_the_samples_in_order_and_reruns_are_byte_identical():
    a, t = _setup(5, 2, 2, 8, "fp32")
    be = a.allocate()
    rng = np.random.default_rng(0)
    dy = (rng.standard_normal(t["dy"].shape.dims) * 10.0 ** rng.integers(-4, 4, t["dy"].shape.dims)).astype(np.float32)
    be.write(t["dy"], dy)
    call = op("tokens_bwd", dy=t["dy"], dx=t["dx"], dcls=t["dcls"], dpos=t["dpos"])
    run(be, call)
    first = be.read(t["dpos"]).copy()
    want = dy[0].copy()
    for k in range(1, 5):
        want = want + dy[k]  # float32, sample by sample
    np.testing.assert_array_equal(first.reshape(-1), want.reshape(-1))
    run(be, call)
    assert be.read(t["dpos"]).tobytes() == first.tobytes()


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_token_pick_is_class_token_pooling(dtype):
    a, t = _setup(3, 2, 3, 8, dtype)
    be = a.allocate()
    rng = np.random.default_rng(4)
    for name in ("y", "dpick"):
        v = rng.standard_normal(t[name].shape.dims)
        be.write(t[name], v if dtype == "fp32" else as_dtype(v, dtype)[0])
    run(be, op("token_pick_fwd", x=t["y"], y=t["pick"]), op("token_pick_bwd", dy=t["dpick"], dx=t["dtok"]))
    x = torch.tensor(values(be.read(t["y"])), requires_grad=True)
    p = x[:, :, 0:1, :]
    p.backward(torch.tensor(values(be.read(t["dpick"]))))
    assert values(be.read(t["pick"])).tobytes() == p.detach().numpy().tobytes()
    assert values(be.read(t["dtok"])).tobytes() == x.grad.numpy().tobytes()


def test_bad_token_shapes_are_named():
    a, t = _setup(2, 3, 3, 8, "fp32")
    be = a.allocate()
    with pytest.raises(ShapeError, match="a class token \\(cls\\) is absent"):
        run(be, op("tokens_fwd", x=t["x"], y=t["y"], pos=t["pos"]))
    with pytest.raises(TrError, match="pos .* must be"):
        run(be, op("tokens_fwd", x=t["x"], y=t["y"], cls=t["cls"], pos=t["dcls"]))
    with pytest.raises(ShapeError, match="token 0 of x"):
        run(be, op("token_pick_fwd", x=t["y"], y=t["dx"]))
