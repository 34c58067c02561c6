import numpy as np
import pytest

from tr.core import DType, Phase, Shape, StreamKind, align_up_256
from tr.core.errors import DTypeError, PhaseError, ShapeError


def test_shape_right_aligns_and_counts():
    assert Shape.of(10).dims == (1, 1, 1, 10)
    assert Shape.of(28, 28, 1).dims == (1, 28, 28, 1)
    assert Shape(2, 3, 4, 5).numel() == 120
    assert Shape(2, 3, 4, 5).with_batch(7) == Shape(7, 3, 4, 5)


@pytest.mark.parametrize("dims", [(0, 1, 1, 1), (1, -3, 1, 1), (1, 1, 1, 0)])
def test_shape_rejects_non_positive(dims):
    with pytest.raises(ShapeError, match=r"must be >= 1, got (0|-3)"):
        Shape(*dims)


def test_shape_rejects_non_integer_and_too_many_dims():
    with pytest.raises(ShapeError, match="integer"):
        Shape(1, 2.5, 1, 1)
    with pytest.raises(ShapeError, match="1 to 4"):
        Shape.of(1, 2, 3, 4, 5)


def test_dtype_sizes_and_numpy():
    assert [d.itemsize for d in DType] == [4, 2, 2, 1, 4, 1]
    assert DType.FP16.np_dtype == np.float16
    assert DType.parse("FP32") is DType.FP32 and DType.parse(np.int32) is DType.INT32


@pytest.mark.parametrize("bad", ["fp8", "float64", np.float64])
def test_dtype_unknown(bad):
    with pytest.raises(DTypeError):
        DType.parse(bad)


def test_phase_only_moves_forward():
    p = Phase.PLANNING.advance_to(Phase.MEMORY_LOCKED).advance_to(Phase.COMPILED)
    assert p is Phase.COMPILED
    with pytest.raises(PhaseError, match="backwards from COMPILED to PLANNING"):
        p.advance_to(Phase.PLANNING)


def test_streams():
    assert [s.name for s in StreamKind] == ["TRANS", "COMP_1", "COMP_2", "COMP_3", "UPDATE"]


def test_align():
    assert [align_up_256(x) for x in (0, 1, 256, 257)] == [0, 256, 256, 512]
