"""SimpleTask's phases and a real op run on the CPU backend, compared with numpy."""

import numpy as np
import pytest

from tr.core import OpCall, Region, RegionSpan
from tr.core.errors import ConfigError, PhaseError
from tr.task.simple import SimpleTask


def _fc_task():
    t = SimpleTask("cpu")
    x = t.alloc("x", (4, 1, 1, 8), "fp32", Region.F_FEATURE_FP32)
    w = t.alloc("w", (3, 1, 1, 8), "fp32", Region.W_FC_WEIGHT)
    b = t.alloc("b", (1, 1, 1, 3), "fp32", Region.W_FC_BIAS)
    y = t.alloc("y", (4, 1, 1, 3), "fp32", Region.F_FEATURE_FP32)
    t.finalize_memory()
    pl = {n: t.tensor(n) for n in ("x", "w", "b", "y")}
    del x, w, b, y
    t.add_graph("fwd", [OpCall.make("fc_fwd", pl)])
    t.add_graph("clear", [OpCall.make("range_clear", {"span": RegionSpan(Region.F_FEATURE_FP32,
                                                                          Region.F_FEATURE_FP32)})])
    return t.compile()


def test_fc_forward_matches_numpy():
    t = _fc_task()
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 1, 1, 8), (3, 1, 1, 8), (1, 1, 1, 3)))
    t.write("x", x)
    t.write("w", w)
    t.write("b", b)
    t.run("fwd")
    expect = x.reshape(4, 8) @ w.reshape(3, 8).T + b.reshape(3)
    np.testing.assert_allclose(t.read("y").reshape(4, 3), expect, rtol=1e-5, atol=1e-6)
    t.run("clear")
    assert not t.read("y").any() and not t.read("x").any() and t.read("w").any()


def test_layout_is_region_ordered_and_aligned():
    t = SimpleTask()
    t.alloc("late", (1, 1, 1, 5), "fp32", Region.T_TEMP_FP32)
    t.alloc("early", (1, 1, 1, 300), "fp32", Region.W_FC_WEIGHT)
    lay = t.finalize_memory()
    assert t.tensor("early").offset == 0 and t.tensor("late").offset % 256 == 0
    assert t.tensor("late").offset >= t.tensor("early").end
    assert lay.total_bytes == t.tensor("late").end


def test_phase_errors():
    t = SimpleTask()
    with pytest.raises(PhaseError, match="add_graph.*MEMORY_LOCKED.*PLANNING"):
        t.add_graph("g", [])
    with pytest.raises(PhaseError, match="run\\(\\) is only allowed in phase COMPILED"):
        t.run("g")
    t.alloc("a", (1,))
    with pytest.raises(ConfigError, match="already exists"):
        t.alloc("a", (1,))
    t.finalize_memory()
    with pytest.raises(PhaseError, match="alloc\\('b'\\) is only allowed in phase PLANNING"):
        t.alloc("b", (1,))
    t.compile()
    with pytest.raises(PhaseError, match="already COMPILED"):
        t.compile()
    with pytest.raises(ConfigError, match="no graph named 'nope'"):
        t.run("nope")
