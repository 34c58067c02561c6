"""tr's CUDA attention kernels (csrc/ops/attention.cu: attention_fwd, attention_bwd) against the CPU backend
(tr/backend/cpu/ops/attention.py, which test_cpu_attention.py holds to torch). GPU-only. FP16 and BF16 attention
runs cuDNN's SDPA by default: these tests configure the backend with attention_sdpa=False to hold tr's kernels to
their bounds; cuDNN's engine has its own (test_cuda_attention_sdpa.py: its probabilities are rounded to 16 bits).

Both backends compute in float32 from the same widened values and round each output once; they differ only in
the order of their sums (the CPU's BLAS GEMMs and numpy's pairwise row sums; the kernels' channel-order dot
products, a fixed block tree for the softmax row sum, token-order sums for y, dQ, dK and dV) and in exp/log's
last bit. Bounds (errors as max |a - e| over max(1, max |e|)):

- FP32: y and dqkv within 4e-6, stats within 1e-6: the bounds test_cpu_attention.py holds the CPU to against
  float64 (float32 rounding of the scores, amplified by exp); each backend is that close to the exact result,
  and the two orders' roundings are independent, so their difference is of the same size. A float32 model of
  the kernels' arithmetic (sequential dots, the fixed tree) differed from the CPU by at most 1.3e-6 (y, dqkv) and
  3.9e-7 (stats) on CASES. With thousands of tokens the token-order float32 sums round ~sqrt(T) times 2^-24 of
  the result (the CPU's blocked sums less): 2e-5 there (the model: 3.2e-6 at T = 6200).
- FP16 / BF16: one ulp of the dtype (the two float32 results may round to neighbours) plus a floor of k * 2^-24 *
  max |e| (k = 8 for y, 16 for dqkv): small elements, whose ulp is tiny, carry the float32 error of the large
  terms they cancel (dP - D_i in the backward), as in test_cpu_attention.py's comparison with torch (floors 8
  and 48 there); the model's excess over one ulp was at most 2.3 (y) and 3.4 (dqkv) units. The backward is
  compared from the same y and stats on both sides (the CPU's, written to the device): D_i = rowsum(dy * y)
  reads y as stored, and a y rounded to the neighbouring value on one side moves D_i by dy * ulp(y), far more
  than float32 noise. stats are FP32 from either dtype: 1e-6.
- Every launch gives the same bytes (no atomics, fixed orders), and the forward without stats (inference) gives
  the training forward's y byte for byte.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import assert_close, op, ulp, values
from cuda_testkit import Twin

from tr.core.errors import ConfigError

pytestmark = pytest.mark.gpu

# (N, T, heads, dh): one token, odd counts, ViT-B/16's 197; head sizes 8, 64 and 128; one to twelve heads
CASES = [(2, 1, 2, 8), (3, 5, 4, 8), (2, 5, 1, 64), (2, 17, 3, 64), (1, 17, 2, 128), (3, 17, 12, 8),
         (2, 197, 12, 64), (2, 197, 2, 128), (1, 197, 1, 8)]
IDS = ["t1", "t5-dh8", "t5-one-head", "t17-dh64", "t17-dh128", "t17-12-heads", "vit-b-t197", "t197-dh128",
       "t197-one-head"]
DTYPES = ["fp32", "fp16", "bf16"]
FP32_TOL, STATS_TOL, LONG_TOL = 4e-6, 1e-6, 2e-5
Y_FLOOR, DQKV_FLOOR = 8.0, 16.0  # units of 2^-24 * max|e| (module docstring)


def _twin(n: int, t: int, heads: int, dh: int, dtype: str, seed: int = 0) -> Twin:
    d = heads * dh
    tw = Twin()
    for name in ("qkv", "dqkv"):
        tw.add(name, (n, 1, t, 3 * d), dtype)
    for name in ("y", "y_inf", "dy"):
        tw.add(name, (n, 1, t, d), dtype)
    tw.add("stats", (n, 1, heads, t))
    tw.allocate()
    tw.gpu.configure(attention_sdpa=False)  # tr's kernels in every dtype (read at capture)
    rng = np.random.default_rng(seed + n + t + heads + dh)
    tw.write("qkv", 1.5 * rng.standard_normal((n, 1, t, 3 * d)))
    tw.write("dy", rng.standard_normal((n, 1, t, d)))
    return tw


def _fwd(tw: Twin, heads: int, scale: float, stats: bool = True, y: str = "y"):
    return op("attention_fwd", qkv=tw["qkv"], y=tw[y], stats=tw["stats"] if stats else None, heads=heads,
              scale=scale)


def _bwd(tw: Twin, heads: int, scale: float):
    return op("attention_bwd", qkv=tw["qkv"], y=tw["y"], dy=tw["dy"], stats=tw["stats"], dqkv=tw["dqkv"],
              heads=heads, scale=scale)


def _within_ulp(gpu: np.ndarray, cpu: np.ndarray, dtype: str, floor: float, what: str) -> None:
    """|gpu - cpu| <= ulp(cpu) + floor * 2^-24 * max|cpu| everywhere (both hold ``dtype`` values)."""
    a, e = values(gpu), values(cpu)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert not np.isnan(a).any(), f"{what}: NaN (an element never written?)"
    u = ulp(e, dtype)
    bound = u + floor * 2.0 ** -24 * float(np.abs(e).max(initial=0.0))
    err = np.abs(a - e)
    assert np.all(err <= bound), (f"{what}: {int((err > bound).sum())} elements past one {dtype} ulp (+ {floor} * "
                                  f"2^-24 * max|e|): worst {float((err / u).max()):.2f} ulps")


def _check(tw: Twin, name: str, dtype: str, tol: float = FP32_TOL) -> None:
    cpu, gpu = tw.both(name)
    if name == "stats":
        assert_close(gpu, cpu, STATS_TOL)
    elif dtype == "fp32":
        assert_close(gpu, cpu, tol)
    else:
        _within_ulp(gpu, cpu, dtype, Y_FLOOR if name.startswith("y") else DQKV_FLOOR, name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_and_backward_match_the_cpu(case, dtype):
    n, t, heads, dh = case
    scale = dh ** -0.5
    tw = _twin(n, t, heads, dh, dtype)
    tw.run(_fwd(tw, heads, scale), _bwd(tw, heads, scale), poison=("y", "stats", "dqkv"))
    _check(tw, "y", dtype)
    _check(tw, "stats", dtype)
    if dtype == "fp32":  # the whole chain, each backend from its own forward
        _check(tw, "dqkv", dtype)
    # the backward from the same y and stats on both sides (the CPU's)
    for name in ("y", "stats"):
        tw.write(name, tw.cpu.read(tw[name]))
    tw.run(_bwd(tw, heads, scale), poison=("dqkv",))
    _check(tw, "dqkv", dtype)


@pytest.mark.parametrize("scale", [0.05, 1.0, 2.5])
def test_other_scales(scale):
    n, t, heads, dh = 2, 17, 4, 16
    tw = _twin(n, t, heads, dh, "fp32")
    tw.run(_fwd(tw, heads, scale), _bwd(tw, heads, scale), poison=("y", "stats", "dqkv"))
    for name in ("y", "stats", "dqkv"):
        _check(tw, name, "fp32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[6]], ids=[IDS[0], IDS[3], IDS[6]])
def test_inference_forward_writes_no_stats_and_the_training_y(case, dtype):
    n, t, heads, dh = case
    scale = dh ** -0.5
    tw = _twin(n, t, heads, dh, dtype)
    tw.run(_fwd(tw, heads, scale), poison=("y",))
    tw.run(_fwd(tw, heads, scale, stats=False, y="y_inf"), poison=("y_inf", "stats"))
    _check(tw, "y_inf", dtype)
    g = tw.gpu
    assert g.read(tw["y_inf"]).tobytes() == g.read(tw["y"]).tobytes()
    assert np.isnan(g.read(tw["stats"])).all(), "the inference forward wrote stats"


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_launch_gives_the_same_bytes(dtype):
    n, t, heads, dh = 2, 197, 12, 64
    scale = dh ** -0.5
    tw = _twin(n, t, heads, dh, dtype)
    names = ("y", "stats", "dqkv")
    runs = []
    for _ in range(2):  # two captures: new ops, new scratch
        graph = tw.gpu.capture("step", [_fwd(tw, heads, scale), _bwd(tw, heads, scale)])
        for _ in range(2):
            tw.poison(*names)
            tw.gpu.launch(graph)
            tw.gpu.synchronize()
            runs.append([tw.gpu.read(tw[name]).tobytes() for name in names])
    assert all(r == runs[0] for r in runs[1:])


def test_long_sequences_take_the_larger_shared_memory():
    """Past 48 KiB of dynamic shared memory a kernel must opt in: the forward's scores at T = 12400 (49.6 KB),
    the backward's per-key block at T = 6200 (two T-float rows and k_j, v_j: 49.7 KB)."""
    heads, dh = 1, 8
    scale = dh ** -0.5
    tw = _twin(1, 6200, heads, dh, "fp32")
    tw.run(_fwd(tw, heads, scale), _bwd(tw, heads, scale), poison=("y", "stats", "dqkv"))
    for name in ("y", "stats", "dqkv"):
        _check(tw, name, "fp32", LONG_TOL)
    tw = _twin(1, 12400, heads, dh, "fp32")
    tw.run(_fwd(tw, heads, scale), poison=("y", "stats"))
    for name in ("y", "stats"):
        _check(tw, name, "fp32", LONG_TOL)


