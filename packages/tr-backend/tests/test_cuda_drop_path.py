"""The CUDA drop path (csrc/ops/drop_path.cu) against the CPU backend (test_cpu_drop_path.py holds that to torch).
GPU-only.

Everything is exact: the keep decision is Philox of (seed, sample) on both sides, the seed advances by the same
splitmix64, and y = x / (1-p) (dx = dy / (1-p)) is one float32 division rounded once to the dtype (--fmad=false, IEEE
division), so mask, seed, y and dx are compared byte for byte in FP32, FP16 and BF16. The shapes cover more samples
than the mask kernel's block has threads (300) and more than a grid's y dimension (70,000 rows of 3 elements).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin

from tr.backend.checks import where
from tr.core.errors import TrError

pytestmark = pytest.mark.gpu

SHAPES = [(6, 1, 5, 8), (300, 1, 197, 3), (70000, 1, 1, 3)]
IDS = ["vit-branch", "300-samples", "70000-samples"]


def exact(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert c.dtype == g.dtype and np.array_equal(c.view(np.uint8), g.view(np.uint8)), f"{name} differs"


def _twin(shape: tuple, dt: str, seed: int) -> Twin:
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, shape, dt)
    tw.add("mask", (shape[0], 1, 1, 1), "int8")
    tw.add("seed", (2,), "int32")
    tw.allocate()
    tw.fill("x")
    tw.fill("dy")
    tw.write("seed", np.array([seed], dtype="<u8").view(np.int32))
    return tw


def _fwd(tw: Twin, p: float):
    return op("drop_path_fwd", x=tw["x"], y=tw["y"], mask=tw["mask"], seed=tw["seed"], p=p)


def _bwd(tw: Twin, p: float, dx: str = "dx"):
    return op("drop_path_bwd", dy=tw["dy"], mask=tw["mask"], dx=tw[dx], p=p)


@pytest.mark.parametrize("dt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_mask_seed_and_values_are_the_cpu_s_bytes(shape, dt):
    p = 0.3
    tw = _twin(shape, dt, 0x0BADF00D12345678)
    gc, gg = tw.run(_fwd(tw, p), poison=("y", "mask"))
    exact(tw, "mask", "y", "seed")
    tw.cpu.launch(gc)  # a second step draws afresh from the advanced seed
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    exact(tw, "mask", "y", "seed")
    tw.run(_bwd(tw, p), poison=("dx",))
    exact(tw, "dx")
    tw.run(_bwd(tw, p, dx="dy"))  # in place
    exact(tw, "dy")
    if shape[0] >= 300:
        kept = float(tw.gpu.read(tw["mask"]).mean())
        assert abs(kept - (1 - p)) <= 4.5 * math.sqrt(p * (1 - p) / shape[0])


def test_dropped_samples_are_zero_for_inf_and_nan_too():
    shape, p = (64, 1, 3, 4), 0.5
    tw = _twin(shape, "fp32", 5)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[:, 0, 0, :3] = [np.inf, -np.inf, np.nan]
    tw.write("x", x)
    tw.run(_fwd(tw, p), poison=("y", "mask"))
    exact(tw, "mask")
    # a kept NaN stays NaN (its payload is the device's: compared as values), every other element byte for byte
    c, g = tw.both("y")
    nan = np.isnan(c)
    assert np.array_equal(nan, np.isnan(g)) and np.array_equal(c[~nan].view(np.uint32), g[~nan].view(np.uint32))
    keep = tw.gpu.read(tw["mask"]).reshape(-1).astype(bool)
    assert 0 < keep.sum() < len(keep) and np.all(tw.gpu.read(tw["y"])[~keep] == 0)


def test_each_capture_and_launch_from_the_same_seed_gives_the_same_bytes():
    shape = (300, 1, 197, 3)
    tw = _twin(shape, "bf16", 99)
    seed = tw.gpu.read(tw["seed"]).copy()
    runs = []
    for _ in range(2):
        graph = tw.gpu.capture("step", [_fwd(tw, 0.2), _bwd(tw, 0.2)])
        for _ in range(2):
            tw.gpu.write(tw["seed"], seed)
            tw.poison("y", "mask", "dx")
            tw.gpu.launch(graph)
            tw.gpu.synchronize()
            runs.append([tw.gpu.read(tw[name]).tobytes() for name in ("mask", "y", "dx", "seed")])
    assert all(r == runs[0] for r in runs[1:])


def test_the_rule_refuses_p_one_before_the_device():
    tw = _twin((4, 1, 1, 8), "fp32", 1)
    call = _fwd(tw, 1.0)
    with pytest.raises(TrError, match=r"drop path probability p must be in \[0, 1\), got 1.0") as info:
        tw.gpu.capture("g", [call])
    assert str(info.value).startswith(where("g", 0, call))
