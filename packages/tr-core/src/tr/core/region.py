"""The 70 named regions of an arena, in layout order (low to high address), with groups and enable rules.

Regions are laid out in enum order, so every group ("all master weights", "all FP32 grads", ...) is one
contiguous byte range and a range op (clear, cast, optimizer, all-reduce) needs one kernel per range,
however many layers the model has. The order and the rules follow the seed system (SEED_SYSTEM.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Region(IntEnum):
    # B: BN running statistics (FP32)
    B_PREV_MEAN = 0
    B_PREV_VAR = 1
    B_NEXT_MEAN = 2
    B_NEXT_VAR = 3
    # W: master weights (FP32); EQ = folded BN inference scale/bias
    W_EQ_BIAS = 4
    W_EQ_SCALE = 5
    W_BN_BIAS = 6
    W_BN_WEIGHT = 7
    W_FC_BIAS = 8
    W_FC_WEIGHT = 9
    W_FIRST_CONV = 10
    W_DEEP_CONV = 11
    # E: EMA weights
    E_BN_BIAS = 12
    E_BN_WEIGHT = 13
    E_FC_BIAS = 14
    E_FC_WEIGHT = 15
    E_FIRST_CONV = 16
    E_DEEP_CONV = 17
    E_FC_WEIGHT_FP16 = 18
    E_FIRST_CONV_FP16 = 19
    E_DEEP_CONV_FP16 = 20
    # A: AMP FP16 working copies of the weights
    A_FC_BIAS = 21  # the FP16 biases the fused GEMM epilogues read (beyond the seed, which adds FP32 biases
    # in a separate kernel)
    A_FC_WEIGHT = 22
    A_FIRST_CONV = 23
    A_DEEP_CONV = 24
    # G: FP32 gradients (bucket 2 = G_BN_BIAS..G_FIRST_CONV, bucket 1 starts at G_DEEP_CONV)
    G_BN_BIAS = 25
    G_BN_WEIGHT = 26
    G_FC_BIAS = 27
    G_FC_WEIGHT = 28
    G_FIRST_CONV = 29
    G_DEEP_CONV = 30
    # R: step result (loss, top1, top5), between FP32 and FP16 grads so bucket 1 reduces it too
    R_RESULT = 31
    # G FP16 gradients (AMP)
    G_FC_WEIGHT_FP16 = 32
    G_FIRST_CONV_FP16 = 33
    G_DEEP_CONV_FP16 = 34
    # M: first moment / momentum
    M_BN_BIAS = 35
    M_BN_WEIGHT = 36
    M_FC_BIAS = 37
    M_FC_WEIGHT = 38
    M_FIRST_CONV = 39
    M_DEEP_CONV = 40
    # V: second moment (Adam, AdamW)
    V_BN_BIAS = 41
    V_BN_WEIGHT = 42
    V_FC_BIAS = 43
    V_FC_WEIGHT = 44
    V_FIRST_CONV = 45
    V_DEEP_CONV = 46
    # N: LARS trust ratios
    N_FC_WEIGHT = 47
    N_FIRST_CONV = 48
    N_DEEP_CONV = 49
    # I: double-buffered inputs
    I_A_LABEL = 50
    I_A_DATA = 51
    I_B_LABEL = 52
    I_B_DATA = 53
    # F: features and gradient slots
    F_FEATURE_FP32 = 54
    F_GRAD_SLOT_FP32 = 55
    F_FEATURE_FP16 = 56
    F_GRAD_SLOT_FP16 = 57
    # S: scalars and masks
    S_SCALAR_FP32 = 58
    S_SCALAR_FP16 = 59
    S_SCALAR_INT32 = 60
    S_SCALAR_INT8 = 61
    S_MASK = 62
    # T: temporaries
    T_TEMP_FP32 = 63
    T_TEMP_FP16 = 64
    T_TEMP_INT32 = 65
    T_TEMP_INT8 = 66
    # R tail
    R_PREDICTED_LABEL = 67
    R_RESULT_ACCUMULATED = 68
    # D: data sets resident on the device (beyond the seed's 68: its MNIST stays on the host), or a JPEG input's
    # decode buffer; empty unless a plan augments (tr.graph.resident) or decodes (tr.graph.jpeg_input) on the device
    D_RESIDENT = 69

    @property
    def group(self) -> str:
        """One-letter group: B W E A G R M V N I F S T D (the FP16 grads are group G)."""
        return self.name[0]


NUM_REGIONS = len(Region)
assert NUM_REGIONS == 70


@dataclass(frozen=True, slots=True)
class RegionConditions:
    """What decides whether a region holds bytes in a plan."""

    amp: bool = False
    has_ema: bool = False
    bn_folded: bool = True


_E_FP32 = frozenset(range(Region.E_BN_BIAS, Region.E_DEEP_CONV + 1))
_E_FP16 = frozenset(range(Region.E_FC_WEIGHT_FP16, Region.E_DEEP_CONV_FP16 + 1))
_AMP_ONLY = frozenset(
    [Region.A_FC_BIAS, Region.A_FC_WEIGHT, Region.A_FIRST_CONV, Region.A_DEEP_CONV, Region.G_FC_WEIGHT_FP16,
     Region.G_FIRST_CONV_FP16, Region.G_DEEP_CONV_FP16, Region.S_SCALAR_FP16,
     Region.F_FEATURE_FP16, Region.F_GRAD_SLOT_FP16]
)
_FP32_ONLY = frozenset([Region.F_FEATURE_FP32, Region.F_GRAD_SLOT_FP32])


def is_enabled(region: Region, cond: RegionConditions) -> bool:
    """The seed's enable rules: disabled regions get no bytes (allocations there have slot_bytes 0)."""
    r = Region(region)
    if r in (Region.W_EQ_BIAS, Region.W_EQ_SCALE):
        return cond.bn_folded
    if r in _E_FP32:
        return cond.has_ema
    if r in _E_FP16:
        return cond.has_ema and cond.amp
    if r in _AMP_ONLY:
        return cond.amp
    if r in _FP32_ONLY:
        return not cond.amp
    return True


