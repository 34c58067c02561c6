"""Multi-head self-attention (attention_fwd, attention_bwd) on the CPU backend against torch.

Tokens [N,1,T,C]; qkv packs [q | k | v] per token, each split into heads as torch.nn.MultiheadAttention's in_proj.
Errors below are max |a - e| over max(1, max |e|) (backend_testkit.assert_close) or in units of the dtype.

FP32: against torch in float64 from the same values (scaled_dot_product_attention and its autograd, logsumexp of
the scaled scores). Measured over CASES with qkv ~ N(0, 1.5^2), four seeds each: y <= 1.6e-6, stats <= 4.0e-7,
dqkv <= 1.4e-6 (float32 rounding of the scores, amplified by exp), hence bounds 4e-6 and 1e-6 (stats); the
scales 0.05, 1 and 2.5 measured y 4.0e-7, stats 7.5e-8, dqkv 1.3e-6. Through torch.nn.MultiheadAttention's
projections (its small initial weights, so gentler scores): <= 1.1e-7, bound 1e-6. Central differences of tr's
own forward agree with tr's backward within 2.1e-5 (bound 1e-4: float32 rounding of the loss over 2 * eps, and
eps^2).

FP16 / BF16: against torch computing in float32 from the same rounded inputs (scaled_dot_product_attention, which
is the CPU flash-attention kernel: blockwise, an online softmax, another float32 order), its result rounded to
the dtype. The backward's reference is torch's flash-attention backward from the same rounded qkv and dy and tr's
stored y (D_i = rowsum(dy * y) reads y as stored, in both). Within one ulp of the dtype plus a floor of k * 2^-24
* max|e| (backend_testkit.assert_within_ulp): two float32 evaluations differ by float32 rounding of the scores
(relative to |q||k|, then through exp) and of dP - D_i, which cancels to values far below the tensor's scale, where
FP16's ulp is tiny. Both kernels are equally far from float64 (tr's float32 error 4-10 units of 2^-24 * max|e| on
y and 6-14 on dqkv, torch's 4-11 and 7-36). Measured excess over one ulp, four seeds a case: y 3.8 (FP16) and 1.7
(BF16) units, dqkv 21.2 and 5.7; floors 8 (y) and 48 (dqkv). Elements past one ulp: y at most 0.03 %.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, as_dtype, assert_close, assert_within_ulp, op, run, values

import tr.backend.cpu.ops.attention as cpu_attention
from tr.backend.checks import where
from tr.backend.rules.attention import AttentionCall
from tr.core.errors import BackendError, CompileError, DTypeError, ShapeError
from tr.core.ops import OpCall

# (N, T, heads, dh): odd token counts (one token, ViT-B/16's 197), head sizes 8, 64 and 128, one to twelve heads
CASES = [(2, 1, 2, 8), (3, 5, 4, 8), (2, 5, 1, 16), (2, 17, 3, 64), (1, 17, 2, 128), (2, 197, 12, 64),
         (2, 197, 2, 128)]
IDS = ["t1", "t5-dh8", "t5-one-head", "t17-dh64", "t17-dh128", "vit-b-t197", "t197-dh128"]
FP32_TOL = 4e-6
STATS_TOL = 1e-6
MHA_TOL = 1e-6
Y_FLOOR, DQKV_FLOOR = 8.0, 48.0  # units of 2^-24 * max|e| (module docstring)


def _arena(n: int, t: int, heads: int, dh: int, dtype: str = "fp32") -> tuple[SimpleArena, dict]:
    d = heads * dh
    a = SimpleArena()
    ts = {name: a.add(name, (n, 1, t, 3 * d), dtype) for name in ("qkv", "dqkv")}
    ts.update({name: a.add(name, (n, 1, t, d), dtype) for name in ("y", "dy")})
    ts["stats"] = a.add("stats", (n, 1, heads, t))
    return a, ts


def _fwd(ts: dict, heads: int, scale: float) -> OpCall:
    return op("attention_fwd", qkv=ts["qkv"], y=ts["y"], stats=ts["stats"], heads=heads, scale=scale)


def _bwd(ts: dict, heads: int, scale: float) -> OpCall:
    return op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"],
              heads=heads, scale=scale)


def _fill(be, ts: dict, seed: int, spread: float = 1.5) -> None:
    rng = np.random.default_rng(seed)
    be.write(ts["qkv"], spread * rng.standard_normal(ts["qkv"].shape.dims))
    be.write(ts["dy"], rng.standard_normal(ts["dy"].shape.dims))


def _run_case(n: int, t: int, heads: int, dh: int, dtype: str, seed: int, scale: float | None = None):
    a, ts = _arena(n, t, heads, dh, dtype)
    be = a.allocate()
    _fill(be, ts, seed)
    scale = dh ** -0.5 if scale is None else scale
    run(be, _fwd(ts, heads, scale), _bwd(ts, heads, scale))
    return be, ts, scale


def _heads(a: np.ndarray, heads: int, dtype: torch.dtype, parts: int = 3) -> list[torch.Tensor]:
    """[N,1,T,parts*D] values -> ``parts`` tensors [N, heads, T, dh] (torch's SDPA layout)."""
    n, _, t, c = a.shape
    x = torch.tensor(values(a), dtype=dtype).reshape(n, t, parts, heads, c // parts // heads)
    return [x[:, :, i].transpose(1, 2).contiguous() for i in range(parts)]


def _tokens(*parts: torch.Tensor) -> np.ndarray:
    """[N, heads, T, dh] tensors -> [N,1,T,len(parts)*D] (the packed layout), float64."""
    x = torch.stack([p.detach().transpose(1, 2) for p in parts], 2)
    n, t = x.shape[:2]
    return x.reshape(n, 1, t, -1).to(torch.float64).numpy()


def _torch_autograd(be, ts: dict, heads: int, scale: float, dtype: torch.dtype):
    """y, stats, dqkv of torch's scaled_dot_product_attention and its autograd on the arena's values."""
    q, k, v = (p.requires_grad_() for p in _heads(be.read(ts["qkv"]), heads, dtype))
    (dy,) = _heads(be.read(ts["dy"]), heads, dtype, 1)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    y.backward(dy)
    lse = torch.logsumexp((q @ k.transpose(-1, -2)) * scale, -1).detach()
    return _tokens(y), lse.unsqueeze(1).to(torch.float64).numpy(), _tokens(q.grad, k.grad, v.grad)


# --- FP32 against torch in float64 -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fp32_forward_backward_and_stats_match_torch(case):
    n, t, heads, dh = case
    be, ts, scale = _run_case(n, t, heads, dh, "fp32", sum(case))
    y, lse, dqkv = _torch_autograd(be, ts, heads, scale, torch.float64)
    assert_close(be.read(ts["y"]), y, FP32_TOL)
    assert_close(be.read(ts["stats"]), lse, STATS_TOL)
    assert_close(be.read(ts["dqkv"]), dqkv, FP32_TOL)


@pytest.mark.parametrize("scale", [0.05, 1.0, 2.5])
def test_fp32_other_scales_match_torch(scale):
    """Any scale > 0: 2.5 makes nearly one-hot rows (scores spread over ~+-60), 0.05 nearly uniform ones."""
    be, ts, scale = _run_case(2, 9, 3, 16, "fp32", 4, scale)
    y, lse, dqkv = _torch_autograd(be, ts, 3, scale, torch.float64)
    assert_close(be.read(ts["y"]), y, FP32_TOL)
    assert_close(be.read(ts["stats"]), lse, STATS_TOL)
    assert_close(be.read(ts["dqkv"]), dqkv, FP32_TOL)


@pytest.mark.parametrize("case", [(2, 5, 4, 8), (2, 17, 2, 64), (1, 197, 6, 128)], ids=["d32", "d128", "d768"])
def test_fp32_is_multihead_attention_s_core_in_the_packed_layout(case):
    """torch.nn.MultiheadAttention(D, heads) = out_proj(attention(in_proj(x))): its in_proj output is our qkv
    layout, so out_proj(y) is its output and in_proj's transpose of dqkv its input gradient."""
    n, t, heads, dh = case
    d = heads * dh
    torch.manual_seed(sum(case))
    mha = torch.nn.MultiheadAttention(d, heads, batch_first=True, dtype=torch.float64)
    x = torch.randn(n, t, d, dtype=torch.float64, requires_grad=True)
    out, _ = mha(x, x, x, need_weights=False)
    dout = torch.randn_like(out)
    out.backward(dout)
    w_in, b_in = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    w_out, b_out = mha.out_proj.weight.detach(), mha.out_proj.bias.detach()

    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    be.write(ts["qkv"], torch.nn.functional.linear(x.detach(), w_in, b_in).numpy())
    be.write(ts["dy"], (dout @ w_out).numpy())  # the gradient reaching the heads' concatenated output
    run(be, _fwd(ts, heads, dh ** -0.5), _bwd(ts, heads, dh ** -0.5))
    y = torch.tensor(be.read(ts["y"]).reshape(n, t, d), dtype=torch.float64)
    assert_close(torch.nn.functional.linear(y, w_out, b_out).numpy(), out.detach().numpy(), MHA_TOL)
    dqkv = torch.tensor(be.read(ts["dqkv"]).reshape(n, t, 3 * d), dtype=torch.float64)
    assert_close((dqkv @ w_in).numpy(), x.grad.numpy(), MHA_TOL)


def test_backward_is_the_forward_s_derivative():
    """Central differences of L = sum(y * dy) through tr's own forward against tr's backward (no torch)."""
    n, t, heads, dh = 1, 3, 2, 2
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    _fill(be, ts, 9)
    fwd = be.capture("fwd", [_fwd(ts, heads, 0.7)])
    be.launch(fwd)
    be.launch(be.capture("bwd", [_bwd(ts, heads, 0.7)]))
    grad = be.read(ts["dqkv"]).ravel()
    qkv, dy = be.read(ts["qkv"]).astype(np.float64), be.read(ts["dy"]).astype(np.float64)

    def loss(x: np.ndarray) -> float:
        be.write(ts["qkv"], x)
        be.launch(fwd)
        return float((be.read(ts["y"]).astype(np.float64) * dy).sum())

    eps = 1e-2
    fd = np.empty_like(grad, np.float64)
    for i in range(qkv.size):
        e = np.zeros(qkv.size)
        e[i] = eps
        fd[i] = (loss(qkv + e.reshape(qkv.shape)) - loss(qkv - e.reshape(qkv.shape))) / (2 * eps)
    assert_close(grad, fd, 1e-4)


# --- FP16 and BF16: torch in float32 from the same rounded inputs, rounded to the dtype -----------------------------

def _torch_flash(be, ts: dict, heads: int, scale: float):
    """torch's float32 flash attention forward on the arena's rounded qkv, and its backward given tr's stored y."""
    q, k, v = _heads(be.read(ts["qkv"]), heads, torch.float32)
    (dy,) = _heads(be.read(ts["dy"]), heads, torch.float32, 1)
    (y_tr,) = _heads(be.read(ts["y"]), heads, torch.float32, 1)
    y, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, scale=scale)
    grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dy, q, k, v, y_tr, lse, 0.0, False, scale=scale)
    return _tokens(y), lse.unsqueeze(1).numpy(), _tokens(*grads)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_half_precision_within_one_ulp_of_torch_in_float32(case, dtype):
    n, t, heads, dh = case
    be, ts, scale = _run_case(n, t, heads, dh, dtype, 11 + sum(case))
    y, lse, dqkv = _torch_flash(be, ts, heads, scale)
    assert_within_ulp(be.read(ts["y"]), y, dtype, floor=Y_FLOOR)
    assert_close(be.read(ts["stats"]), lse, STATS_TOL)
    assert_within_ulp(be.read(ts["dqkv"]), dqkv, dtype, floor=DQKV_FLOOR)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_precision_rounds_the_float32_result_once(dtype):
    """y and dqkv are tr's own float32 results (those of FP32 tensors holding the same rounded values) rounded
    once to the dtype: nothing is rounded in between."""
    n, t, heads, dh = 2, 17, 3, 16
    half, hts, scale = _run_case(n, t, heads, dh, dtype, 5)
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    be.write(ts["qkv"], values(half.read(hts["qkv"])))
    be.write(ts["dy"], values(half.read(hts["dy"])))
    run(be, _fwd(ts, heads, scale))
    assert np.array_equal(values(half.read(hts["y"])), values(as_dtype(be.read(ts["y"]), dtype)[0]))
    assert np.array_equal(half.read(hts["stats"]), be.read(ts["stats"]))
    be.write(ts["y"], values(half.read(hts["y"])))  # the backward reads y as stored
    run(be, _bwd(ts, heads, scale))
    assert np.array_equal(values(half.read(hts["dqkv"])), values(as_dtype(be.read(ts["dqkv"]), dtype)[0]))


