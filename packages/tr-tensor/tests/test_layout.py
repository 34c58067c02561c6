"""ArenaLayout: spans resolve to the bytes of the regions they select, and only when those bytes are one run;
validate() refuses a layout out of order, with a gap, misaligned, or not ending at the arena's size."""

import pytest

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Group, Region, Role, Span, dtype_group
from tr.tensor.layout import ArenaLayout

BIAS = Group("b")
WEIGHT = Group("w", decayed=True, amp_copy=True)
EARLY = Group("e", decayed=True, amp_copy=True, fp16_grad=True, early=True)


def _layout(*sized: tuple[Region, int]) -> ArenaLayout:
    """Regions in the given order, each ``kib`` KiB, one after another."""
    regions, pos = {}, 0
    for r, kib in sized:
        regions[r] = (pos, pos + kib * 1024)
        pos += kib * 1024
    return ArenaLayout(pos, regions)


def _training() -> ArenaLayout:
    return _layout((Region(Role.PARAM, BIAS), 1), (Region(Role.PARAM, WEIGHT), 2), (Region(Role.PARAM, EARLY), 3),
                   (Region(Role.GRAD, BIAS), 1), (Region(Role.GRAD, WEIGHT), 2), (Region(Role.GRAD, EARLY), 3),
                   (Region(Role.RESULT), 1), (Region(Role.GRAD_FP16, EARLY), 2),
                   (Region(Role.SCALAR, dtype_group(DType.FP32)), 1))


def test_spans_resolve_to_the_selected_regions_bytes():
    lay = _training()
    lay.validate()
    k = 1024
    assert lay.span(Span.of(Role.PARAM)) == (0, 6 * k)
    assert lay.span(Span.of(Role.PARAM, decayed=False)) == (0, k)
    assert lay.span(Span.of(Role.PARAM, decayed=True)) == (k, 6 * k)
    assert lay.span(Span.of(Role.GRAD, early=False)) == (6 * k, 9 * k)
    assert lay.span(Span.of(Role.GRAD, early=True) + Span.of(Role.RESULT)) == (9 * k, 13 * k)
    all_grads = Span.of(Role.GRAD) + Span.of(Role.RESULT) + Span.of(Role.GRAD_FP16)
    assert lay.span(all_grads) == (6 * k, 15 * k)
    assert lay.span(all_grads) == (6 * k, 15 * k)  # a second look-up gives the same range


def test_a_span_selecting_nothing_is_empty():
    lay = _training()
    assert lay.span(Span.of(Role.EMA)) == (0, 0)
    assert lay.span(Span.of(Role.PARAM, fp16_grad=True, early=False)) == (0, 0)


def test_a_span_with_a_region_between_its_parts_is_a_compile_error():
    lay = _training()
    with pytest.raises(CompileError, match=r"span <grad \+ grad_fp16> is not contiguous: region result \[.*\) lies "
                                           r"between grad/b and grad_fp16/e"):
        lay.span(Span.of(Role.GRAD) + Span.of(Role.GRAD_FP16))
    with pytest.raises(CompileError, match=r"region grad/w .* lies between grad/b and grad/e"):
        lay.span(Span.of(Role.GRAD, amp_copy=False) + Span.of(Role.GRAD, early=True))


def test_an_empty_region_between_selected_ones_does_not_break_the_span():
    lay = _layout((Region(Role.GRAD, BIAS), 1), (Region(Role.RESULT), 0), (Region(Role.GRAD_FP16, EARLY), 2))
    lay.validate()
    assert lay.span(Span.of(Role.GRAD) + Span.of(Role.GRAD_FP16)) == (0, 3 * 1024)


def test_region_bytes_is_zero_for_a_region_the_plan_lacks():
    lay = _training()
    assert lay.region_bytes(Region(Role.GRAD, WEIGHT)) == 2048
    assert lay.region_bytes(Region(Role.EMA, WEIGHT)) == 0


def test_validate_refuses_regions_out_of_layout_order():
    lay = _layout((Region(Role.GRAD, BIAS), 1), (Region(Role.PARAM, BIAS), 1))
    with pytest.raises(CompileError, match="region param/b follows grad/b: regions must be in layout order"):
        lay.validate()


def test_validate_refuses_a_gap_an_overlap_misalignment_and_a_wrong_total():
    a, b = Region(Role.PARAM, BIAS), Region(Role.PARAM, WEIGHT)
    with pytest.raises(CompileError, match=r"region param/w at \[1280, 2304\) breaks the contiguous layout "
                                           r"\(expected 1024\)"):
        ArenaLayout(2304, {a: (0, 1024), b: (1280, 2304)}).validate()
    with pytest.raises(CompileError, match=r"region param/w at \[768, 2304\) breaks"):
        ArenaLayout(2304, {a: (0, 1024), b: (768, 2304)}).validate()
    with pytest.raises(CompileError, match=r"region param/w base 1000 is not 256-byte aligned"):
        ArenaLayout(2000, {a: (0, 1000), b: (1000, 2000)}).validate()
    with pytest.raises(CompileError, match="regions end at 2048 but the arena has 4096 bytes"):
        ArenaLayout(4096, {a: (0, 1024), b: (1024, 2048)}).validate()
