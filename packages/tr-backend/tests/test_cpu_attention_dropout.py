"""Dropout on the attention probabilities (attention_fwd / attention_bwd with dropout = p > 0) on the CPU backend.

The forward advances the dropout stream (seed <- splitmix64(seed)) into the layer's key; probability (n, h, i, j)
is kept iff philox.uniform(key, ((n*heads + h)*T + i)*T + j) >= p, and kept ones are scaled by 1 / (1-p) before
multiplying by v (torch.nn.MultiheadAttention's dropout, scaled_dot_product_attention's dropout_p: F.dropout on
softmax(q k^T * scale)). The backward redraws the bits from the key. Checked here:
- the bits, exactly: with v_j the one-hot e_j (dh = T) each y_i is its row of dropped probabilities, so y's zeros
  are the dropped elements; they are recomputed with tr.core.philox;
- FP32 values against torch in float64 given the same mask (the math of scaled_dot_product_attention with F.dropout:
  P * mask / (1-p), then @ v, and autograd), within test_cpu_attention.py's bounds (4e-6 of max |e|; the
  probabilities' 1 / (1-p) scales values and errors alike; measured over the cases below, p 0.1 and 0.5, four seeds
  each: y 5.6e-7, dqkv 9.8e-7); tr's backward against central differences of tr's own forward (the seed written
  back before each);
- FP16/BF16: tr's float32 result on the rounded values rounded once (test_cpu_attention.py holds that float32
  result to torch in 16 bits);
- the kept fraction within a binomial bound, the same seed giving the same bytes, two layers different bits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, as_dtype, assert_close, op, run, values

from tr.core import philox
from tr.core.errors import BackendError, ShapeError

FP32_TOL = 4e-6  # test_cpu_attention.py's bound for y and dqkv against float64
SEED = 0x0123456789ABCDEF


def _arena(n: int, t: int, heads: int, dh: int, dtype: str = "fp32", layers: int = 1) -> tuple[SimpleArena, dict]:
    d = heads * dh
    a = SimpleArena()
    ts = {name: a.add(name, (n, 1, t, 3 * d), dtype) for name in ("qkv", "dqkv")}
    ts.update({name: a.add(name, (n, 1, t, d), dtype) for name in ("y", "dy", "y2")})
    ts["stats"] = a.add("stats", (n, 1, heads, t))
    ts["stats2"] = a.add("stats2", (n, 1, heads, t))
    ts["seed"] = a.add("seed", (2,), "int32")
    ts["wide"] = a.add("wide", (4,), "int32")  # not a key: two uint64s
    for k in range(layers):
        ts[f"key{k or ''}"] = a.add(f"key{k or ''}", (2,), "int32")
    return a, ts


def _fwd(ts: dict, heads: int, scale: float, p: float, y: str = "y", stats: str = "stats", key: str = "key"):
    return op("attention_fwd", qkv=ts["qkv"], y=ts[y], stats=ts[stats], seed=ts["seed"], key=ts[key], heads=heads,
              scale=scale, dropout=p)


def _bwd(ts: dict, heads: int, scale: float, p: float):
    return op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"],
              key=ts["key"], heads=heads, scale=scale, dropout=p)


def _set_seed(be, ts: dict, seed: int) -> None:
    be.write(ts["seed"], np.array([seed], dtype="<u8").view(np.int32))


def _u64(be, t) -> int:
    return int(be.read(t).reshape(-1).view("<u8")[0])


def _keep(key: int, n: int, heads: int, t: int, p: float) -> np.ndarray:
    """The keep bits [N, heads, T, T] of a draw with ``key``."""
    return (np.asarray(philox.uniform(key, 0, n * heads * t * t)) >= np.float32(p)).reshape(n, heads, t, t)


def _one_hot_v(be, ts: dict, n: int, t: int, heads: int, seed: int) -> None:
    """Random q and k, and v_j = e_j in every head (dh = T): y_i of head h is then P'_i of that head, exactly."""
    rng = np.random.default_rng(seed)
    qkv = np.zeros((n, t, 3, heads, t), np.float32)
    qkv[:, :, :2] = rng.standard_normal((n, t, 2, heads, t))
    qkv[:, :, 2] = np.eye(t, dtype=np.float32)[None, :, None, :]
    be.write(ts["qkv"], qkv.reshape(n, 1, t, 3 * heads * t))