# --- determinism ------------------------------------------------------------------------------------------------

OUTPUTS = ("y", "stats", "dqkv")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_two_runs_give_the_same_bytes(dtype):
    def once() -> list[bytes]:
        be, ts, scale = _run_case(3, 197, 4, 16, dtype, 3)
        first = [be.read(ts[k]).tobytes() for k in OUTPUTS]
        run(be, _fwd(ts, 4, scale), _bwd(ts, 4, scale))  # captured again on this backend: scratch reused
        assert first == [be.read(ts[k]).tobytes() for k in OUTPUTS]
        return first

    assert once() == once()


def test_chunking_the_samples_changes_no_byte(monkeypatch):
    """The scratch bound splits N into chunks; each (sample, head) is its own product, so the bytes stay."""
    whole = _run_case(5, 17, 3, 8, "fp32", 8)
    monkeypatch.setattr(cpu_attention, "_SCORES", 2 * 3 * 17 * 17)  # two samples a chunk: 2 + 2 + 1
    assert cpu_attention._chunks(AttentionCall(5, 17, 24, 3, 1.0, True)) == (2, [slice(0, 2), slice(2, 4), slice(4, 5)])
    chunked = _run_case(5, 17, 3, 8, "fp32", 8)
    for k in OUTPUTS:
        assert whole[0].read(whole[1][k]).tobytes() == chunked[0].read(chunked[1][k]).tobytes()


