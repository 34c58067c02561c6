"""The numerics of issue 17 on the CUDA backend, against the CPU backend (exact): NaN/Inf logits never score,
the finite check ORs a second span into the flag, a flagged step adds nothing to the metric sums, and the
dynamic loss scale (torch.amp.GradScaler's rule) with its clean-step tracker."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import MEAN, RESULT, RESULT_SUM, SCALAR_FP32, SCALAR_INT32, VAR, op
from cuda_testkit import Twin

from tr.core.memory import Region, Role, Span

pytestmark = pytest.mark.gpu


def _exact(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert np.array_equal(c.view(np.uint8), g.view(np.uint8)), (name, c.ravel(), g.ravel())


@pytest.mark.parametrize("k", [10, 3, 1000])
def test_softmax_ce_rows_with_nan_or_inf_are_misses(k):
    n = 64
    tw = Twin()
    tw.add("z", (n, 1, 1, k))
    tw.add("probs", (n, 1, 1, k))
    tw.add("result", (3,))
    tw.add("labels", (n,), "int32")
    tw.allocate()
    z = tw.rng.uniform(-4, 4, (n, k)).astype(np.float32)
    y = tw.rng.integers(0, k, n)
    z[np.arange(n), y] = 10.0  # every label is the clear argmax ...
    for row, bad in ((0, np.nan), (1, np.inf), (2, -np.inf), (3, np.nan)):
        z[row, (y[row] + 1) % k] = bad  # ... but four rows hold a non-finite logit
    z[4, :] = np.nan
    tw.write("z", z)
    tw.write("labels", y)
    for call in (op("softmax_ce_fwd", logits=tw["z"], labels=tw["labels"], probs=tw["probs"], result=tw["result"]),
                 op("softmax_ce_inf", logits=tw["z"], labels=tw["labels"], result=tw["result"])):
        tw.run(call, poison=("result",))
        c, g = (a.ravel() for a in tw.both("result"))
        assert c[1] == c[2] == pytest.approx((n - 5) / n)  # the CPU reference: five misses
        assert g[1] == c[1] and g[2] == c[2], (g, c)


def _scalars() -> Twin:
    tw = Twin()
    tw.add("nm", (6,), "fp32", Region(Role.RUNNING_NEXT, MEAN))
    tw.add("nv", (6,), "fp32", Region(Role.RUNNING_NEXT, VAR))
    tw.add("result", (3,), "fp32", RESULT)
    tw.add("scale", (1,), "fp32", SCALAR_FP32)
    tw.add("batch", (1,), "fp32", SCALAR_FP32)
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.add("tracker", (1,), "int32", SCALAR_INT32)
    tw.add("accum", (3,), "fp32", RESULT_SUM)
    tw.add("samples", (1,), "fp32", RESULT_SUM)
    tw.allocate()
    for name in ("nm", "result", "accum"):
        tw.fill(name)
    tw.fill("nv", 0.5, 2.0)
    tw.write("samples", [0.0])
    tw.write("batch", [96.0])
    return tw


@pytest.mark.parametrize("preset", [0, 1])
@pytest.mark.parametrize("poison", [None, np.inf, np.nan])
def test_range_check_finite_accumulate(preset, poison):
    tw = _scalars()
    if poison is not None:
        v = tw.cpu.read(tw["nv"]).ravel()
        v[3] = poison
        tw.write("nv", v)
    tw.write("flag", [preset])
    tw.run(op("range_check_finite", span=Span.of(Role.RUNNING_NEXT), flag=tw["flag"], accumulate=True))
    _exact(tw, "flag")
    assert int(tw.gpu.read(tw["flag"]).ravel()[0]) == int(preset or poison is not None)


@pytest.mark.parametrize("flagged", [0, 1])
def test_accum_metrics_skips_a_flagged_step_and_counts_samples(flagged):
    tw = _scalars()
    tw.write("flag", [flagged])
    before = tw.gpu.read(tw["accum"]).copy()
    tw.run(op("accum_metrics", result=tw["result"], accum=tw["accum"], batch=tw["batch"], flag=tw["flag"],
              samples=tw["samples"]))
    _exact(tw, "accum", "samples")
    assert float(tw.gpu.read(tw["samples"]).ravel()[0]) == (0.0 if flagged else 96.0)
    if flagged:
        assert np.array_equal(tw.gpu.read(tw["accum"]), before)


@pytest.mark.parametrize("init,interval", [(65536.0, 3), (8.0, 1), (2.0**126, 2)])
def test_dynamic_loss_scale_matches_the_cpu(init, interval):
    tw = _scalars()
    tw.write("scale", [init])
    tw.write("tracker", [0])
    call = op("loss_scale_update", flag=tw["flag"], scale=tw["scale"], tracker=tw["tracker"], rule="dynamic",
              growth_interval=interval)
    gc, gg = tw.run(call)
    flags = [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    for f in flags:
        tw.write("flag", [f])
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
        tw.gpu.synchronize()
        _exact(tw, "scale", "tracker")


def test_static_loss_scale_still_only_halves():
    tw = _scalars()
    tw.write("scale", [4.0])
    tw.write("flag", [1])
    gc, gg = tw.run(op("loss_scale_update", flag=tw["flag"], scale=tw["scale"], rule="static"))
    for _ in range(3):
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
    tw.gpu.synchronize()
    _exact(tw, "scale")
    assert float(tw.gpu.read(tw["scale"]).ravel()[0]) == 1.0
