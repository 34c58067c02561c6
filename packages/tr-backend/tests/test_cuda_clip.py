"""clip_grad_norm on the CUDA backend against the CPU backend: the norm and the divisor over gradients of many
blocks' worth (float64 sums in a fixed order on both sides: equal after rounding to FP32, within one FP32 ulp where
the two orders round apart), a flagged step, and repeated launches giving the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import FC_W, SCALAR_FP32, SCALAR_INT32, op
from cuda_testkit import Twin

from tr.core.memory import Region, Role, Span  # (FC_W: a decayed group, rows = units)

pytestmark = pytest.mark.gpu


def _twin(n: int) -> Twin:
    tw = Twin()
    tw.add("g", (n,), "fp32", Region(Role.GRAD, FC_W))
    for name in ("scale", "divisor", "norm"):
        tw.add(name, (1,), "fp32", SCALAR_FP32)
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    return tw.allocate()


@pytest.mark.parametrize("n,max_norm,scale", [(1000, 1.0, 1.0), (3_000_001, 10.0, 65536.0), (77, 1e6, 2.0)])
@pytest.mark.parametrize("flag", [0, 1])
def test_the_norm_and_divisor_match_the_cpu(n, max_norm, scale, flag):
    tw = _twin(n)
    tw.write("g", tw.rng.standard_normal(n).astype(np.float32) * np.float32(scale))
    tw.write("scale", [scale])
    tw.write("flag", [flag])
    call = op("clip_grad_norm", g=Span.of(Role.GRAD), scale=tw["scale"], flag=tw["flag"], divisor=tw["divisor"],
              norm=tw["norm"], max_norm=max_norm)
    _, gg = tw.run(call, poison=("divisor", "norm"))
    for name in ("norm", "divisor"):
        c, g = (float(a.ravel()[0]) for a in tw.both(name))
        assert g == pytest.approx(c, rel=1.2e-7), name  # one FP32 ulp at most
    first = tw.gpu.read(tw["divisor"]).copy()
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert tw.gpu.read(tw["divisor"]).tobytes() == first.tobytes()  # a fixed order: the same bits every launch


@pytest.mark.parametrize("per_unit", [True, False])
@pytest.mark.parametrize("scale", [1.0, 4096.0])
def test_adaptive_clipping_matches_the_cpu(per_unit, scale):
    tw = Twin()
    tw.add("w", (64, 3, 3, 32), "fp32", Region(Role.PARAM, FC_W))
    tw.add("g", (64, 3, 3, 32), "fp32", Region(Role.GRAD, FC_W))
    tw.add("scale", (1,), "fp32", SCALAR_FP32)
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.allocate()
    w = tw.fill("w")
    g = tw.rng.standard_normal(w.size).astype(np.float32) * np.float32(scale)
    g[: w.size // 2] *= np.float32(1e-4)  # half the units keep their gradient, half are clipped
    tw.write("g", g)
    tw.write("scale", [scale])
    tw.write("flag", [0])
    tw.run(op("clip_agc", w=tw["w"], g=tw["g"], scale=tw["scale"], flag=tw["flag"], clip=0.01, eps=1e-3,
              per_unit=per_unit))
    c, gpu = tw.both("g")
    np.testing.assert_array_equal(gpu, c)  # float64 sums rounded to one float32 factor a unit, then one multiply
    assert not np.array_equal(c.ravel(), g)

