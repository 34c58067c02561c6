import pytest

from tr.core import CATALOGUE, OpCall, Role, Span
from tr.core.errors import CompileError


def test_catalogue_entries_are_well_formed():
    for name, d in CATALOGUE.items():
        assert d.name == name and d.args
        assert all(a.role in ("in", "out", "inout") and a.kind in ("tensor", "span") for a in d.args)
        assert d.kind in ("compute", "range")
        for out, inp in d.inplace:
            assert d.arg(out).role in ("out", "inout") and d.arg(inp)


def test_opcall_validates_arguments():
    span = Span.of(Role.GRAD) + Span.of(Role.RESULT)
    c = OpCall.make("range_clear", {"span": span})
    assert "<grad + result>" in repr(c)
    with pytest.raises(CompileError, match="unknown op 'nope'"):
        OpCall.make("nope", {})
    with pytest.raises(CompileError, match="required argument 'span' is missing"):
        OpCall.make("range_clear", {})
    with pytest.raises(CompileError, match="unknown attribute 'bogus'"):
        OpCall.make("range_clear", {"span": span}, {"bogus": 1})
    with pytest.raises(CompileError, match="argument 'span' must be a Span, got int"):
        OpCall.make("range_clear", {"span": 3})
    with pytest.raises(CompileError, match="must be a Span, got Role"):  # a role alone is no selection
        OpCall.make("range_clear", {"span": Role.GRAD})