def test_one_token_attends_to_itself():
    """T = 1: P = 1, so y = v and dv = dy exactly, stats = q.k * scale; dq = dk = 0 up to float32 rounding (dS =
    P * (dP - D_i) with dP = dy.v a BLAS dot and D_i = dy.y numpy's sum: two orders of one value)."""
    n, heads, dh = 3, 2, 8
    be, ts, scale = _run_case(n, 1, heads, dh, "fp32", 6)
    qkv = be.read(ts["qkv"]).reshape(n, 3, heads, dh)
    assert np.array_equal(be.read(ts["y"]).reshape(n, heads, dh), qkv[:, 2])
    lse = (qkv[:, 0] @ qkv[:, 1].transpose(0, 2, 1)).diagonal(0, 1, 2) * np.float32(scale)
    assert_close(be.read(ts["stats"]).reshape(n, heads), lse, 1e-7)
    dqkv = be.read(ts["dqkv"]).reshape(n, 3, heads, dh)
    assert np.array_equal(dqkv[:, 2], be.read(ts["dy"]).reshape(n, heads, dh))
    # dP - D_i: two float32 sums of dh products |dy||v|, then times scale * |k| (or |q|)
    bound = 2 * dh * 2.0 ** -24 * np.abs(dqkv[:, 2]).max() * np.abs(qkv).max() ** 2 * scale
    assert np.abs(dqkv[:, :2]).max() <= bound


