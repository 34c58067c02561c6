"""The training step as branches (tr.task.executor): which GraphIds run beside which, and how a side branch
with nothing to do disappears without breaking the order of the others; the launcher's waits under an NCCL
watchdog."""

from __future__ import annotations

import pytest

from tr.backend.base import check_branches, serial_calls
from tr.core.errors import BackendError
from tr.core.graph_id import GraphId as G
from tr.core.phase import StreamKind as S
from tr.task.executor import StepLauncher, branches, train_step_branches


class FakeProgram:
    """calls(variant, gid) -> one placeholder per GraphId that has work."""

    def __init__(self, with_work: set[G]) -> None:
        self.with_work = with_work

    def calls(self, variant: str, gid: G) -> list:
        return [(variant, gid)] if gid in self.with_work else []


def test_the_deep_bucket_runs_beside_the_first_layer_backward():
    parts = train_step_branches(1, False)
    assert [p[0] for p in parts] == [S.COMP_1, S.UPDATE, S.COMP_1, S.COMP_1]
    assert parts[1][1] == (G.CAST_DEEP_GRAD_FP16_TO_FP32, G.DEEP_COMM) and parts[1][2] == (0,)
    assert parts[2][1][0] == G.FIRST_LAYER_BWD_B and parts[2][2] == (0,)
    assert parts[3][1][0] == G.FIRST_COMM and parts[3][2] == (1, 2)  # bucket 2 after bucket 1 and the backward
    assert G.ACCUM_METRICS_TRAIN_LAST in train_step_branches(0, True)[3][1]


def test_branches_keep_the_program_calls_in_step_order():
    every = {g for _s, part, _a in train_step_branches(0, False) for g in part}
    bs = branches(FakeProgram(every), "train", train_step_branches(0, False))
    check_branches("step", bs)
    assert [b.after for b in bs] == [(), (0,), (0,), (1, 2)]
    assert [c[1] for c in serial_calls(bs)] == [g for _s, part, _a in train_step_branches(0, False) for g in part]


def test_an_empty_side_branch_is_dropped_and_the_waits_renumbered():
    every = {g for _s, part, _a in train_step_branches(0, False) for g in part}
    work = every - {G.CAST_DEEP_GRAD_FP16_TO_FP32, G.DEEP_COMM}  # FP32, nothing to all-reduce
    bs = branches(FakeProgram(work), "train", train_step_branches(0, False))
    check_branches("step", bs)
    assert [b.stream for b in bs] == [S.COMP_1, S.COMP_1, S.COMP_1]
    assert [b.after for b in bs] == [(), (0,), (1,)]


def test_a_wait_that_fails_after_the_watchdog_aborted_reports_the_dead_peer():
    class Backend:
        streams = False

        def synchronize(self):
            raise BackendError("cudaStreamSynchronize failed: unspecified launch failure")

    class Watchdog:
        failure = "rank 0 of 2: no training progress for 31 s: a peer rank died or hangs"

        def check(self):
            raise BackendError(self.failure)

    launch = StepLauncher(Backend(), Watchdog())
    with pytest.raises(BackendError, match="a peer rank died") as e:
        launch.synchronize()
    assert "unspecified launch failure" in str(e.value.__cause__)
    Watchdog.failure = None
    with pytest.raises(BackendError, match="unspecified launch failure"):
        StepLauncher(Backend(), Watchdog()).synchronize()


@pytest.mark.parametrize("last", [False, True])
def test_the_nan_check_follows_the_statistics_and_precedes_the_metric_sums(last):
    # The flag covers the all-reduced BN statistics (every rank agrees), and a skipped step's loss is not summed.
    tail = train_step_branches(0, last)[3][1]
    accum = G.ACCUM_METRICS_TRAIN_LAST if last else G.ACCUM_METRICS
    assert tail.index(G.STATS_COMM) < tail.index(G.NAN_CHECK_AND_GRAD_SCALING) < tail.index(accum)
    assert tail.index(G.NAN_CHECK_AND_GRAD_SCALING) < tail.index(G.UPDATE_STATS) < tail.index(G.OPTIMIZER)
