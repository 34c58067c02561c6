"""SimpleTask's phases and a real op run on the CPU backend, compared with numpy."""

import numpy as np
import pytest

from tr.core import DType, Group, OpCall, Region, Role, Span
from tr.core.errors import ConfigError, PhaseError
from tr.core.memory import dtype_group
from tr.task.simple import SimpleTask

FEATURE = Region(Role.ACTIVATION, dtype_group(DType.FP32))
FC_W, FC_B = Group("fc_w", decayed=True, amp_copy=True), Group("fc_b", amp_copy=True)  # (tr.graph.layers.groups)


def _fc_task():
    t = SimpleTask("cpu")
    x = t.alloc("x", (4, 1, 1, 8), "fp32", FEATURE)
    w = t.alloc("w", (3, 1, 1, 8), "fp32", Region(Role.PARAM, FC_W))
    b = t.alloc("b", (1, 1, 1, 3), "fp32", Region(Role.PARAM, FC_B))
    y = t.alloc("y", (4, 1, 1, 3), "fp32", FEATURE)
    t.finalize_memory()
    pl = {n: t.tensor(n) for n in ("x", "w", "b", "y")}
    del x, w, b, y
    t.add_graph("fwd", [OpCall.make("fc_fwd", pl)])
    t.add_graph("clear", [OpCall.make("range_clear", {"span": Span.of(Role.ACTIVATION)})])
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
    t.alloc("late", (1, 1, 1, 5), "fp32", Region(Role.TEMP, dtype_group(DType.FP32)))
    t.alloc("early", (1, 1, 1, 300), "fp32", Region(Role.PARAM, FC_W))
    lay = t.finalize_memory()
    assert t.tensor("early").offset == 0 and t.tensor("late").offset % 256 == 0
    assert t.tensor("late").offset >= t.tensor("early").end
    assert lay.total_bytes == t.tensor("late").end


def test_layout_holds_the_used_regions_in_layout_order_and_tensors_in_allocation_order():
    t = SimpleTask()
    t.alloc("h", (1, 1, 1, 70), "fp16")  # default: the temporaries of its dtype
    t.alloc("step", (1,), "int32", Region(Role.SCALAR, dtype_group(DType.INT32)))
    t.alloc("w2", (1, 1, 1, 3), "fp32", Region(Role.PARAM, FC_W))
    t.alloc("m", (1, 1, 1, 3), "fp32", Region(Role.MOMENT1, FC_W))
    t.alloc("w1", (1, 1, 1, 100), "fp32", Region(Role.PARAM, FC_W))
    t.alloc("bias", (1, 1, 1, 3), "fp32", Region(Role.PARAM, FC_B))
    t.alloc_scalar("lr")
    t.alloc_scalar("flag", "int32")
    t.alloc_scalar("half", "fp16")
    lay = t.finalize_memory()
    assert [r.name for r in lay.regions] == ["param/fc_b", "param/fc_w", "moment1/fc_w", "scalar/fp32",
                                             "scalar/fp16", "scalar/int32", "temp/fp16"]
    order = ["bias", "w2", "w1", "m", "lr", "half", "step", "flag", "h"]
    offsets = [t.tensor(n).offset for n in order]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(order)
    assert all(o % 256 == 0 for o in offsets)
    assert lay.regions[Region(Role.PARAM, FC_W)] == (t.tensor("w2").offset, t.tensor("w1").end)
    assert lay.regions[Region(Role.SCALAR, dtype_group(DType.INT32))] == (t.tensor("step").offset,
                                                                          t.tensor("flag").end)
    assert lay.span(Span.of(Role.PARAM)) == (0, t.tensor("w1").end)
    assert lay.span(Span.of(Role.PARAM, decayed=True)) == lay.regions[Region(Role.PARAM, FC_W)]
    assert lay.span(Span.of(Role.GRAD)) == (0, 0) and lay.region_bytes(Region(Role.GRAD, FC_W)) == 0
    assert t.tensor("h").region == Region(Role.TEMP, dtype_group(DType.FP16))
    assert lay.total_bytes == t.tensor("h").end


def test_alloc_refuses_what_is_not_a_region_and_a_second_group_of_one_name():
    t = SimpleTask()
    with pytest.raises(ConfigError, match="alloc\\('x'\\): region must be a tr.core.memory.Region .*got 'W_FC_WEIGHT'"):
        t.alloc("x", (1,), "fp32", "W_FC_WEIGHT")
    t.alloc("w", (1,), "fp32", Region(Role.PARAM, FC_W))
    with pytest.raises(ConfigError, match="alloc\\('v'\\): region param/fc_w with Group.name='fc_w', decayed=False"):
        t.alloc("v", (1,), "fp32", Region(Role.PARAM, Group("fc_w")))
    t.alloc("g", (1,), "fp32", Region(Role.GRAD, Group("fc_w")))  # the name is a role's: another role may reuse it
    assert [r.name for r in t.finalize_memory().regions] == ["param/fc_w", "grad/fc_w"]


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
