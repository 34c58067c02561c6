import pytest

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, dtype_group
from tr.graph.graph import SymOp
from tr.graph.liveness import Buffer, alias_inplace, live_ranges, lower_bound, place, plan_pools

F = Region(Role.ACTIVATION, dtype_group(DType.FP32))
MASK = Region(Role.MASK)


def op(name, **args):
    return SymOp(name, args)


def test_live_ranges_first_write_to_last_access():
    tl = [op("act_fwd", x="a", y="b"), op("act_fwd", x="b", y="c"), op("act_bwd", x="b", dy="c", dx="d")]
    pooled = {"b": 1, "c": 1, "d": 1}  # "a" is not pooled (an input, say)
    assert live_ranges(tl, pooled) == {"b": [0, 2], "c": [1, 2], "d": [2, 2]}
    with pytest.raises(CompileError, match="reads c before anything writes it"):
        live_ranges([op("act_fwd", x="c", y="b")], pooled)


def test_alias_only_when_the_input_dies_at_the_op():
    tl = [op("act_fwd", x="a", y="b"), op("act_bwd", x="a", dy="b", dx="c"), op("copy", x="b", y="e")]
    size = {"b": 256, "c": 256, "e": 256}
    reg = dict.fromkeys(size, F)
    rep = alias_inplace(tl, live_ranges(tl, size), size, reg)
    assert rep["c"] == "c"  # b is read again by the copy: no in-place
    tl2 = tl[:2]
    rep2 = alias_inplace(tl2, live_ranges(tl2, size), size, reg)
    assert rep2["c"] == "b"
    size_mismatch = {"b": 256, "c": 512}
    rep3 = alias_inplace(tl2, live_ranges(tl2, size_mismatch), size_mismatch, dict.fromkeys(size_mismatch, F))
    assert rep3["c"] == "c"
    # fc_bwd declares no in-place pair: never aliased
    tl3 = [op("act_fwd", x="a", y="b"), op("fc_bwd", x="a", w="w", dy="b", dw="g", dx="c")]
    assert alias_inplace(tl3, live_ranges(tl3, size), size, reg)["c"] == "c"


def test_place_packs_disjoint_lifetimes_and_separates_overlaps():
    bufs = [Buffer(["a"], F, 512, 0, 3), Buffer(["b"], F, 256, 1, 2), Buffer(["c"], F, 512, 4, 6),
            Buffer(["d"], F, 256, 3, 5)]
    extent = place(bufs)
    a, b, c, d = bufs
    assert (a.offset, c.offset) == (0, 0)  # c starts after a ends
    assert b.offset == 512 and d.offset == 512
    assert extent == 768 == lower_bound(bufs)
    for x in bufs:
        for y in bufs:
            if x is not y and x.start <= y.end and y.start <= x.end:
                assert x.offset + x.size <= y.offset or y.offset + y.size <= x.offset


def test_plan_pools_reports_per_region():
    tl = [op("act_fwd", x="in", y="f1"), op("maxpool_fwd", x="f1", y="f2", mask="m"),
          op("maxpool_bwd", dy="f2", mask="m", dx="g1"), op("act_bwd", x="f1", dy="g1", dx="g0")]
    size = {"f1": 1024, "f2": 512, "m": 256, "g1": 1024, "g0": 1024}
    reg = {k: (MASK if k == "m" else F) for k in size}
    plan = plan_pools(tl, size, reg)
    assert plan.extents[MASK] == 256
    # f1 is read by the last op, so g1 (written at op 2) cannot reuse it; g0 aliases g1 or f1 (in place)
    assert plan.offsets["g1"] != plan.offsets["f1"]
    assert plan.offsets["g0"] in (plan.offsets["g1"], plan.offsets["f1"])
    assert plan.extents[F] == plan.lower_bounds[F] == 1024 + 1024 + 512
