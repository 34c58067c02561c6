"""conv_fwd's bias and conv_bwd's bias gradient on the CUDA backend (cuDNN's graphs and the direct kernels, each
followed or preceded by csrc/ops/conv.cu's bias kernels) against the CPU backend, which test_cpu_conv.py holds
to torch's conv2d bias. Tolerances as test_cuda_conv_grouped.py: FP32 1e-5 of the output's scale, FP16 2e-3 (the
GPU rounds the convolution's output to FP16 before it adds the bias, the CPU once after). The bias gradient
sums in a fixed order: a relaunch gives the same bytes. GPU-only."""

from __future__ import annotations

import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

pytestmark = pytest.mark.gpu

# (N, H, W, C, K, R, stride, padding, groups): a plain 3x3, a strided grouped one, a 1x1 over many rows
# (the bias gradient's 512 chunks) and a K that is no multiple of 32 (a partial column block)
CASES = [
    (2, 9, 9, 8, 16, 3, 1, 1, 1),
    (3, 10, 10, 12, 24, 3, 2, 1, 4),
    (16, 32, 32, 16, 64, 1, 1, 0, 1),
    (2, 7, 7, 5, 37, 3, 1, 1, 1),
]


@pytest.mark.parametrize("dt", ["fp32", "fp16"])
@pytest.mark.parametrize("engine", ["cudnn", "direct"])
@pytest.mark.parametrize("n,h,w,c,k,r,stride,pad,groups", CASES)
def test_conv_bias_matches_the_cpu(n, h, w, c, k, r, stride, pad, groups, engine, dt, monkeypatch):
    monkeypatch.setenv("TR_CONV", engine)
    tw = Twin()
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
    tw.add("x", (n, h, w, c), dt)
    tw.add("w", (k, r, r, c // groups), dt)
    tw.add("b", (1, 1, 1, k), dt)
    tw.add("y", (n, p, q, k), dt)
    tw.add("dy", (n, p, q, k), dt)
    tw.add("dw", (k, r, r, c // groups), dt)
    tw.add("db", (1, 1, 1, k), "fp32")
    tw.add("dx", (n, h, w, c), dt)
    tw.allocate()
    for name in ("x", "w", "b", "dy"):
        tw.fill(name)
    geo = {"kernel": r, "stride": stride, "padding": pad, "groups": groups}
    calls = (op("conv_fwd", x=tw["x"], w=tw["w"], b=tw["b"], y=tw["y"], **geo),
             op("conv_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], db=tw["db"], dx=tw["dx"], **geo))
    _, gg = tw.run(*calls, poison=("y", "dw", "db", "dx"))
    infos = [o.info for o in gg.ops]
    assert engine in infos[0] and "bias kernel" in infos[0], infos
    assert engine in infos[1] and "bias gradient" in infos[1], infos
    tol = 1e-5 if dt == "fp32" else 2e-3
    for name in ("y", "db", "dw", "dx"):
        c_, g_ = tw.both(name)
        close(g_, c_, tol, name)
    first = tw.gpu.read(tw["db"]).tobytes()
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert tw.gpu.read(tw["db"]).tobytes() == first
