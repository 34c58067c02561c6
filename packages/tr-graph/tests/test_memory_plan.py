import pytest
from tr_graph_testlib import mlp_spec

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.ops import OpCall, RegionSpan
from tr.core.region import Region, RegionConditions
from tr.core.shape import Shape
from tr.graph.compiler import compile_program
from tr.graph.memory_plan import MemoryPlan, check_layout, check_range_ops, check_twins
from tr.tensor.dtensor import DTensor, slot_bytes_for


def test_regions_in_enum_order_and_aligned():
    mp = MemoryPlan(RegionConditions(amp=False))
    mp.alloc("w", Region.W_FC_WEIGHT, 512)
    mp.alloc("b", Region.W_FC_BIAS, 256)
    mp.alloc("g", Region.G_FC_WEIGHT, 512)
    mp.pool(Region.F_FEATURE_FP32, 1000, {"x": 0, "y": 256})
    layout, off = mp.finalize()
    assert layout.regions[Region.W_FC_BIAS] == (0, 256)  # W_FC_BIAS comes before W_FC_WEIGHT
    assert off == {"b": 0, "w": 256, "g": 768, "x": 1280, "y": 1536}
    assert layout.region_bytes(Region.F_FEATURE_FP32) == 1024  # the pool extent is rounded to 256
    assert len(layout.regions) == 70 and layout.total_bytes == 2304
    with pytest.raises(CompileError, match="multiple of 256"):
        mp.alloc("odd", Region.W_FC_BIAS, 100)


def test_disabled_regions_get_placeholders():
    mp = MemoryPlan(RegionConditions(amp=False))
    assert mp.alloc("a", Region.A_FC_WEIGHT, 512) == 0  # AMP copy in an FP32 plan
    assert mp.alloc("e", Region.E_FC_WEIGHT, 512) == 0  # no EMA
    with pytest.raises(CompileError, match="disabled region F_FEATURE_FP16"):
        mp.pool(Region.F_FEATURE_FP16, 256, {})
    layout, _ = mp.finalize()
    assert layout.total_bytes == 0


def _t(i, name, region, shape, dtype, offset):
    return DTensor(i, name, region, shape, dtype, slot_bytes_for(shape, dtype), offset)


def test_twin_check():
    mp = MemoryPlan(RegionConditions(amp=True))
    s1, s2 = Shape(8, 1, 1, 5), Shape(3, 3, 3, 4)
    for n, s in (("w1", s1), ("w2", s2)):
        mp.alloc(n, Region.G_FC_WEIGHT, slot_bytes_for(s, DType.FP32))
        mp.alloc(n + "h", Region.G_FC_WEIGHT_FP16, slot_bytes_for(s, DType.FP16))
    layout, off = mp.finalize()
    ts = [_t(0, "w1", Region.G_FC_WEIGHT, s1, DType.FP32, off["w1"]),
          _t(1, "w2", Region.G_FC_WEIGHT, s2, DType.FP32, off["w2"]),
          _t(2, "w1h", Region.G_FC_WEIGHT_FP16, s1, DType.FP16, off["w1h"]),
          _t(3, "w2h", Region.G_FC_WEIGHT_FP16, s2, DType.FP16, off["w2h"])]
    check_twins(layout, ts, RegionSpan(Region.G_FC_WEIGHT_FP16, Region.G_FC_WEIGHT_FP16),
                RegionSpan(Region.G_FC_WEIGHT, Region.G_FC_WEIGHT), 2)
    swapped = [ts[0], ts[1], ts[2].at(ts[3].offset).reshaped(s1), ts[3].at(ts[2].offset)]
    with pytest.raises(CompileError, match="does not line up"):
        check_twins(layout, swapped, RegionSpan(Region.G_FC_WEIGHT_FP16, Region.G_FC_WEIGHT_FP16),
                    RegionSpan(Region.G_FC_WEIGHT, Region.G_FC_WEIGHT), 2)


def test_compiled_fp32_slots_are_twice_fp16(models):
    p = compile_program(models.resnet50, mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=8, amp=True))
    by = {t.name: t for t in p.tensors}
    twins = [(t, by[t.name + ".grad16"]) for t in p.tensors if t.name + ".grad16" in by]
    assert len(twins) == 53  # the convs (an FC's GEMM writes its FP32 weight gradient)
    for w, g16 in twins:
        assert w.slot_bytes == 2 * g16.slot_bytes
        assert by[w.name + ".grad"].slot_bytes == w.slot_bytes == 2 * by[w.name + ".fp16"].slot_bytes
    lay = p.layout
    for a, b in ((Region.G_DEEP_CONV, Region.G_DEEP_CONV_FP16), (Region.W_DEEP_CONV, Region.A_DEEP_CONV),
                 (Region.W_FC_WEIGHT, Region.A_FC_WEIGHT), (Region.G_FIRST_CONV, Region.G_FIRST_CONV_FP16),
                 (Region.W_FC_BIAS, Region.A_FC_BIAS)):
        assert lay.region_bytes(a) == 2 * lay.region_bytes(b) > 0


def test_layout_and_range_checks_catch_bad_plans(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    pooled_ids = {t.id for t in p.tensors if t.region == Region.F_FEATURE_FP32}
    pooled = {Region.F_FEATURE_FP32}
    check_layout(p.layout, p.tensors, pooled_ids)
    w = next(t for t in p.tensors if t.name == "L1.w")
    b = next(t for t in p.tensors if t.name == "L1.b")
    with pytest.raises(CompileError, match="leaves its region"):
        check_layout(p.layout, [w.at(b.offset)], pooled_ids)
    g = next(t for t in p.tensors if t.name == "L1.w.grad")
    with pytest.raises(CompileError, match="fixed slots overlap"):
        check_layout(p.layout, [g, g.reshaped(g.shape)], set())
    clear_features = OpCall.make("range_clear", {"span": RegionSpan(Region.I_B_DATA, Region.F_FEATURE_FP32)})
    with pytest.raises(CompileError, match="covers pooled memory"):
        check_range_ops(p.layout, p.tensors, [clear_features], pooled)
    bad_cast = OpCall.make("range_cast", {"src": RegionSpan(Region.W_FC_WEIGHT, Region.W_FC_WEIGHT),
                                          "dst": RegionSpan(Region.M_FC_WEIGHT, Region.M_FC_WEIGHT)},
                           {"src_dtype": DType.FP32, "dst_dtype": DType.FP16})
    with pytest.raises(CompileError, match="differ by more than the element size ratio"):
        check_range_ops(p.layout, p.tensors, [bad_cast], pooled)
