"""The residual join fused into layer norm on the device (csrc/ops/layernorm.cu: ln_fwd with z and sum, ln_bwd with
dx2; tr.graph.passes.fuse_add_norm), against the CPU backend and against the unfused CUDA ops.

- CUDA against CPU, same inputs: the join's sum is one float add rounded once, so sum is equal byte for byte; y, the
  statistics, dx, dgamma and dbeta within test_cuda_layernorm_builders.py's bounds for the unfused ops (the float64
  row sums differ in order only; dx2 adds one rounding of the stored dx on both sides);
- CUDA fused against CUDA unfused (add_fwd then ln_fwd, ln_bwd then accumulate): the same bytes, since the fused
  kernels compute the same float operations in the same order over the same row partition;
- in place (sum over x or z, dx over dx2: the catalogue's pairs, which the compiler uses) the same bytes too, and
  inference without sum (x + z recomputed in every pass) training's y.
Odd token counts, widths 64 and 768 (ViT-S/B) on the 16-byte vector path, 13 on the scalar one and 1536 a block a
row; FP32, FP16 and BF16. (Written without a GPU: not yet run on one.)
"""

from __future__ import annotations

import dataclasses

import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

from tr.core.ops import OpCall

pytestmark = pytest.mark.gpu

TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}
SHAPES = [(4, 1, 17, 64), (2, 1, 197, 768), (3, 1, 5, 13), (2, 1, 9, 1536)]
IDS = ["t17-c64", "t197-c768", "t5-c13-scalar", "t9-c1536-block-row"]
FEATURES = ("a", "b", "s", "y", "dy", "dskip", "dx", "s_f", "y_f", "dx_f")


def _twin(shape: tuple[int, int, int, int], dtype: str) -> Twin:
    n, h, w, c = shape
    tw = Twin()
    for name in FEATURES:
        tw.add(name, shape, dtype)
    for name in ("gamma", "beta", "dgamma", "dbeta", "dgamma_f", "dbeta_f"):
        tw.add(name, (1, 1, 1, c))
    for name in ("mean", "rstd", "mean_f", "rstd_f"):
        tw.add(name, (n, h, w, 1))
    tw.allocate()
    tw.write("a", tw.fill("a") * 3 + 1)  # an offset: the mean is not ~0
    tw.fill("b", -0.3, 0.3)
    for name in ("dy", "dskip", "beta"):
        tw.fill(name)
    tw.fill("gamma", 0.5, 1.5)
    return tw


def _fused(t: dict, stats: bool = True, out: str | None = "s_f", x: str = "a", z: str = "b") -> OpCall:
    saved = {"saved_mean": t["mean_f"], "saved_rstd": t["rstd_f"]} if stats else {}
    extra = {"sum": t[out]} if out else {}
    return op("ln_fwd", x=t[x], z=t[z], gamma=t["gamma"], beta=t["beta"], y=t["y_f"], eps=1e-6, **saved, **extra)


