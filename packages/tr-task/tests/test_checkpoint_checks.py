"""What a resume checks beyond files and configuration (CPU backend): the manifest's epoch against the state's
step counter (how it counts: every step, skipped ones too, the last partial batch a step, drop_last's dropped
samples none), steps trained outside epochs (a benchmark helper) recorded and resumed exactly, and a larger
total_epochs accepted when the schedule's past rates stay (exact resume) and refused, naming why, when not."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD, Adam
from tr.algo.scheduler import ConstantLR, CosineAnnealingLR
from tr.core.errors import ConfigError, DataError
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, fc, flatten, relu, seq
from tr.task import checkpoint, checkpoint_files
from tr.task.deep_learning import DeepLearningTask
from tr.task.executor import scalar
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(6)
X = _rng.standard_normal((44, 4, 4, 1)).astype(np.float32)
Y = (np.arange(44) % 3).astype(np.int32)


def _task(n_train: int = 32, epochs: int = 4, sched=None, drop_last: bool = False, x=X) -> DeepLearningTask:
    feeder = ArrayFeeder((x[:n_train], Y[:n_train]), (x[36:], Y[36:]), BATCH, seed=2, num_classes=3,
                         drop_last=drop_last)
    return (DeepLearningTask(Settings().manual_seed(2).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(8), relu(), fc(3))).optimizer(Adam()).scheduler(sched or ConstantLR(0.01))
            .data(feeder).total_epochs(epochs))


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


@pytest.mark.parametrize("epoch", [1, 3])
def test_an_edited_epoch_with_a_recomputed_checksum_is_refused_naming_both_numbers(epoch, tmp_path, resign):
    t = _task().compile()
    t.run(2)
    t.save(tmp_path / "ck")
    resign(tmp_path / "ck", epoch=epoch)
    fresh = _task().compile()
    with pytest.raises(DataError, match=f"the manifest's epoch {epoch} does not match the state's step counter 8: "
                                        f"{epoch} epoch\\(s\\) of 4 steps are {4 * epoch} steps"):
        fresh.resume(tmp_path / "ck")  # was: accepted, the run then numbered and scheduled from the edited epoch
    assert fresh._epochs_done == 0


@pytest.mark.parametrize("n_train, drop_last, per_epoch", [(36, False, 5), (36, True, 4), (32, False, 4)])
def test_the_step_counter_counts_every_batch_of_an_epoch(n_train, drop_last, per_epoch, tmp_path):
    t = _task(n_train, drop_last=drop_last).compile()
    t.run(2)
    assert int(scalar(t.backend, t.program, "step")[0]) == 2 * per_epoch == 2 * t.feeder.steps(True)
    t.save(tmp_path / "ck")
    assert _task(n_train, drop_last=drop_last).resume(tmp_path / "ck")._epochs_done == 2


def test_a_skipped_step_counts_as_a_step(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 6, 6, 2)).astype(np.float32), rng.integers(0, 4, 32).astype(np.int32)
    x[16:24] *= 1e30  # batch 2: the BN running variance overflows and the step is skipped

    def task():
        return (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device("cpu").quiet()
                .model(seq(conv(4, 3, 1, 1), bn(), relu(), flatten(), fc(4))).optimizer(SGD().momentum(0.9))
                .scheduler(ConstantLR(0.01)).total_epochs(2)
                .data(ArrayFeeder((x, y), None, BATCH, seed=2, shuffle=False, num_classes=4)))

    t = task().compile()
    assert t.run(1).skipped_steps == 1
    assert int(scalar(t.backend, t.program, "step")[0]) == 4  # (scalar_increment is not flagged)
    t.save(tmp_path / "ck")
    assert task().resume(tmp_path / "ck")._epochs_done == 1


def test_steps_trained_outside_epochs_are_recorded_and_resumed_exactly(tmp_path):
    t = _task().compile()
    t.run(1)
    t.time_train_step(2, warmup=1)  # a benchmark helper: 3 more steps on the batch in buffer A
    t.save(tmp_path / "ck")
    assert checkpoint_files.read(tmp_path / "ck")[0]["steps_outside_epochs"] == 3
    rest = t.run()
    resumed = _task().resume(tmp_path / "ck")
    assert [r.train_loss for r in resumed.run().history] == [r.train_loss for r in rest.history]
    assert _state(resumed) == _state(t)


def test_total_epochs_may_grow_when_the_past_rates_stay(tmp_path):
    sched = ConstantLR(0.05).warmup(1)  # a ramp over epoch 1, then constant: its past does not depend on the end
    straight = _task(epochs=4, sched=sched).compile()
    straight.run()
    short = _task(epochs=2, sched=sched).compile()
    short.run()  # a finished run ...
    short.save(tmp_path / "ck")
    longer = _task(epochs=4, sched=sched).resume(tmp_path / "ck")  # ... trains longer: was "schedule.total_epochs"
    assert [r.epoch for r in longer.run().history] == [3, 4]
    assert _state(longer) == _state(straight)


def test_total_epochs_cannot_grow_when_the_schedule_rewrites_its_past(tmp_path):
    t = _task(epochs=2, sched=CosineAnnealingLR(0.05)).compile()
    t.run()
    t.save(tmp_path / "ck")
    with pytest.raises(ConfigError, match="total_epochs grows from 2 to 4, but with 4 epochs the schedule "
                                          "CosineAnnealingLR gives other learning rates for the 8 steps already"):
        _task(epochs=4, sched=CosineAnnealingLR(0.05)).resume(tmp_path / "ck")
    with pytest.raises(ConfigError, match="schedule.total_epochs: the checkpoint has 2, this task has 1"):
        _task(epochs=1, sched=CosineAnnealingLR(0.05)).resume(tmp_path / "ck")  # shrinking stays refused
    with pytest.raises(ConfigError, match="schedule.scheduler"):  # so does any other change with it
        _task(epochs=4, sched=CosineAnnealingLR(0.04)).resume(tmp_path / "ck")