def test_too_many_tokens_for_shared_memory_are_refused_naming_t():
    """A block holds a row of T scores in shared memory (227 KiB at most on an H100): T = 70000 is refused for the
    forward (280 KB); T = 35000 fits the forward (140 KB) but not the backward's two rows (280 KB)."""
    heads, dh = 1, 8
    tw = Twin()
    for t in (70000, 35000):
        tw.add(f"qkv{t}", (1, 1, t, 3 * dh))
        tw.add(f"dqkv{t}", (1, 1, t, 3 * dh))
        for name in ("y", "dy"):
            tw.add(f"{name}{t}", (1, 1, t, dh))
        tw.add(f"stats{t}", (1, 1, heads, t))
    tw.allocate()

    def call(name: str, t: int):
        x = {k: tw[f"{k}{t}"] for k in ("qkv", "y", "stats", "dy", "dqkv")}
        if name == "attention_fwd":
            return op(name, qkv=x["qkv"], y=x["y"], stats=x["stats"], heads=heads, scale=0.5)
        return op(name, heads=heads, scale=0.5, **x)

    with pytest.raises(ConfigError, match=r"attention_fwd.*T=70000 tokens do not fit"):
        tw.gpu.capture("g", [call("attention_fwd", 70000)])
    tw.gpu.capture("g", [call("attention_fwd", 35000)])
    with pytest.raises(ConfigError, match=r"attention_bwd.*T=35000 tokens do not fit"):
        tw.gpu.capture("g", [call("attention_bwd", 35000)])