# --- rule errors (tr.backend.rules.attention): the call is refused at capture, naming the argument ---------------

def _refused(a: SimpleArena, call: OpCall, exc: type[Exception], pattern: str) -> None:
    be = a.allocate()
    with pytest.raises(exc, match=pattern) as info:
        be.capture("g", [call])
    assert str(info.value).startswith(where("g", 0, call) + ": ")


def _bad(shapes: dict, dtypes: dict | None = None) -> tuple[SimpleArena, dict]:
    """A good call's tensors (N 2, T 5, 2 heads of 4: D 8) with some replaced."""
    dims = {"qkv": (2, 1, 5, 24), "dqkv": (2, 1, 5, 24), "y": (2, 1, 5, 8), "dy": (2, 1, 5, 8),
            "stats": (2, 1, 2, 5), **shapes}
    dtypes = {name: "fp32" for name in dims} | (dtypes or {})
    a = SimpleArena()
    return a, {name: a.add(name, dims[name], dtypes[name]) for name in dims}


def test_token_shapes_are_checked():
    cases = [
        ({"qkv": (2, 2, 5, 24)}, r"qkv \[2,2,5,24\] must be \[N,1,T,C\]: tokens lie along W, with H = 1"),
        ({"y": (2, 5, 1, 8)}, r"y \[2,5,1,8\] must be \[N,1,T,C\]"),
        ({"qkv": (2, 1, 5, 25)}, r"qkv \[2,1,5,25\] has 25 channels; it must hold q, k and v of D channels each"),
        ({"y": (2, 1, 5, 12)}, r"y \[2,1,5,12\] has 12 channels; qkv's 24 must be 3 times as many \(q, k, v of "
                               r"D = 8 each\)"),
        ({"y": (2, 1, 4, 8)}, r"y \[2,1,4,8\] must have qkv's N = 2 and T = 5"),
        ({"y": (3, 1, 5, 8)}, r"y \[3,1,5,8\] must have qkv's N = 2 and T = 5"),
        ({"stats": (2, 1, 5, 2)}, r"stats \[2,1,5,2\] must be \[2,1,2,5\] \(\[N,1,heads,T\]"),
    ]
    for shapes, pattern in cases:
        a, t = _bad(shapes)
        _refused(a, _fwd(t, 2, 0.5), ShapeError, pattern)
    for shapes, pattern in [({"dy": (2, 1, 6, 8)}, r"dy \[2,1,6,8\] must have qkv's N = 2 and T = 5"),
                            ({"dqkv": (2, 1, 5, 12)}, r"dqkv \[2,1,5,12\] must have qkv's shape \[2,1,5,24\]"),
                            ({"stats": (2, 1, 1, 5)}, r"stats \[2,1,1,5\] must be \[2,1,2,5\]")]:
        a, t = _bad(shapes)
        _refused(a, _bwd(t, 2, 0.5), ShapeError, pattern)


