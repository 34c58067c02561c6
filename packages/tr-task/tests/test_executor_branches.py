"""The training step as branches in a compiled Program (which parts run beside which; the recipes and assemble
themselves: tr-graph's test_steps.py), how the executor captures every named step (tr.task.executor
capture_steps / capture_step), and the launcher's waits under an NCCL watchdog."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.backend.base import check_branches, serial_calls
from tr.core.errors import BackendError, CompileError
from tr.core.phase import StreamKind as S
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, fc, flatten, relu, seq
from tr.graph.steps import Part as P
from tr.graph.steps import train_recipe
from tr.task.deep_learning import DeepLearningTask
from tr.task.executor import StepLauncher, capture_step, capture_steps
from tr.task.feeder import ArrayFeeder
from tr.tensor.program import Branch, Program, Step

BATCH = 8
_rng = np.random.default_rng(0)
X = _rng.standard_normal((36, 6, 6, 2)).astype(np.float32)  # 4 full batches and a last one of 4
Y = (np.arange(36) % 3).astype(np.int32)
# the first conv's gradients are the late bucket, the second's and the fc's the early one
MODEL = seq(conv(4, 3, p=1), bn(), relu(), conv(4, 3, p=1), bn(), relu(), flatten(), fc(3))


def _program(amp: bool) -> Program:
    dt = np.float16 if amp else np.float32
    feeder = ArrayFeeder((X.astype(dt), Y), (X[:12].astype(dt), Y[:12]), BATCH, seed=2, num_classes=3, dtype=dt)
    s = Settings().manual_seed(1).global_batch_size(BATCH).amp(amp)
    t = (DeepLearningTask(s).device("cpu").quiet().model(MODEL)
         .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.01)).data(feeder).total_epochs(1))
    return t.compile().program


@pytest.fixture(scope="module")
def fp32() -> Program:
    return _program(False)


@pytest.fixture(scope="module")
def amp() -> Program:
    return _program(True)


def _parts(calls) -> list[str]:
    """The parts the calls were filed under, in order, each once per run of calls."""
    out: list[str] = []
    for c in calls:
        if not out or out[-1] != c.part:
            out.append(c.part)
    return out


@pytest.mark.parametrize("name", ["train_a", "train_b", "train_last_a", "train_last_b"])
@pytest.mark.parametrize("use_amp", [False, True], ids=["fp32", "amp"])
def test_a_compiled_train_step_reduces_the_early_bucket_beside_the_first_layer_backward(fp32, amp, use_amp, name):
    step = (amp if use_amp else fp32).step(name)
    check_branches(name, step.branches)
    ab, last = name[-1], name.startswith("train_last")
    assert [b.stream for b in step.branches] == [S.COMP_1, S.UPDATE, S.COMP_1, S.COMP_1]
    assert [b.after for b in step.branches] == [(), (0,), (0,), (1, 2)]
    first_fwd = P.FIRST_FWD_A if ab == "a" else P.FIRST_FWD_B
    first_bwd = P.FIRST_BWD_A if ab == "a" else P.FIRST_BWD_B
    assert _parts(step.branches[0].calls) == [P.ZERO_GRAD.value, first_fwd.value, P.DEEP_FWD_BWD.value]
    # AMP: the second conv's FP16 gradient is cast beside the first layer's backward, the first conv's after it
    cast = [P.CAST_EARLY.value] if use_amp else []
    assert _parts(step.branches[1].calls) == [*cast, P.REDUCE_EARLY.value]
    assert _parts(step.branches[2].calls) == [first_bwd.value] + ([P.CAST_LATE.value] if use_amp else [])
    # the branches hold the recipe's parts in the recipe's order, and a step's calls are its branches in order
    for branch, (_stream, parts, _after) in zip(step.branches, train_recipe(ab, last), strict=True):
        assert _parts(branch.calls) == [p.value for p in parts if step.calls_of(p.value)]
    assert step.calls == tuple(serial_calls(step.branches))
    sums = (P.ACCUM_METRICS, P.ACCUM_METRICS_TRAIN_LAST)  # a last batch's sums weigh its own batch size
    assert step.calls_of(sums[last].value) and not step.calls_of(sums[not last].value)


@pytest.mark.parametrize("last", [False, True])
def test_the_nan_check_follows_the_statistics_and_precedes_the_metric_sums(amp, last):
    # The flag covers the all-reduced BN statistics (every rank agrees), and a skipped step's loss is not summed
    # (AMP and BN: every one of these parts has calls).
    accum = P.ACCUM_METRICS_TRAIN_LAST if last else P.ACCUM_METRICS
    got = _parts(amp.step("train_last_a" if last else "train_a").branches[-1].calls)
    want = [P.REDUCE_RUNNING.value, P.CHECK_FINITE.value, accum.value, P.UPDATE_RUNNING.value, P.OPTIMIZER.value]
    assert [p for p in got if p in want] == want


class _Recorder:
    """A backend that records what it was asked to capture."""

    def __init__(self) -> None:
        self.branches: dict[str, tuple] = {}
        self.serial: dict[str, list] = {}

    def capture_branches(self, name, branches):
        assert name not in self.branches, f"{name} captured twice"
        self.branches[name] = tuple(branches)
        return ("graph", name)

    def capture(self, name, calls):
        self.serial[name] = list(calls)
        return ("serial", name)


def test_capture_steps_captures_every_step_as_branches_under_its_name(amp):
    be = _Recorder()
    st = capture_steps(be, amp, has_val=True)
    assert be.branches["train_a"] == amp.step("train_a").branches and len(be.branches["train_a"]) == 4
    assert st.train == [("graph", "train_a"), ("graph", "train_b")]
    assert st.train_last == [("graph", "train_last_a"), ("graph", "train_last_b")]
    assert st.val == [("graph", "val_a"), ("graph", "val_b")]
    assert st.val_last == [("graph", "val_last_a"), ("graph", "val_last_b")]
    assert st.transfer == st.val_transfer == [("graph", "transfer_a"), ("graph", "transfer_b")]  # not resident
    assert (st.clear_metrics, st.epoch_begin, st.epoch_order, st.val_begin, st.epoch_end, st.val_end) == tuple(
        ("graph", n) for n in ("clear_metrics", "epoch_begin", "epoch_order", "val_begin", "epoch_end", "val_end"))
    assert set(be.branches) == set(amp.steps)  # (no EMA, no resident data set: every step is the loop's)
    for name, got in be.branches.items():
        assert got == amp.step(name).branches, name
    assert be.serial == {} and st.launches_per_step == 2


class _ResidentSteps:
    """What capture_steps reads of a program with a resident data set: the steps, by name."""

    def __init__(self, amp: Program) -> None:
        self.steps = dict(amp.steps)
        for ab in ("a", "b"):
            self.steps[f"val_transfer_{ab}"] = Step(f"val_transfer_{ab}", (Branch(S.COMP_1, ()),))

    def step(self, name: str) -> Step:
        return self.steps[name]


@pytest.mark.parametrize("has_val", [False, True])
def test_a_resident_data_set_validates_from_its_own_batch_selection(amp, has_val):
    be = _Recorder()
    st = capture_steps(be, _ResidentSteps(amp), has_val=has_val)
    assert st.transfer == [("graph", "transfer_a"), ("graph", "transfer_b")]
    want = [("graph", "val_transfer_a"), ("graph", "val_transfer_b")] if has_val else st.transfer
    assert st.val_transfer == want and ("val_transfer_a" in be.branches) == has_val


def test_capture_steps_without_validation_captures_no_validation_step(fp32):
    be = _Recorder()
    st = capture_steps(be, fp32, has_val=False)
    assert st.val == st.val_last == []
    assert not {"val_a", "val_b", "val_last_a", "val_last_b"} & set(be.branches)


def test_a_capture_function_gets_each_step_as_its_serial_calls(amp):
    be = _Recorder()
    capture_steps(be, amp, has_val=True, capture=be.capture)
    assert be.branches == {}
    assert be.serial["train_last_b"] == list(amp.step("train_last_b").calls)
    assert be.serial["train_last_b"] == serial_calls(amp.step("train_last_b").branches)


def test_capture_step_names_the_steps_when_one_is_missing(fp32):
    with pytest.raises(CompileError, match=r"no step 'train_c'.*'train_a'"):
        capture_step(_Recorder(), fp32, "train_c")
    assert capture_step(_Recorder(), fp32, "epoch_end") == ("graph", "epoch_end")


def test_the_cpu_backend_names_its_graphs_after_the_steps():
    t = (DeepLearningTask(Settings().manual_seed(1).global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(flatten(), fc(3))).optimizer(SGD()).scheduler(ConstantLR(0.01))
         .data(ArrayFeeder((X, Y), None, BATCH, seed=2, num_classes=3)).total_epochs(1)).compile()
    st = t._steps
    assert [g.name for g in st.train + st.train_last + st.transfer] == [
        "train_a", "train_b", "train_last_a", "train_last_b", "transfer_a", "transfer_b"]


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
