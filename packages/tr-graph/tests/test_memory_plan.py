import pytest
from tr_graph_testlib import mlp_spec

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Group, Region, Role, Span, dtype_group
from tr.core.ops import OpCall
from tr.core.shape import Shape
from tr.graph.compiler import INPUT_REGIONS, compile_program
from tr.graph.layers.groups import DEEP_CONV, FC_B, FC_W, FIRST_CONV
from tr.graph.memory_plan import MemoryPlan, check_layout, check_range_ops, check_twins
from tr.tensor.dtensor import DTensor, slot_bytes_for
from tr.tensor.layout import ArenaLayout

F32 = Region(Role.ACTIVATION, dtype_group(DType.FP32))


def test_regions_in_layout_order_and_aligned():
    mp = MemoryPlan()
    mp.alloc("w", Region(Role.PARAM, FC_W), 512)
    mp.alloc("b", Region(Role.PARAM, FC_B), 256)
    mp.alloc("g", Region(Role.GRAD, FC_W), 512)
    mp.pool(F32, 1000, {"x": 0, "y": 256})
    layout, off = mp.finalize()
    assert layout.regions[Region(Role.PARAM, FC_B)] == (0, 256)  # the bias-like group comes before the decayed one
    assert off == {"b": 0, "w": 256, "g": 768, "x": 1280, "y": 1536}
    assert layout.region_bytes(F32) == 1024  # the pool extent is rounded to 256
    assert list(layout.regions) == [Region(Role.PARAM, FC_B), Region(Role.PARAM, FC_W), Region(Role.GRAD, FC_W), F32]
    assert layout.total_bytes == 2304
    with pytest.raises(CompileError, match="multiple of 256"):
        mp.alloc("odd", Region(Role.PARAM, FC_B), 100)


def test_only_regions_holding_tensors_exist():
    layout, off = MemoryPlan().finalize()
    assert (layout.total_bytes, dict(layout.regions), off) == (0, {}, {})
    mp = MemoryPlan()
    mp.alloc("w", Region(Role.PARAM, FC_W), 512)
    layout, _ = mp.finalize()
    assert list(layout.regions) == [Region(Role.PARAM, FC_W)]
    assert layout.region_bytes(Region(Role.AMP_COPY, FC_W)) == 0  # an FP32 plan has no working copies
    assert layout.span(Span.of(Role.AMP_COPY)) == (0, 0)
    assert mp.bytes_by_region() == {Region(Role.PARAM, FC_W): 512}


def test_one_group_name_with_two_trait_sets_is_refused():
    mp = MemoryPlan()
    mp.alloc("w", Region(Role.PARAM, Group("w", decayed=True)), 256)
    mp.alloc("w.grad", Region(Role.GRAD, Group("w")), 256)
    with pytest.raises(CompileError, match=r"group 'w' is declared twice, differently: .*decayed=True.* "
                                           r"\(region param/w\) and .*decayed=False.* \(region grad/w\)"):
        mp.finalize()
    # the same check covers a pool's region
    mp = MemoryPlan()
    mp.alloc("s", Region(Role.SCALAR, Group("fp32", decayed=True)), 256)
    mp.pool(F32, 256, {"x": 0})
    with pytest.raises(CompileError, match=r"group 'fp32' .*region activation/fp32.*region scalar/fp32"):
        mp.finalize()


# --- ArenaLayout: span resolution and validation -------------------------------------------------------------

BIAS_PLAIN, BIAS_COPY = Group("bias_plain"), Group("bias_copy", amp_copy=True)
DEC_COPY, DEC_PLAIN = Group("dec_copy", decayed=True, amp_copy=True), Group("dec_plain", decayed=True)


def _layout(*sizes: tuple[Region, int]) -> ArenaLayout:
    regions, cursor = {}, 0
    for r, n in sizes:
        regions[r] = (cursor, cursor + n)
        cursor += n
    layout = ArenaLayout(cursor, regions)
    layout.validate()
    return layout


def _p(g: Group) -> Region:
    return Region(Role.PARAM, g)