def test_dtypes_are_checked():
    cases = [({"y": "fp16"}, "y is FP16 but qkv is FP32; an attention call has one float dtype"),
             ({"qkv": "int32", "y": "int32"}, "qkv is INT32; attention takes FP32, FP16 or BF16 tokens"),
             ({"stats": "bf16"}, "stats is BF16; the softmax rows' log-sum-exp is FP32")]
    for dts, pattern in cases:
        a, t = _bad({}, dts)
        _refused(a, _fwd(t, 2, 0.5), DTypeError, pattern)
    half = dict.fromkeys(("qkv", "y", "dy", "dqkv"), "fp16")
    for dts, pattern in [({**half, "dqkv": "bf16"}, "dqkv is BF16 but qkv is FP16"),
                         ({**half, "dy": "fp32"}, "dy is FP32 but qkv is FP16"),
                         ({**half, "stats": "fp16"}, "stats is FP16; the softmax rows' log-sum-exp is FP32")]:
        a, t = _bad({}, dts)
        _refused(a, _bwd(t, 2, 0.5), DTypeError, pattern)


def test_attributes_are_checked():
    for heads, pattern in [(3, "attribute 'heads' = 3 must divide D = 8 \\(y's channels: qkv's 24 / 3\\)"),
                           (0, "attribute 'heads' must be an integer >= 1, got 0"),
                           (2.0, "attribute 'heads' must be an integer >= 1, got 2.0"),
                           (True, "attribute 'heads' must be an integer >= 1, got True")]:
        a, t = _bad({})
        _refused(a, _fwd(t, heads, 0.5), BackendError, pattern)
    for scale in (0, 0.0, -0.125, math.inf, math.nan, True, "0.125", None):
        a, t = _bad({})
        _refused(a, _bwd(t, 2, scale), BackendError,
                 re.escape(f"attribute 'scale' must be a finite number > 0, got {scale!r}"))
    a, t = _bad({})
    _refused(a, op("attention_fwd", qkv=t["qkv"], y=t["y"], stats=t["stats"], scale=0.5), BackendError,
             "attribute 'heads' is required")
    a, t = _bad({})
    _refused(a, op("attention_bwd", qkv=t["qkv"], y=t["y"], dy=t["dy"], stats=t["stats"], dqkv=t["dqkv"],
                   heads=2), BackendError, "attribute 'scale' is required")
    a, t = _bad({})
    a.allocate().capture("g", [_fwd(t, np.int64(2), np.float32(0.5))])  # numpy numbers are numbers


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_inference_saves_no_statistics_and_gives_the_training_output(dtype):
    be, ts, scale = _run_case(2, 17, 3, 8, dtype, 12)
    trained = be.read(ts["y"]).copy()
    be.write(ts["y"], np.zeros(ts["y"].shape.dims))
    be.write(ts["stats"], np.full(ts["stats"].shape.dims, 7.0))
    run(be, op("attention_fwd", qkv=ts["qkv"], y=ts["y"], heads=3, scale=scale))
    assert be.read(ts["y"]).tobytes() == trained.tobytes()
    assert np.all(be.read(ts["stats"]) == 7.0)  # inference writes no statistics


def test_the_backward_requires_the_saved_statistics():
    a, t = _bad({})
    with pytest.raises(CompileError, match="op attention_bwd: required argument 'stats' is missing"):
        op("attention_bwd", qkv=t["qkv"], y=t["y"], dy=t["dy"], dqkv=t["dqkv"], heads=2, scale=0.5)
    with pytest.raises(CompileError, match="op attention_bwd: unknown attribute 'causal'"):
        op("attention_bwd", qkv=t["qkv"], y=t["y"], dy=t["dy"], stats=t["stats"], dqkv=t["dqkv"], heads=2,
           scale=0.5, causal=True)
    # a call built around OpCall.make is refused at capture all the same
    bare = OpCall("attention_bwd", MappingProxyType({"qkv": t["qkv"], "y": t["y"], "dy": t["dy"], "stats": None,
                                                     "dqkv": t["dqkv"]}), MappingProxyType({"heads": 2, "scale": 1.0}))
    _refused(a, bare, BackendError, "required argument 'stats' is missing")
