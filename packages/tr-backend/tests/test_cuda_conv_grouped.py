"""Grouped and depthwise conv_fwd / conv_bwd on the CUDA backend (cuDNN's frontend graphs and the direct kernels)
against the CPU backend, which test_cpu_conv_grouped.py holds to torch's ``groups``. Tolerances as
test_cuda_ops.py: FP32 1e-5 of the output's scale, FP16 2e-3; each engine's op info says it ran, and a
relaunch gives the same bytes (deterministic engines only). GPU-only."""

from __future__ import annotations

import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

pytestmark = pytest.mark.gpu

# (N, H, W, C, K, R, stride, padding, groups): MobileNet's depthwise 3x3 (stride 1 and 2), a multiplier,
# two groups, grouped pointwise, and a depthwise layer at MobileNetV2's widest (960 channels)
CASES = [
    (4, 12, 12, 32, 32, 3, 1, 1, 32),
    (4, 13, 13, 24, 24, 3, 2, 1, 24),
    (2, 8, 8, 6, 12, 5, 1, 2, 6),
    (2, 9, 7, 16, 8, 3, 1, 0, 2),
    (3, 6, 6, 12, 18, 1, 1, 0, 3),
    (2, 7, 7, 960, 960, 3, 1, 1, 960),
]


def _twin(n, h, w, c, k, r, stride, pad, groups, dt):
    tw = Twin()
    p = (h + 2 * pad - r) // stride + 1
    q = (w + 2 * pad - r) // stride + 1
    tw.add("x", (n, h, w, c), dt)
    tw.add("w", (k, r, r, c // groups), dt)
    tw.add("y", (n, p, q, k), dt)
    tw.add("dy", (n, p, q, k), dt)
    tw.add("dw", (k, r, r, c // groups), dt)
    tw.add("dx", (n, h, w, c), dt)
    tw.allocate()
    for name in ("x", "w", "dy"):
        tw.fill(name)
    return tw


@pytest.mark.parametrize("dt", ["fp32", "fp16"])
@pytest.mark.parametrize("engine", ["cudnn", "direct"])
@pytest.mark.parametrize("n,h,w,c,k,r,stride,pad,groups", CASES)
def test_grouped_conv_matches_the_cpu(n, h, w, c, k, r, stride, pad, groups, engine, dt, monkeypatch):
    monkeypatch.setenv("TR_CONV", engine)
    tw = _twin(n, h, w, c, k, r, stride, pad, groups, dt)
    geo = {"kernel": r, "stride": stride, "padding": pad, "groups": groups}
    calls = (op("conv_fwd", x=tw["x"], w=tw["w"], y=tw["y"], **geo),
             op("conv_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], dx=tw["dx"], **geo))
    _, gg = tw.run(*calls, poison=("y", "dw", "dx"))
    infos = [o.info for o in gg.ops]
    assert all(i.startswith(engine) for i in infos), infos
    tol = 1e-5 if dt == "fp32" else 2e-3
    for name in ("y", "dw", "dx"):
        c_, g_ = tw.both(name)
        close(g_, c_, tol, name)
    first = {name: tw.gpu.read(tw[name]).tobytes() for name in ("y", "dw", "dx")}
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert all(tw.gpu.read(tw[name]).tobytes() == b for name, b in first.items())


@pytest.mark.parametrize("engine", ["cudnn", "direct"])
def test_grouped_wgrad_without_dx(engine, monkeypatch):
    """The first layer's conv_bwd has no dx: only the weight gradient."""
    monkeypatch.setenv("TR_CONV", engine)
    tw = _twin(2, 8, 8, 8, 8, 3, 1, 1, 8, "fp32")
    geo = {"kernel": 3, "stride": 1, "padding": 1, "groups": 8}
    tw.run(op("conv_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], **geo), poison=("dw",))
    c_, g_ = tw.both("dw")
    close(g_, c_, 1e-5, "dw")