def test_span_resolves_contiguous_selections():
    lay = _layout((_p(BIAS_PLAIN), 256), (_p(BIAS_COPY), 512), (_p(DEC_COPY), 256), (_p(DEC_PLAIN), 768),
                  (Region(Role.GRAD, DEC_COPY), 256), (Region(Role.RESULT), 256))
    assert lay.span(Span.of(Role.MOMENT1)) == (0, 0)  # nothing selected
    assert lay.span(Span.of(Role.PARAM, early=True)) == (0, 0)
    assert lay.span(Span.of(Role.PARAM)) == (0, 1792)
    assert lay.span(Span.of(Role.PARAM, decayed=True)) == (768, 1792)
    assert lay.span(Span.of(Role.PARAM, decayed=False)) == (0, 768)
    assert lay.span(Span.of(Role.PARAM, amp_copy=True)) == (256, 1024)
    assert lay.span(Span.of(Role.PARAM, decayed=True, amp_copy=False)) == (1024, 1792)
    assert lay.span(Span.of(Role.GRAD) + Span.of(Role.RESULT)) == (1792, 2304)
    assert lay.span(Span.of(Role.PARAM, decayed=True) + Span.of(Role.GRAD)) == (768, 2048)  # across roles
    assert lay.span(Span.of(Role.PARAM, decayed=True)) == (768, 1792)  # a second look gives the same


def test_a_span_with_a_region_in_the_way_is_refused():
    lay = _layout((_p(BIAS_PLAIN), 256), (_p(BIAS_COPY), 512), (_p(DEC_COPY), 256), (_p(DEC_PLAIN), 768),
                  (Region(Role.GRAD, DEC_COPY), 256), (Region(Role.RESULT), 256))
    with pytest.raises(CompileError, match=r"span <param\[not amp_copy\]> is not contiguous: region param/bias_copy "
                                           r"\[256, 768\) lies between param/bias_plain and param/dec_plain"):
        lay.span(Span.of(Role.PARAM, amp_copy=False))
    with pytest.raises(CompileError, match=r"span <param\[decayed\] \+ result> is not contiguous: region "
                                           r"grad/dec_copy \[1792, 2048\) lies between"):
        lay.span(Span.of(Role.PARAM, decayed=True) + Span.of(Role.RESULT))


def test_zero_byte_regions_between_selected_ones_are_fine():
    lay = _layout((_p(BIAS_PLAIN), 256), (_p(BIAS_COPY), 0), (_p(DEC_COPY), 0), (_p(DEC_PLAIN), 512))
    assert lay.span(Span.of(Role.PARAM, amp_copy=False)) == (0, 768)
    assert lay.region_bytes(_p(BIAS_COPY)) == 0 and _p(BIAS_COPY) in lay.regions


def test_validate_refuses_bad_layouts():
    a, b = _p(BIAS_PLAIN), _p(DEC_PLAIN)
    with pytest.raises(CompileError, match=r"region param/bias_plain follows param/dec_plain: regions must be in "
                                           r"layout order"):
        ArenaLayout(512, {b: (0, 256), a: (256, 512)}).validate()
    with pytest.raises(CompileError, match=r"region param/bias_plain follows grad/bias_plain"):  # roles first
        ArenaLayout(512, {Region(Role.GRAD, BIAS_PLAIN): (0, 256), a: (256, 512)}).validate()
    with pytest.raises(CompileError, match=r"region param/dec_plain at \[512, 768\) breaks the contiguous layout "
                                           r"\(expected 256\)"):
        ArenaLayout(768, {a: (0, 256), b: (512, 768)}).validate()
    with pytest.raises(CompileError, match=r"region param/dec_plain at \[128, 384\) breaks"):  # overlap
        ArenaLayout(384, {a: (0, 256), b: (128, 384)}).validate()
    with pytest.raises(CompileError, match=r"region param/dec_plain base 128 is not 256-byte aligned"):
        ArenaLayout(384, {a: (0, 128), b: (128, 384)}).validate()
    with pytest.raises(CompileError, match=r"regions end at 512 but the arena has 768 bytes"):
        ArenaLayout(768, {a: (0, 256), b: (256, 512)}).validate()
    ArenaLayout(512, {a: (0, 256), b: (256, 512)}).validate()


# --- checks over compiled plans --------------------------------------------------------------------------

def _t(i, name, region, shape, dtype, offset):
    return DTensor(i, name, region, shape, dtype, slot_bytes_for(shape, dtype), offset)