# Byte ranges that range ops span: (first, last) inclusive. They must be contiguous in every plan.
BN_STATS = (Region.B_PREV_MEAN, Region.B_NEXT_VAR)
BN_NEXT_STATS = (Region.B_NEXT_MEAN, Region.B_NEXT_VAR)
MASTER_WEIGHTS = (Region.W_BN_BIAS, Region.W_DEEP_CONV)
DECAYED_WEIGHTS = (Region.W_FC_WEIGHT, Region.W_DEEP_CONV)
BIAS_LIKE_WEIGHTS = (Region.W_BN_BIAS, Region.W_FC_BIAS)
AMP_WEIGHTS = (Region.A_FC_BIAS, Region.A_DEEP_CONV)
AMP_CAST_SOURCE = (Region.W_FC_BIAS, Region.W_DEEP_CONV)  # the masters of AMP_WEIGHTS, one range
FP32_GRADS = (Region.G_BN_BIAS, Region.G_DEEP_CONV)
ALL_GRADS = (Region.G_BN_BIAS, Region.G_DEEP_CONV_FP16)
FP16_GRADS = (Region.G_FC_WEIGHT_FP16, Region.G_DEEP_CONV_FP16)
GRAD_BUCKET_1 = (Region.G_DEEP_CONV, Region.R_RESULT)
GRAD_BUCKET_2 = (Region.G_BN_BIAS, Region.G_FIRST_CONV)
INPUTS = (Region.I_A_LABEL, Region.I_B_DATA)


def region_range(first: Region, last: Region) -> tuple[Region, ...]:
    """Every region from ``first`` to ``last`` inclusive, in layout order."""
    return tuple(Region(i) for i in range(int(first), int(last) + 1))
