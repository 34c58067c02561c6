"""How far cuDNN's flash attention (FP16/BF16 in and out, FP32 inside) may be from tr's CPU attention, element by
element, and a float32 model of its roundings that test_attention_sdpa_bounds.py holds to these bounds on the CPU.

The CPU backend computes everything in float32 and rounds each output once. Flash attention computes the scores,
softmax and sums in float32 too, but feeds its 16-bit tensor-core products 16-bit operands it rounds itself: the
unnormalised probabilities P before P V (forward) and P^T dO (dV), the score gradients dS before dS K (dQ) and
dS^T Q (dK); the deterministic Hopper backward keeps dP in a 16-bit workspace, so dP may be rounded too. Each such
rounding moves an operand by at most u of itself (u, the unit roundoff: 2^-11 FP16, 2^-8 BF16), so an output moves
by at most u times the sum of its terms' magnitudes. Both sides also round in float32, in other orders: a dot
product of n terms by at most g(n) = (n + 2) 2^-24 of the sum of its terms' magnitudes, taken twice (two
independent evaluations). First order, per element (P, dP, D, dS exact, from the same inputs; S_abs = scale *
sum_c |q_c k_c|):

- P's relative error (float32 scores through exp): r_P = 2 (g(dh) S_abs + 4 * 2^-24);
- y = P V:    sum_j (u + r_P) P_ij |v_jc| + 2 g(T) sum_j P_ij |v_jc|;
- stats:      2 g(dh) max_j S_abs_ij + 2 g(T) + 2^-22 |stats_i|;
- dV = P^T dO: like y over i;
- dS = P (dP - D): e_dS = P (2 g(dh) (sum_c |dO_c v_c| + sum_c |dO_c y_c|) + u |dP|) + (u + r_P) |dS|;
- dQ = scale dS K, dK = scale dS^T Q: scale sum (e_dS |k| + 2 g(T) |dS| |k|) (and with q for dK);

plus the output's rounding: the two 16-bit results may lie on either side of a rounding boundary, one unit in the
last place of the larger value (:func:`within`). The softmax's row sum is taken to be of the float32 P, as in
FlashAttention-2: the stats bound holds cuDNN to that (a sum of the rounded P would move stats by up to u). The
backward is compared from the same y and stats on both sides (the CPU's, written to the device), as in
test_cuda_attention.py.
"""

from __future__ import annotations

import numpy as np
from backend_testkit import ulp, values

from tr.core.bf16 import round_bf16

U = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
EPS32 = 2.0 ** -24


def _g(n: int) -> float:
    return (n + 2) * EPS32


def heads(a: np.ndarray, parts: int, nheads: int) -> list[np.ndarray]:
    """An [N, 1, T, parts * D] array as ``parts`` float64 [N, heads, T, dh] arrays (q, k, v of qkv; y alone)."""
    a = values(a)
    n, _, t, c = a.shape
    dh = c // parts // nheads
    v = a.reshape(n, t, parts, nheads, dh)
    return [v[:, :, i].transpose(0, 2, 1, 3) for i in range(parts)]


def _tokens(x: np.ndarray) -> np.ndarray:
    """[N, heads, T, dh] -> [N, 1, T, heads * dh]."""
    n, h, t, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(n, 1, t, h * dh)