def _probs_in_y(be, ts: dict, n: int, t: int, heads: int, y: str = "y") -> np.ndarray:
    """y of the one-hot v as the dropped probabilities [N, heads, T, T]."""
    return be.read(ts[y]).reshape(n, t, heads, t).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_dropped_probabilities_are_philox_of_their_flat_index(p):
    n, t, heads = 3, 16, 2
    a, ts = _arena(n, t, heads, t)
    be = a.allocate()
    _set_seed(be, ts, SEED)
    _one_hot_v(be, ts, n, t, heads, 1)
    run(be, _fwd(ts, heads, t ** -0.5, p))
    key = philox.splitmix64(SEED)
    assert _u64(be, ts["key"]) == key and _u64(be, ts["seed"]) == key  # the stream advanced into the layer's key
    keep = _keep(key, n, heads, t, p)
    probs = _probs_in_y(be, ts, n, t, heads)
    np.testing.assert_array_equal(probs != 0, keep)
    # the kept ones are softmax's divided by 1 - p; the statistics are the undropped rows' log-sum-exp
    qkv = be.read(ts["qkv"]).reshape(n, t, 3, heads, t).astype(np.float64)
    s = np.einsum("nihc,njhc->nhij", qkv[:, :, 0], qkv[:, :, 1]) * t ** -0.5
    softmax = np.exp(s - s.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    assert_close(probs, np.where(keep, softmax / (1 - p), 0), FP32_TOL)
    lse = np.log(np.exp(s).sum(-1))
    assert_close(be.read(ts["stats"]).reshape(n, heads, t), lse, 1e-6)


def _heads(a: np.ndarray, heads: int, parts: int) -> list[torch.Tensor]:
    n, _, t, c = a.shape
    x = torch.tensor(values(a), dtype=torch.float64).reshape(n, t, parts, heads, c // parts // heads)
    return [x[:, :, i].transpose(1, 2).contiguous() for i in range(parts)]


def _tokens(*parts: torch.Tensor) -> np.ndarray:
    x = torch.stack([q.detach().transpose(1, 2) for q in parts], 2)
    return x.reshape(x.shape[0], 1, x.shape[1], -1).numpy()


def _torch_with_mask(qkv: np.ndarray, dy: np.ndarray, heads: int, scale: float, p: float, keep: np.ndarray):
    """scaled_dot_product_attention's math in float64 with tr's mask as F.dropout's draw, and its autograd."""
    q, k, v = (x.requires_grad_() for x in _heads(qkv, heads, 3))
    (g,) = _heads(dy, heads, 1)
    probs = torch.softmax((q @ k.transpose(-1, -2)) * scale, -1)
    y = (probs * torch.from_numpy(keep) / (1 - p)) @ v
    y.backward(g)
    return _tokens(y), _tokens(q.grad, k.grad, v.grad)


@pytest.mark.parametrize("case", [(2, 5, 4, 8), (2, 17, 3, 64), (1, 197, 2, 16)], ids=["t5", "t17-dh64", "t197"])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_fp32_forward_and_backward_match_torch_given_the_mask(case, p):
    n, t, heads, dh = case
    scale = dh ** -0.5
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    rng = np.random.default_rng(sum(case))
    be.write(ts["qkv"], 1.5 * rng.standard_normal(ts["qkv"].shape.dims))
    be.write(ts["dy"], rng.standard_normal(ts["dy"].shape.dims))
    _set_seed(be, ts, SEED + n)
    run(be, _fwd(ts, heads, scale, p))
    _set_seed(be, ts, 12345)  # the backward reads the layer's key, not the stream
    run(be, _bwd(ts, heads, scale, p))
    keep = _keep(_u64(be, ts["key"]), n, heads, t, p)
    assert 0 < keep.mean() < 1
    y, dqkv = _torch_with_mask(be.read(ts["qkv"]), be.read(ts["dy"]), heads, scale, p, keep)
    assert_close(be.read(ts["y"]), y, FP32_TOL)
    assert_close(be.read(ts["dqkv"]), dqkv, FP32_TOL)


def test_backward_is_the_forward_s_derivative_with_the_mask_held():
    """Central differences of L = sum(y * dy) through tr's forward, the stream reset before each (same bits)."""
    n, t, heads, dh, p, seed = 1, 4, 2, 2, 0.5, 3
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    rng = np.random.default_rng(9)
    be.write(ts["qkv"], rng.standard_normal(ts["qkv"].shape.dims))
    be.write(ts["dy"], rng.standard_normal(ts["dy"].shape.dims))
    fwd = be.capture("fwd", [_fwd(ts, heads, 0.7, p)])
    _set_seed(be, ts, seed)
    be.launch(fwd)
    keep = _keep(_u64(be, ts["key"]), n, heads, t, p)
    assert 0 < keep.mean() < 1
    be.launch(be.capture("bwd", [_bwd(ts, heads, 0.7, p)]))
    grad = be.read(ts["dqkv"]).ravel()
    qkv, dy = be.read(ts["qkv"]).astype(np.float64), be.read(ts["dy"]).astype(np.float64)

    def loss(x: np.ndarray) -> float:
        _set_seed(be, ts, seed)
        be.write(ts["qkv"], x)
        be.launch(fwd)
        return float((be.read(ts["y"]).astype(np.float64) * dy).sum())

    eps = 1e-2
    fd = np.empty(qkv.size)
    for i in range(qkv.size):
        e = np.zeros(qkv.size)
        e[i] = eps
        fd[i] = (loss(qkv + e.reshape(qkv.shape)) - loss(qkv - e.reshape(qkv.shape))) / (2 * eps)
    assert_close(grad, fd, 1e-4)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_precision_rounds_the_float32_result_once(dtype):
    """The same bits in 16 bits (a function of the key and the index only), and y, dqkv tr's float32 results on the
    rounded values rounded once."""
    n, t, heads, dh, p = 2, 17, 3, 16, 0.3
    scale = dh ** -0.5
    ha, hts = _arena(n, t, heads, dh, dtype)
    half = ha.allocate()
    rng = np.random.default_rng(5)
    half.write(hts["qkv"], as_dtype(1.5 * rng.standard_normal(hts["qkv"].shape.dims), dtype)[0])
    half.write(hts["dy"], as_dtype(rng.standard_normal(hts["dy"].shape.dims), dtype)[0])
    _set_seed(half, hts, SEED)
    run(half, _fwd(hts, heads, scale, p), _bwd(hts, heads, scale, p))
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    be.write(ts["qkv"], values(half.read(hts["qkv"])))
    be.write(ts["dy"], values(half.read(hts["dy"])))
    _set_seed(be, ts, SEED)
    run(be, _fwd(ts, heads, scale, p))
    assert be.read(ts["key"]).tobytes() == half.read(hts["key"]).tobytes()
    assert np.array_equal(values(half.read(hts["y"])), values(as_dtype(be.read(ts["y"]), dtype)[0]))
    be.write(ts["y"], values(half.read(hts["y"])))  # the backward reads y as stored
    run(be, _bwd(ts, heads, scale, p))
    assert np.array_equal(values(half.read(hts["dqkv"])), values(as_dtype(be.read(ts["dqkv"]), dtype)[0]))


def test_kept_fraction_within_a_binomial_bound():
    n, t, heads, p = 4, 32, 4, 0.25
    a, ts = _arena(n, t, heads, t)
    be = a.allocate()
    _set_seed(be, ts, 77)
    _one_hot_v(be, ts, n, t, heads, 2)
    run(be, _fwd(ts, heads, t ** -0.5, p))
    draws = n * heads * t * t
    kept = float((_probs_in_y(be, ts, n, t, heads) != 0).mean())
    assert abs(kept - (1 - p)) <= 4.5 * math.sqrt(p * (1 - p) / draws)  # 16,384 independent draws


def test_the_same_seed_gives_the_same_bytes_each_launch_and_layer_draws_afresh():
    n, t, heads, dh, p = 2, 9, 2, 8, 0.4
    scale = dh ** -0.5

    def trained(seed: int) -> tuple[list[bytes], list[bytes]]:
        a, ts = _arena(n, t, heads, dh, layers=2)
        be = a.allocate()
        rng = np.random.default_rng(0)
        be.write(ts["qkv"], rng.standard_normal(ts["qkv"].shape.dims))
        be.write(ts["dy"], rng.standard_normal(ts["dy"].shape.dims))
        _set_seed(be, ts, seed)
        g = be.capture("step", [_fwd(ts, heads, scale, p), _bwd(ts, heads, scale, p),
                                _fwd(ts, heads, scale, p, y="y2", stats="stats2", key="key1")])
        launches = []
        for _ in range(2):
            be.launch(g)
            launches.append([be.read(ts[k]).tobytes() for k in ("y", "dqkv", "y2", "key", "key1")])
        first, second = launches
        assert first[0] != first[2]  # two layers on the same input: their own bits
        assert _u64(be, ts["key1"]) == philox.splitmix64(_u64(be, ts["key"]))
        assert first[0] != second[0] and first[3] != second[3]  # each step draws afresh
        return first, second

    assert trained(21) == trained(21)
    assert trained(21)[0][0] != trained(22)[0][0]


def test_dropout_zero_is_the_call_without_dropout():
    n, t, heads, dh = 2, 9, 2, 8
    a, ts = _arena(n, t, heads, dh)
    be = a.allocate()
    rng = np.random.default_rng(4)
    be.write(ts["qkv"], rng.standard_normal(ts["qkv"].shape.dims))
    be.write(ts["dy"], rng.standard_normal(ts["dy"].shape.dims))
    plain = [op("attention_fwd", qkv=ts["qkv"], y=ts["y"], stats=ts["stats"], heads=heads, scale=0.3),
             op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"],
                heads=heads, scale=0.3)]
    run(be, *plain)
    before = [be.read(ts[k]).tobytes() for k in ("y", "stats", "dqkv")]
    zero = [op(c.op, **{k: v for k, v in c.args.items() if v is not None}, **c.attrs, dropout=0.0) for c in plain]
    run(be, *zero)
    assert [be.read(ts[k]).tobytes() for k in ("y", "stats", "dqkv")] == before


def test_bad_dropout_calls_are_refused_naming_the_problem():
    n, t, heads, dh = 2, 5, 2, 4
    cases = [
        (lambda ts: _fwd(ts, heads, 0.5, 1.0), BackendError,
         r"attribute 'dropout' \(the probabilities' drop probability\) must be in \[0, 1\), got 1.0"),
        (lambda ts: _fwd(ts, heads, 0.5, -0.1), BackendError, r"attribute 'dropout' = -0.1 is out of range"),
        (lambda ts: op("attention_fwd", qkv=ts["qkv"], y=ts["y"], stats=ts["stats"], seed=ts["seed"], heads=heads,
                       scale=0.5, dropout=0.1), BackendError, r"dropout = 0.1 needs 'key' \(INT32\[2\]"),
        (lambda ts: op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"],
                       heads=heads, scale=0.5, dropout=0.1), BackendError, r"dropout = 0.1 needs 'key'"),
        (lambda ts: op("attention_fwd", qkv=ts["qkv"], y=ts["y"], seed=ts["seed"], key=ts["key"], heads=heads,
                       scale=0.5, dropout=0.1), BackendError,
         r"dropout = 0.1 is a training forward's, which saves stats; inference passes no stats and no dropout"),
        (lambda ts: op("attention_fwd", qkv=ts["qkv"], y=ts["y"], stats=ts["stats"], seed=ts["seed"], key=ts["key"],
                       heads=heads, scale=0.5), BackendError,
         r"seed and key given without dropout: they are read only with dropout > 0"),
        (lambda ts: _fwd(ts, heads, 0.5, 0.1, key="stats2"), BackendError,
         r"argument 'key' has dtype FP32; expected INT32"),
        (lambda ts: op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"],
                       key=ts["wide"], heads=heads, scale=0.5, dropout=0.1), ShapeError,
         r"argument 'key' .* has 4 elements; expected 2"),
    ]
    for make, exc, pattern in cases:
        a, ts = _arena(n, t, heads, dh)
        with pytest.raises(exc, match=pattern):
            a.allocate().capture("g", [make(ts)])
