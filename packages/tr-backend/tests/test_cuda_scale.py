"""The CUDA channel scaling (squeeze-excitation's join, csrc/ops/scale.cu) against the CPU backend: scale_fwd
y = x * s and scale_bwd (ds = sum over H*W of dy * x, with and without dx = dy * s), across dtypes, mixed
dtypes, channel counts that take the 16-byte vector path or not, H*W = 1, many row chunks (112x112x32) and
many channel tiles (7x7x1152); and the same bytes on every launch of one captured graph.

Tolerances (relative to the data's scale): y and dx are one float multiply rounded to the output's dtype on
both sides: FP32 exact, FP16/BF16 within one rounding (2e-3 / 1.6e-2). ds sums H*W products (float64 on the
GPU, float32 on the CPU): FP32 1e-5 (the CPU's float32 sum is the coarser one: ~7e-6 at 112x112, so FP32 ds
is also held to 1e-6 of a float64 sum of the same float32 products), FP16/BF16 within one rounding of the output.
"""

import re

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin, as_f64, close

pytestmark = pytest.mark.gpu

TOL = {"fp32": 0.0, "fp16": 2e-3, "bf16": 1.6e-2}
DS_TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}
SHAPES = [(2, 5, 7, 3), (4, 1, 1, 40), (3, 9, 11, 20), (2, 112, 112, 32), (4, 7, 7, 1152)]
IDS = ["c3", "hw1", "c20", "112x112x32", "7x7x1152"]


def _twin(shape, x="fp32", s=None, y=None, dx=None):
    """x, y, dy, dx of x's shape; s, ds [N,1,1,C]. dy has y's dtype, ds s's, dx x's unless given."""
    dts = {"x": x, "y": y or x, "dy": y or x, "dx": dx or x, "s": s or x, "ds": s or x}
    n, c = shape[0], shape[-1]
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, shape, dts[name])
    for name in ("s", "ds"):
        tw.add(name, (n, 1, 1, c), dts[name])
    tw.allocate()
    tw.fill("x")
    tw.fill("dy")
    tw.fill("s", 0.0, 1.0)  # a sigmoid gate's range
    return tw, dts


def _fwd(t):
    return op("scale_fwd", x=t["x"], s=t["s"], y=t["y"])


def _bwd(t, with_dx=True):
    return op("scale_bwd", x=t["x"], s=t["s"], dy=t["dy"], ds=t["ds"], dx=t["dx"] if with_dx else None)


def _check(tw, dts, *names):
    for name in names:
        cpu, gpu = tw.both(name)
        close(gpu, cpu, (DS_TOL if name == "ds" else TOL)[dts[name]], name)
    if "ds" in names and dts["ds"] == "fp32":
        x, dy = (as_f64(tw.gpu.read(tw[n])).astype(np.float32) for n in ("x", "dy"))
        close(tw.gpu.read(tw["ds"]), (dy * x).astype(np.float64).sum(axis=(1, 2), keepdims=True), 1e-6, "ds (float64)")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_scale_forward_backward(shape, dtype):
    tw, dts = _twin(shape, dtype)
    t = tw.arena.tensors
    tw.run(_fwd(t), _bwd(t), poison=("y", "ds", "dx"))
    _check(tw, dts, "y", "dx", "ds")


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[3], SHAPES[4]], ids=[IDS[0], IDS[3], IDS[4]])
def test_scale_backward_without_dx_writes_only_ds(shape, dtype):
    tw, dts = _twin(shape, dtype)
    t = tw.arena.tensors
    tw.run(_bwd(t, with_dx=False), poison=("ds", "dx"))
    _check(tw, dts, "ds")
    assert np.isnan(tw.gpu.read(t["dx"]).astype(np.float32)).all(), "dx was written though not asked for"


# AMP (FP16 features, FP32 factors); an FP32 dx of FP16 x and dy (two 16-byte words per 8 channels); an FP32 y
# of FP16 x (likewise; dy FP32, so the backward reads 4 channels at a time); BF16 x with FP32 gradients, FP16 s
MIXED = [dict(x="fp16", s="fp32", y="fp16"), dict(x="fp16", s="fp32", y="fp16", dx="fp32"),
         dict(x="fp16", s="fp16", y="fp32"), dict(x="bf16", s="fp16", y="fp32", dx="fp32")]


@pytest.mark.parametrize("dts", MIXED, ids=["amp", "fp32-dx", "fp32-y", "bf16-x"])
@pytest.mark.parametrize("shape", [SHAPES[2], SHAPES[3], SHAPES[4]], ids=[IDS[2], IDS[3], IDS[4]])
def test_scale_mixed_dtypes(shape, dts):
    tw, dts = _twin(shape, **dts)
    t = tw.arena.tensors
    tw.run(_fwd(t), _bwd(t), poison=("y", "ds", "dx"))
    _check(tw, dts, "y", "dx", "ds")


def test_vector_paths_and_chunks_are_the_ones_planned():
    """16-byte vectors where C fills them, one element otherwise; several row chunks (a second kernel adds them)
    unless the blocks of one chunk per tile and sample already fill the device or H*W is small (ds written directly)."""
    for shape, dtype, vec, many in (((2, 112, 112, 32), "fp16", 8, True), ((4, 7, 7, 1152), "fp32", 4, True),
                                    ((3, 9, 11, 20), "fp16", 1, True), ((2, 5, 7, 3), "fp32", 1, False),
                                    ((4, 1, 1, 40), "fp16", 8, False)):
        tw, _ = _twin(shape, dtype)
        t = tw.arena.tensors
        _, gg = tw.run(_fwd(t), _bwd(t))
        fwd, bwd = gg.ops[0].info, gg.ops[1].info
        assert fwd == f"vec{vec}" and bwd.startswith(f"vec{vec},"), (fwd, bwd)
        chunks = int(re.search(r"chunks=(\d+)", bwd).group(1))
        assert (chunks > 1) == many, bwd


def test_scale_is_deterministic():
    """Fixed chunking and summation order: the same bytes on every launch of one captured graph."""
    for dtype in ("fp32", "fp16"):
        tw, _ = _twin((8, 56, 56, 96), dtype)
        t = tw.arena.tensors
        graph = tw.gpu.capture("step", [_fwd(t), _bwd(t)])
        assert "chunks=1," not in graph.ops[1].info  # the two-kernel sum is the one to check
        runs = []
        for _ in range(3):
            tw.gpu.launch(graph)
            tw.gpu.synchronize()
            runs.append([tw.gpu.read(t[n]).tobytes() for n in ("y", "ds", "dx")])
        assert runs[0] == runs[1] == runs[2]
