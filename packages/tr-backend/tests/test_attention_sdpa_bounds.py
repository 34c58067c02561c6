"""The bounds test_cuda_attention_sdpa.py holds cuDNN's flash attention to (sdpa_bounds.py), on the CPU: they cover a
float32 model of flash attention's 16-bit roundings (P, dP and dS rounded to the I/O type, everything else float32)
against the CPU backend's attention, and they are not vacuous: the model uses a fair part of them, an error of a
few units of the 16-bit type does not fit them, and they stay within a few u of the outputs' scale."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import SimpleArena, op, run, values
from sdpa_bounds import U, backward_bounds, forward_bounds, model_backward, model_forward, within

from tr.backend.cpu import CpuBackend

# (N, T, heads, dh): the GPU test's shapes, odd token counts and head sizes 64 and 128
CASES = [(2, 17, 4, 64), (2, 197, 12, 64), (2, 17, 2, 128), (1, 197, 6, 128), (3, 50, 3, 64)]
IDS = ["t17-dh64", "vit-b-t197", "t17-dh128", "t197-dh128", "t50"]


def _cpu(n: int, t: int, nheads: int, dh: int, dtype: str, seed: int = 0) -> tuple[CpuBackend, dict, float]:
    d = nheads * dh
    a = SimpleArena()
    ts = {name: a.add(name, (n, 1, t, 3 * d), dtype) for name in ("qkv", "dqkv")}
    ts.update({name: a.add(name, (n, 1, t, d), dtype) for name in ("y", "dy")})
    ts["stats"] = a.add("stats", (n, 1, nheads, t))
    be = a.allocate()
    rng = np.random.default_rng(seed + n + t + nheads + dh)
    be.write(ts["qkv"], 1.5 * rng.standard_normal((n, 1, t, 3 * d)))
    be.write(ts["dy"], rng.standard_normal((n, 1, t, d)))
    scale = dh ** -0.5
    run(be, op("attention_fwd", qkv=ts["qkv"], y=ts["y"], stats=ts["stats"], heads=nheads, scale=scale),
        op("attention_bwd", qkv=ts["qkv"], y=ts["y"], dy=ts["dy"], stats=ts["stats"], dqkv=ts["dqkv"], heads=nheads,
           scale=scale))
    return be, {k: be.read(v) for k, v in ts.items()}, scale


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_bounds_cover_flash_attention_s_roundings(case, dtype):
    n, t, nheads, dh = case
    _, x, scale = _cpu(n, t, nheads, dh, dtype)
    y_bound, stats_bound = forward_bounds(x["qkv"], dtype, nheads, scale)
    y_model, stats_model = model_forward(x["qkv"], dtype, nheads, scale)
    worst_y = within(y_model, x["y"], y_bound, dtype, "y")
    err = np.abs(stats_model - values(x["stats"]))
    assert np.all(err <= stats_bound), f"stats: worst {float((err / stats_bound).max()):.2f} times the bound"
    bound = backward_bounds(x["qkv"], x["y"], x["dy"], x["stats"], dtype, nheads, scale)
    worst_dqkv = within(model_backward(x["qkv"], x["y"], x["dy"], x["stats"], dtype, nheads, scale), x["dqkv"],
                        bound, dtype, "dqkv")
    # not vacuous: the 16-bit roundings alone use a fair part of the allowance
    assert worst_y > 0.05 and worst_dqkv > 0.05, (worst_y, worst_dqkv)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_bounds_refuse_a_few_units_of_error_and_stay_near_the_tensors_scale(dtype):
    n, t, nheads, dh = 2, 197, 12, 64
    _, x, scale = _cpu(n, t, nheads, dh, dtype)
    y_bound, _ = forward_bounds(x["qkv"], dtype, nheads, scale)
    y = values(x["y"])
    _, v_max = np.abs(y).max(), np.abs(values(x["qkv"])[..., 2 * nheads * dh:]).max()
    assert float(y_bound.max()) <= 2 * U[dtype] * v_max  # about u of the values a row averages
    off = y.copy()
    i = np.unravel_index(np.argmax(y_bound), y.shape)
    off[i] += 4 * y_bound[i] + 4 * U[dtype] * max(abs(y[i]), 1.0)  # a few units of the type where it is loosest
    with pytest.raises(AssertionError, match="past the flash attention bound"):
        within(off, x["y"], y_bound, dtype, "y")
    dqkv_bound = backward_bounds(x["qkv"], x["y"], x["dy"], x["stats"], dtype, nheads, scale)
    g = values(x["dqkv"])
    assert float(np.median(dqkv_bound)) <= 4 * U[dtype] * float(np.abs(g).max())