def test_twin_check():
    mp = MemoryPlan()
    s1, s2 = Shape(8, 1, 1, 5), Shape(3, 3, 3, 4)
    g32, g16 = Region(Role.GRAD, FC_W), Region(Role.GRAD_FP16, FC_W)
    for n, s in (("w1", s1), ("w2", s2)):
        mp.alloc(n, g32, slot_bytes_for(s, DType.FP32))
        mp.alloc(n + "h", g16, slot_bytes_for(s, DType.FP16))
    layout, off = mp.finalize()
    ts = [_t(0, "w1", g32, s1, DType.FP32, off["w1"]),
          _t(1, "w2", g32, s2, DType.FP32, off["w2"]),
          _t(2, "w1h", g16, s1, DType.FP16, off["w1h"]),
          _t(3, "w2h", g16, s2, DType.FP16, off["w2h"])]
    check_twins(layout, ts, Span.of(Role.GRAD_FP16), Span.of(Role.GRAD), 2)
    swapped = [ts[0], ts[1], ts[2].at(ts[3].offset).reshaped(s1), ts[3].at(ts[2].offset)]
    with pytest.raises(CompileError, match="does not line up"):
        check_twins(layout, swapped, Span.of(Role.GRAD_FP16), Span.of(Role.GRAD), 2)


def test_compiled_fp32_slots_are_twice_fp16(models):
    p = compile_program(models.resnet50, mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=8, amp=True))
    by = {t.name: t for t in p.tensors}
    twins = [(t, by[t.name + ".grad16"]) for t in p.tensors if t.name + ".grad16" in by]
    assert len(twins) == 53  # the convs (an FC's GEMM writes its FP32 weight gradient)
    for w, g16 in twins:
        assert w.slot_bytes == 2 * g16.slot_bytes
        assert by[w.name + ".grad"].slot_bytes == w.slot_bytes == 2 * by[w.name + ".fp16"].slot_bytes
    lay = p.layout
    for a, b, g in ((Role.GRAD, Role.GRAD_FP16, DEEP_CONV), (Role.PARAM, Role.AMP_COPY, DEEP_CONV),
                    (Role.PARAM, Role.AMP_COPY, FC_W), (Role.GRAD, Role.GRAD_FP16, FIRST_CONV),
                    (Role.PARAM, Role.AMP_COPY, FC_B)):
        assert lay.region_bytes(Region(a, g)) == 2 * lay.region_bytes(Region(b, g)) > 0


def test_layout_and_range_checks_catch_bad_plans(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    pooled_ids = {t.id for t in p.tensors if t.region == F32}
    pooled = {F32}
    check_layout(p.layout, p.tensors, pooled_ids)
    w = next(t for t in p.tensors if t.name == "L1.w")
    b = next(t for t in p.tensors if t.name == "L1.b")
    with pytest.raises(CompileError, match="leaves its region"):
        check_layout(p.layout, [w.at(b.offset)], pooled_ids)
    g = next(t for t in p.tensors if t.name == "L1.w.grad")
    with pytest.raises(CompileError, match="fixed slots overlap"):
        check_layout(p.layout, [g, g.reshaped(g.shape)], set())
    assert list(p.layout.regions).index(INPUT_REGIONS["b_data"]) + 1 == list(p.layout.regions).index(F32)
    clear_features = OpCall.make("range_clear", {"span": Span.of(Role.INPUT) + Span.of(Role.ACTIVATION)})
    with pytest.raises(CompileError, match="covers pooled memory"):
        check_range_ops(p.layout, p.tensors, [clear_features], pooled)
    bad_cast = OpCall.make("range_cast", {"src": Span.of(Role.PARAM, decayed=True),
                                          "dst": Span.of(Role.MOMENT1, decayed=True)},
                           {"src_dtype": DType.FP32, "dst_dtype": DType.FP16})
    with pytest.raises(CompileError, match="differ by more than the element size ratio"):
        check_range_ops(p.layout, p.tensors, [bad_cast], pooled)
    gapped = OpCall.make("range_clear", {"span": Span.of(Role.PARAM) + Span.of(Role.MOMENT1)})
    with pytest.raises(CompileError, match=r"span <param \+ moment1> is not contiguous: region grad/fc_b"):
        check_range_ops(p.layout, p.tensors, [gapped], pooled)