def _probs(q: np.ndarray, k: np.ndarray, scale: float, lse: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(P normalised, S_abs, the rows' log-sum-exp) in float64."""
    s = scale * q @ k.swapaxes(-1, -2)
    s_abs = scale * np.abs(q) @ np.abs(k).swapaxes(-1, -2)
    if lse is None:
        m = s.max(axis=-1, keepdims=True)
        lse = m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
    return np.exp(s - lse), s_abs, lse


def forward_bounds(qkv: np.ndarray, dtype: str, nheads: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(bound on |y_gpu - y_cpu| before the output's rounding, [N, 1, T, D]; bound on |stats_gpu - stats_cpu|,
    [N, 1, heads, T])."""
    q, k, v = heads(qkv, 3, nheads)
    t, dh = q.shape[2], q.shape[3]
    p, s_abs, lse = _probs(q, k, scale)
    r_p = 2 * (_g(dh) * s_abs + 4 * EPS32)
    y = ((U[dtype] + r_p + 2 * _g(t)) * p) @ np.abs(v)
    stats = 2 * _g(dh) * s_abs.max(axis=-1) + 2 * _g(t) + 2.0 ** -22 * np.abs(lse[..., 0])
    return _tokens(y), stats[:, None]


def backward_bounds(qkv: np.ndarray, y: np.ndarray, dy: np.ndarray, stats: np.ndarray, dtype: str, nheads: int,
                    scale: float) -> np.ndarray:
    """Bound on |dqkv_gpu - dqkv_cpu| before the outputs' rounding, [N, 1, T, 3D], from the same y and stats."""
    q, k, v = heads(qkv, 3, nheads)
    (o,), (do,) = heads(y, 1, nheads), heads(dy, 1, nheads)
    t, dh = q.shape[2], q.shape[3]
    u = U[dtype]
    p, s_abs, _ = _probs(q, k, scale, values(stats)[:, 0][..., None])
    r_p = 2 * (_g(dh) * s_abs + 4 * EPS32)
    dp = do @ v.swapaxes(-1, -2)
    d_i = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - d_i)
    dp_abs = np.abs(do) @ np.abs(v).swapaxes(-1, -2)
    d_abs = (np.abs(do) * np.abs(o)).sum(axis=-1, keepdims=True)
    e_ds = p * (2 * _g(dh) * (dp_abs + d_abs) + u * np.abs(dp)) + (u + r_p) * np.abs(ds)
    e_dq = scale * (e_ds + 2 * _g(t) * np.abs(ds)) @ np.abs(k)
    e_dk = scale * (e_ds + 2 * _g(t) * np.abs(ds)).swapaxes(-1, -2) @ np.abs(q)
    e_dv = ((u + r_p + 2 * _g(t)) * p).swapaxes(-1, -2) @ np.abs(do)
    return np.concatenate([_tokens(e_dq), _tokens(e_dk), _tokens(e_dv)], axis=-1)


def within(gpu: np.ndarray, cpu: np.ndarray, bound: np.ndarray, dtype: str, what: str,
           floor: float = 16.0) -> float:
    """|gpu - cpu| <= bound + ulp(|cpu| + bound) + floor * 2^-24 * max|cpu| everywhere (FP16 or BF16 values);
    returns the worst |gpu - cpu| / that allowance (<= 1)."""
    a, e = values(gpu), values(cpu)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert not np.isnan(a).any(), f"{what}: NaN (an element never written?)"
    # one unit in the last place at the larger of the two values: either may sit on either side of a boundary
    allow = bound + ulp(np.abs(e) + bound, dtype) + floor * EPS32 * float(np.abs(e).max(initial=0.0))
    ratio = np.abs(a - e) / allow
    worst = float(ratio.max(initial=0.0))
    assert worst <= 1.0, (f"{what}: {int((ratio > 1).sum())} elements past the flash attention bound; worst "
                          f"{worst:.2f} times it")
    return worst


# --- a float32 model of flash attention's 16-bit roundings (what the bounds must cover) ---------------------------
def _round16(x: np.ndarray, dtype: str) -> np.ndarray:
    x32 = np.asarray(x, np.float32)
    return round_bf16(x32) if dtype == "bf16" else x32.astype(np.float16).astype(np.float32)


def model_forward(qkv: np.ndarray, dtype: str, nheads: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(y rounded to ``dtype``, stats) as flash attention computes them: float32 scores and softmax, P rounded to
    the 16-bit type before P V, the sum l of the unrounded P, y = (P16 V) / l."""
    q, k, v = (x.astype(np.float32) for x in heads(qkv, 3, nheads))
    s = (q @ k.swapaxes(-1, -2)) * np.float32(scale)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    l_sum = e.sum(axis=-1, keepdims=True)
    y = (_round16(e, dtype) @ v) / l_sum
    return _round16(_tokens(y), dtype), (m + np.log(l_sum))[..., 0][:, None]


def model_backward(qkv: np.ndarray, y: np.ndarray, dy: np.ndarray, stats: np.ndarray, dtype: str, nheads: int,
                   scale: float) -> np.ndarray:
    """dqkv rounded to ``dtype`` as flash attention computes it: P from the saved stats, P rounded before P^T dO,
    dP kept in 16 bits (the dP-workspace backward), dS rounded before dS K and dS^T Q."""
    q, k, v = (x.astype(np.float32) for x in heads(qkv, 3, nheads))
    o, do = (heads(a, 1, nheads)[0].astype(np.float32) for a in (y, dy))
    sc = np.float32(scale)
    p = np.exp((q @ k.swapaxes(-1, -2)) * sc - values(stats).astype(np.float32)[:, 0][..., None])
    dv = _round16(p, dtype).swapaxes(-1, -2) @ do
    dp = _round16(do @ v.swapaxes(-1, -2), dtype)
    ds = _round16(p * (dp - (do * o).sum(axis=-1, keepdims=True)), dtype)
    dq, dk = (ds @ k) * sc, (ds.swapaxes(-1, -2) @ q) * sc
    return _round16(np.concatenate([_tokens(dq), _tokens(dk), _tokens(dv)], axis=-1), dtype)
