import numpy as np
import pytest

from tr.core import DType, GraphId, Phase, Region, RegionConditions, Shape, StreamKind, align_up_256, is_enabled
from tr.core.errors import DTypeError, PhaseError, ShapeError
from tr.core.graph_id import NUM_GRAPH_IDS
from tr.core.region import NUM_REGIONS


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


def test_regions_in_seed_order():
    """The seed's 68 in its order, with A_FC_BIAS (FP16 biases for the fused epilogues) before the A weights and
    D_RESIDENT (device-resident data sets) last."""
    assert NUM_REGIONS == 70
    assert Region.B_PREV_MEAN == 0 and Region.W_DEEP_CONV == 11 and Region.R_RESULT == 31
    assert Region.A_FC_BIAS + 1 == Region.A_FC_WEIGHT and Region.W_FC_BIAS + 1 == Region.W_FC_WEIGHT
    assert Region.I_A_LABEL == 50 and Region.R_RESULT_ACCUMULATED == 68 and Region.D_RESIDENT == 69
    seed = [r for r in Region if r not in (Region.A_FC_BIAS, Region.D_RESIDENT)]
    assert len(seed) == 68 and seed == sorted(seed)
    assert Region.G_DEEP_CONV_FP16.group == "G" and Region.S_MASK.group == "S"


def test_region_enable_rules():
    fp32 = RegionConditions(amp=False)
    amp = RegionConditions(amp=True)
    assert is_enabled(Region.F_FEATURE_FP32, fp32) and not is_enabled(Region.F_FEATURE_FP32, amp)
    assert is_enabled(Region.A_FC_WEIGHT, amp) and not is_enabled(Region.A_FC_WEIGHT, fp32)
    assert not is_enabled(Region.E_FC_WEIGHT, amp)
    assert is_enabled(Region.E_FC_WEIGHT_FP16, RegionConditions(amp=True, has_ema=True))
    assert not is_enabled(Region.W_EQ_BIAS, RegionConditions(bn_folded=False))


def test_graph_ids():
    assert NUM_GRAPH_IDS == 37 and GraphId.UPDATE_BN_INF_PARAMS == 32 and GraphId.RESIDENT_VAL_B == 36
    assert GraphId.TRANSFER_A.shape_invariant and not GraphId.DEEP_FWD_BWD.shape_invariant
    assert GraphId.TRANSFER_B.stream is StreamKind.TRANS and GraphId.OPTIMIZER.stream is StreamKind.UPDATE


def test_align():
    assert [align_up_256(x) for x in (0, 1, 256, 257)] == [0, 256, 256, 512]
