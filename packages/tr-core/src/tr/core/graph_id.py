"""The 33 graph ids: each names one captured unit of work (SEED_SYSTEM.md §3)."""

from __future__ import annotations

from enum import IntEnum

from tr.core.phase import StreamKind


class GraphId(IntEnum):
    TRANSFER_A = 0
    TRANSFER_B = 1
    FIRST_LAYER_FWD_A = 2
    FIRST_LAYER_FWD_B = 3
    DEEP_FWD_BWD = 4
    ZERO_GRAD = 5
    FIRST_LAYER_BWD_A = 6
    FIRST_LAYER_BWD_B = 7
    FIRST_COMM = 8
    DEEP_COMM = 9
    CAST_DEEP_GRAD_FP16_TO_FP32 = 10
    CAST_FIRST_GRAD_FP16_TO_FP32 = 11
    NAN_CHECK_AND_GRAD_SCALING = 12
    STATS_COMM = 13
    UPDATE_STATS = 14
    OPTIMIZER = 15
    EMA_UPDATE = 16
    INF_MAIN_A = 17
    INF_MAIN_B = 18
    INF_EMA_A = 19
    INF_EMA_B = 20
    CAST_MAIN_FP32_TO_FP16 = 21
    CAST_EMA_FP32_TO_FP16 = 22
    ACCUM_METRICS = 23
    ACCUM_METRICS_TRAIN_LAST = 24
    ACCUM_METRICS_VAL_LAST = 25
    VAL_RESULT_COMM = 26
    CLEAR_METRICS = 27
    SIMPLE_TASK_GRAPH = 28
    LARS_FC_OPT = 29
    LARS_FIRST_CONV_OPT = 30
    LARS_DEEP_CONV_OPT = 31
    UPDATE_BN_INF_PARAMS = 32
    # a resident data set's order and batches on the device (tr.graph.resident): the epoch's shuffle, the
    # validation pass's restart, and the batch selection of validation (training's is TRANSFER_A/B)
    RESIDENT_TRAIN_BEGIN = 33
    RESIDENT_VAL_BEGIN = 34
    RESIDENT_VAL_A = 35
    RESIDENT_VAL_B = 36

    @property
    def shape_invariant(self) -> bool:
        """True when the graph's work does not depend on the batch shape (one capture serves all variants)."""
        return self not in _SHAPE_DEPENDENT

    @property
    def is_inference(self) -> bool:
        return self in (GraphId.INF_MAIN_A, GraphId.INF_MAIN_B, GraphId.INF_EMA_A, GraphId.INF_EMA_B)

    @property
    def stream(self) -> StreamKind:
        """The stream a graph is launched on."""
        return _STREAM.get(self, StreamKind.UPDATE)


NUM_GRAPH_IDS = len(GraphId)
assert NUM_GRAPH_IDS == 37

# OPTIMIZER holds only range ops (shape-invariant, unlike the seed's table); ACCUM_METRICS weights the result by
# the variant's batch size, so it is per variant.
_SHAPE_DEPENDENT = frozenset(
    [GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_FWD_B, GraphId.DEEP_FWD_BWD, GraphId.FIRST_LAYER_BWD_A,
     GraphId.FIRST_LAYER_BWD_B, GraphId.ACCUM_METRICS, GraphId.INF_MAIN_A, GraphId.INF_MAIN_B, GraphId.INF_EMA_A,
     GraphId.INF_EMA_B]
)

_STREAM = {
    GraphId.TRANSFER_A: StreamKind.TRANS,
    GraphId.TRANSFER_B: StreamKind.TRANS,
    GraphId.RESIDENT_VAL_A: StreamKind.TRANS,
    GraphId.RESIDENT_VAL_B: StreamKind.TRANS,
    GraphId.FIRST_LAYER_FWD_A: StreamKind.COMP_1,
    GraphId.FIRST_LAYER_FWD_B: StreamKind.COMP_1,
    GraphId.DEEP_FWD_BWD: StreamKind.COMP_1,
    GraphId.FIRST_LAYER_BWD_A: StreamKind.COMP_1,
    GraphId.FIRST_LAYER_BWD_B: StreamKind.COMP_1,
    GraphId.INF_MAIN_A: StreamKind.COMP_1,
    GraphId.INF_MAIN_B: StreamKind.COMP_1,
    GraphId.INF_EMA_A: StreamKind.COMP_1,
    GraphId.INF_EMA_B: StreamKind.COMP_1,
    GraphId.SIMPLE_TASK_GRAPH: StreamKind.COMP_1,
    GraphId.LARS_FC_OPT: StreamKind.COMP_1,
    GraphId.LARS_FIRST_CONV_OPT: StreamKind.COMP_2,
    GraphId.LARS_DEEP_CONV_OPT: StreamKind.COMP_3,
}
