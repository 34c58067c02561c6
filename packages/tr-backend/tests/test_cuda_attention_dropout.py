"""Dropout on the attention probabilities in the CUDA kernels (csrc/ops/attention.cu, their kDrop instantiations)
against the CPU backend (test_cpu_attention_dropout.py holds that to torch given the mask). GPU-only.

- The bits, exactly: the forward advances the stream into the layer's key on both sides (seed and key compared byte
  for byte), and with v_j the one-hot e_j (dh = T) every y_i is its head's row of dropped probabilities, so the
  zeros of y are the dropped elements: the same on both sides, in FP32, FP16 and BF16.
- The values, within test_cuda_attention.py's bounds (errors as max |a - e| over max(1, max |e|)): FP32 y and dqkv
  4e-6, stats 1e-6; FP16/BF16 one ulp of the dtype plus 8 (y) or 16 (dqkv) units of 2^-24 * max |e|. Both sides
  compute P' = keep ? P / (1-p) : 0 with the same float32 operations on the same P, so dropout adds no difference
  of its own beyond the plain kernels' (kept values are scaled by 1 / (1-p), and so are the bounds' max |e|). The
  backward is compared from the same y and stats on both sides (the CPU's), as in test_cuda_attention.py.
- Every launch from the same seed gives the same bytes; dropout 0 is the plain kernels' result byte for byte.
Not yet run on a GPU: the bounds are the plain kernels' (unmeasured with dropout).
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import assert_close, op, ulp, values
from cuda_testkit import Twin

pytestmark = pytest.mark.gpu

CASES = [(2, 5, 4, 8), (2, 17, 3, 64), (2, 197, 12, 64), (1, 197, 2, 128)]
IDS = ["t5-dh8", "t17-dh64", "vit-b-t197", "t197-dh128"]
DTYPES = ["fp32", "fp16", "bf16"]
FP32_TOL, STATS_TOL = 4e-6, 1e-6
Y_FLOOR, DQKV_FLOOR = 8.0, 16.0
SEED = np.array([0x12345678, 0x0BADF00D], np.int32)


def _twin(n: int, t: int, heads: int, dh: int, dtype: str, qkv: np.ndarray | None = None) -> Twin:
    d = heads * dh
    tw = Twin()
    for name in ("qkv", "dqkv"):
        tw.add(name, (n, 1, t, 3 * d), dtype)
    for name in ("y", "y0", "dy"):
        tw.add(name, (n, 1, t, d), dtype)
    tw.add("stats", (n, 1, heads, t))
    tw.add("seed", (2,), "int32")
    tw.add("key", (2,), "int32")
    tw.allocate()
    rng = np.random.default_rng(n + t + heads + dh)
    tw.write("qkv", 1.5 * rng.standard_normal((n, 1, t, 3 * d)) if qkv is None else qkv)
    tw.write("dy", rng.standard_normal((n, 1, t, d)))
    tw.write("seed", SEED)
    return tw


def _fwd(tw: Twin, heads: int, scale: float, p: float, y: str = "y"):
    return op("attention_fwd", qkv=tw["qkv"], y=tw[y], stats=tw["stats"], seed=tw["seed"], key=tw["key"],
              heads=heads, scale=scale, dropout=p)


def _bwd(tw: Twin, heads: int, scale: float, p: float):
    return op("attention_bwd", qkv=tw["qkv"], y=tw["y"], dy=tw["dy"], stats=tw["stats"], dqkv=tw["dqkv"],
              key=tw["key"], heads=heads, scale=scale, dropout=p)


def _exact(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert c.tobytes() == g.tobytes(), f"{name} differs from the CPU backend"


def _check(tw: Twin, name: str, dtype: str) -> None:
    cpu, gpu = tw.both(name)
    if name == "stats":
        assert_close(gpu, cpu, STATS_TOL)
    elif dtype == "fp32":
        assert_close(gpu, cpu, FP32_TOL)
    else:
        a, e = values(gpu), values(cpu)
        assert not np.isnan(a).any(), f"{name}: NaN (an element never written?)"
        floor = Y_FLOOR if name.startswith("y") else DQKV_FLOOR
        bound = ulp(e, dtype) + floor * 2.0 ** -24 * float(np.abs(e).max(initial=0.0))
        assert np.all(np.abs(a - e) <= bound), f"{name}: {int((np.abs(a - e) > bound).sum())} elements past the bound"


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_dropped_probabilities_are_the_cpu_s_bits(dtype):
    n, t, heads, p = 3, 32, 2, 0.3
    rng = np.random.default_rng(7)
    qkv = np.zeros((n, t, 3, heads, t), np.float32)
    qkv[:, :, :2] = rng.standard_normal((n, t, 2, heads, t))
    qkv[:, :, 2] = np.eye(t, dtype=np.float32)[None, :, None, :]  # v_j = e_j: y_i = P'_i
    tw = _twin(n, t, heads, t, dtype, qkv.reshape(n, 1, t, 3 * heads * t))
    tw.run(_fwd(tw, heads, t ** -0.5, p), poison=("y", "stats", "key"))
    _exact(tw, "seed", "key")
    cpu, gpu = (values(a) for a in tw.both("y"))
    assert not np.isnan(gpu).any()
    np.testing.assert_array_equal(gpu == 0, cpu == 0)  # the dropped elements
    assert 0.6 < float((cpu != 0).mean()) < 0.8
    _check(tw, "y", dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_and_backward_match_the_cpu(case, dtype):
    n, t, heads, dh = case
    scale, p = dh ** -0.5, 0.1
    tw = _twin(n, t, heads, dh, dtype)
    tw.run(_fwd(tw, heads, scale, p), _bwd(tw, heads, scale, p), poison=("y", "stats", "key", "dqkv"))
    _exact(tw, "seed", "key")
    _check(tw, "y", dtype)
    _check(tw, "stats", dtype)
    if dtype == "fp32":  # the whole chain, each backend from its own forward
        _check(tw, "dqkv", dtype)
    for name in ("y", "stats"):  # the backward from the same y and stats on both sides (the CPU's)
        tw.write(name, tw.cpu.read(tw[name]))
    tw.run(_bwd(tw, heads, scale, p), poison=("dqkv",))
    _check(tw, "dqkv", dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_launch_from_the_same_seed_gives_the_same_bytes(dtype):
    n, t, heads, dh = 2, 197, 12, 64
    scale = dh ** -0.5
    tw = _twin(n, t, heads, dh, dtype)
    names = ("y", "stats", "dqkv", "key", "seed")
    runs = []
    for _ in range(2):  # two captures: new ops, new scratch
        graph = tw.gpu.capture("step", [_fwd(tw, heads, scale, 0.2), _bwd(tw, heads, scale, 0.2)])
        for _ in range(2):
            tw.gpu.write(tw["seed"], SEED)
            tw.poison("y", "stats", "dqkv", "key")
            tw.gpu.launch(graph)
            tw.gpu.synchronize()
            runs.append([tw.gpu.read(tw[name]).tobytes() for name in names])
    assert all(r == runs[0] for r in runs[1:])
    tw.gpu.launch(graph)  # without the reset: the stream moved on, so another draw
    tw.gpu.synchronize()
    assert tw.gpu.read(tw["y"]).tobytes() != runs[0][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_zero_runs_the_plain_kernels(dtype):
    n, t, heads, dh = 2, 17, 3, 64
    scale = dh ** -0.5
    tw = _twin(n, t, heads, dh, dtype)
    plain = op("attention_fwd", qkv=tw["qkv"], y=tw["y0"], stats=tw["stats"], heads=heads, scale=scale)
    zero = op("attention_fwd", qkv=tw["qkv"], y=tw["y"], stats=tw["stats"], heads=heads, scale=scale, dropout=0.0)
    tw.run(plain, zero, poison=("y", "y0"))
    g = tw.gpu
    assert g.read(tw["y"]).tobytes() == g.read(tw["y0"]).tobytes()
    assert g.read(tw["seed"]).tobytes() == SEED.tobytes()  # the stream untouched
