"""range_ema's warmup on the CUDA backend against the CPU backend: the decay computed on the device from the step
counter (float64, rounded to float32 as the CPU rounds it), over steps with a skipped one."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import BN_B, FC_W, SCALAR_INT32, op
from cuda_testkit import Twin

from tr.core.memory import Region, Role, Span

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("warmup", [0.0, 3.0, 2000.0])
def test_the_ramped_decay_matches_the_cpu(warmup):
    tw = Twin()
    tw.add("w0", (7,), "fp32", Region(Role.PARAM, BN_B))
    tw.add("w1", (300_000,), "fp32", Region(Role.PARAM, FC_W))
    tw.add("e0", (7,), "fp32", Region(Role.EMA, BN_B))
    tw.add("e1", (300_000,), "fp32", Region(Role.EMA, FC_W))
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.add("step", (1,), "int32", SCALAR_INT32)
    tw.allocate()
    for name in ("e0", "e1"):
        tw.fill(name)
    call = op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), flag=tw["flag"],
              step=tw["step"] if warmup else None, decay=0.999, warmup=warmup)
    gc, gg = tw.run(call)
    for t in range(2, 40):
        for name in ("w0", "w1"):
            tw.fill(name)
        tw.write("step", [t])
        tw.write("flag", [int(t % 11 == 0)])
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
    tw.gpu.synchronize()
    for name in ("e0", "e1"):
        c, g = tw.both(name)
        np.testing.assert_array_equal(g, c, err_msg=name)  # the same float32 decay, the same float32 ops