def _fused_bwd(t: dict, dx: str = "dx_f") -> OpCall:
    return op("ln_bwd", x=t["s_f"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["mean_f"], saved_rstd=t["rstd_f"],
              dx=t[dx], dx2=t["dskip"], dgamma=t["dgamma_f"], dbeta=t["dbeta_f"])


def _unfused(t: dict) -> tuple[OpCall, ...]:
    return (op("add_fwd", a=t["a"], b=t["b"], y=t["s"], activation=None),
            op("ln_fwd", x=t["s"], gamma=t["gamma"], beta=t["beta"], y=t["y"], saved_mean=t["mean"],
               saved_rstd=t["rstd"], eps=1e-6),
            op("ln_bwd", x=t["s"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["mean"], saved_rstd=t["rstd"],
               dx=t["dx"], dgamma=t["dgamma"], dbeta=t["dbeta"]),
            op("accumulate", x=t["dskip"], y=t["dx"]))


def _gpu_same(tw: Twin, pairs: tuple[tuple[str, str], ...]) -> None:
    for unfused, fused in pairs:
        u, f = tw.gpu.read(tw[unfused]), tw.gpu.read(tw[fused])
        assert u.tobytes() == f.tobytes(), f"{fused} differs from the unfused {unfused}: {int((u != f).sum())} values"


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_cuda_fused_layernorm_matches_the_cpu_backend(shape, dtype):
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    _, gg = tw.run(_fused(t), poison=("s_f", "y_f", "mean_f", "rstd_f"))
    assert "x + z kept in sum" in gg.ops[0].info
    cpu, gpu = tw.both("s_f")
    assert cpu.tobytes() == gpu.tobytes()  # one float add, rounded once: exact on both
    close(*tw.both("y_f"), TOL[dtype], "y")
    for n in ("mean_f", "rstd_f"):
        close(*tw.both(n), 1e-6, n)
    for n in ("mean_f", "rstd_f"):  # the backward from the GPU's own statistics on both sides
        tw.cpu.write(t[n], tw.gpu.read(t[n]))
    _, gg = tw.run(_fused_bwd(t), poison=("dx_f", "dgamma_f", "dbeta_f"))
    assert "for dx + dx2" in gg.ops[0].info
    close(*tw.both("dx_f"), TOL[dtype], "dx")
    for n in ("dgamma_f", "dbeta_f"):
        close(*tw.both(n), 1e-4, n)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=IDS[:2])
def test_cuda_fused_ops_give_the_unfused_cuda_bytes(shape, dtype):
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    tw.run(*_unfused(t))
    tw.run(_fused(t), _fused_bwd(t), poison=("s_f", "y_f", "mean_f", "rstd_f", "dx_f", "dgamma_f", "dbeta_f"))
    _gpu_same(tw, (("s", "s_f"), ("y", "y_f"), ("mean", "mean_f"), ("rstd", "rstd_f"), ("dx", "dx_f"),
                   ("dgamma", "dgamma_f"), ("dbeta", "dbeta_f")))


def _alias(t: dict, name: str, of: str) -> dict:
    return {**t, name: dataclasses.replace(t[of], id=10_000 + len(t), name=name)}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cuda_in_place_and_inference_without_sum_give_the_same_bytes(dtype):
    shape = (4, 1, 17, 768)
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    tw.run(*_unfused(t))  # the reference: s, y, statistics, dx, on the device
    a0, b0 = tw.gpu.read(t["a"]).copy(), tw.gpu.read(t["b"]).copy()
    for into in ("a", "b"):  # sum written over x, then over z
        tw.gpu.write(t["a"], a0)
        tw.gpu.write(t["b"], b0)
        tw.run(_fused(_alias(t, "s_here", into), out="s_here"), poison=("y_f", "mean_f", "rstd_f"))
        _gpu_same(tw, (("s", into), ("y", "y_f"), ("mean", "mean_f"), ("rstd", "rstd_f")))
    tw.gpu.write(t["a"], a0)
    tw.gpu.write(t["b"], b0)
    _, gg = tw.run(_fused(t, stats=False, out=None), poison=("y_f",))  # inference, the sum not kept
    assert "x + z recomputed" in gg.ops[0].info
    _gpu_same(tw, (("y", "y_f"),))
    tw.run(_fused(t))  # s_f and the statistics for the backward
    tw.run(_fused_bwd(_alias(t, "dx_here", "dskip"), dx="dx_here"), poison=("dgamma_f", "dbeta_f"))
    _gpu_same(tw, (("dx", "dskip"), ("dgamma", "dgamma_f"), ("dbeta", "dbeta_f")))


def test_cuda_fused_layernorm_is_deterministic():
    tw = _twin((64, 1, 197, 768), "bf16")
    t = tw.arena.tensors
    graph = tw.gpu.capture("step", [_fused(t), _fused_bwd(t)])
    runs = []
    for _ in range(3):
        tw.gpu.launch(graph)
        tw.gpu.synchronize()
        runs.append([tw.gpu.read(t[n]).tobytes() for n in ("s_f", "y_f", "mean_f", "rstd_f", "dx_f", "dgamma_f",
                                                            "dbeta_f")])
    assert runs[0] == runs[1] == runs[2]
