"""A checkpoint holds whole epochs (CPU backend): a save from inside an epoch (an on_step callback) or after an
epoch was cancelled with steps applied is refused, saying why and what to do; it is allowed again once an epoch
completes, and that checkpoint resumes to the bytes of the task that went on in-process; an epoch cancelled
before any step applied leaves a state that saves and resumes to the unbroken run."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import Adam
from tr.algo.scheduler import CosineAnnealingLR
from tr.core.errors import PhaseError
from tr.core.settings import Settings
from tr.graph.blueprint import dropout, fc, relu, seq
from tr.task import checkpoint, checkpoint_files
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH, EPOCHS = 8, 4
_rng = np.random.default_rng(4)
X = _rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
Y = (np.arange(40) % 3).astype(np.int32)


class FailingFeeder(ArrayFeeder):
    """Raises ``exc`` before the first batch of training epoch ``at`` (0-based), once: no step applied."""

    def __init__(self, at: int, exc: BaseException) -> None:
        super().__init__((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
        self.at, self.exc = at, exc

    def epoch(self, epoch, train):
        if train and epoch == self.at and self.exc is not None:
            exc, self.exc = self.exc, None
            raise exc
        yield from super().epoch(epoch, train)


def _task(feeder=None) -> DeepLearningTask:
    feeder = feeder or ArrayFeeder((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(8), relu(), dropout(0.25), fc(3))).optimizer(Adam()).scheduler(CosineAnnealingLR(0.02))
            .data(feeder).total_epochs(EPOCHS))


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


def test_a_save_or_resume_from_inside_an_epoch_is_refused(tmp_path):
    t = _task().compile()
    t.run(1)
    t.save(tmp_path / "e1")
    refused = []

    def inside(k, _result):
        for call in (lambda: t.save(tmp_path / "mid"), lambda: t.resume(tmp_path / "e1")):
            try:
                call()
            except PhaseError as e:
                refused.append(str(e))

    t.on_step(inside)
    t.run(1)  # the callback's refusals leave the epoch whole
    assert len(refused) == 2 * 4 and all("inside epoch 2 (from an on_step callback)" in m for m in refused)
    assert "save() inside" in refused[0] and "resume() inside" in refused[1]
    assert not (tmp_path / "mid").exists()  # was: written with epoch 1 on it and mid-epoch weights in it
    t.on_step(None)
    t.save(tmp_path / "e2")  # between epochs again
    assert checkpoint_files.read(tmp_path / "e2")[0]["epoch"] == 2


def test_after_a_cancelled_epoch_a_save_waits_until_an_epoch_completes(tmp_path):
    t = _task().compile()
    t.run(1)

    def interrupt(k, _result):
        if k == 2:
            raise KeyboardInterrupt

    t.on_step(interrupt)
    with pytest.raises(KeyboardInterrupt):
        t.run()
    with pytest.raises(PhaseError, match=r"save\(\) after epoch 2 was cancelled \(KeyboardInterrupt\): 3 of its "
                                         r"training steps are in the weights.* run\(\) trains epoch 2 again"):
        t.save(tmp_path / "ck")  # was: saved as "epoch 1" with 3 steps of epoch 2 in it
    assert not (tmp_path / "ck").exists()
    t.on_step(None)
    t.run(1)  # epoch 2 again, from the weights the cancelled one left
    t.save(tmp_path / "ck")
    manifest = checkpoint_files.read(tmp_path / "ck")[0]
    assert manifest["epoch"] == 2 and manifest["steps_outside_epochs"] == 3
    rest = t.run()  # the task goes on in-process ...
    resumed = _task().resume(tmp_path / "ck")  # ... and a resume of its checkpoint goes on the same way
    assert [r.train_loss for r in resumed.run().history] == [r.train_loss for r in rest.history]
    assert _state(resumed) == _state(t)
    straight = _task().compile()
    straight.run()
    assert _state(straight) != _state(t)  # (what run() after a cancelled epoch says: not the unbroken run)


def test_an_epoch_cancelled_before_its_first_step_leaves_a_state_that_saves(tmp_path):
    t = _task(FailingFeeder(at=2, exc=ValueError("the disk went away"))).compile()
    with pytest.raises(ValueError, match="the disk went away"):
        t.run()  # epochs 1 and 2 complete, epoch 3 fails before its first batch
    t.save(tmp_path / "ck")
    assert checkpoint_files.read(tmp_path / "ck")[0]["steps_outside_epochs"] == 0
    straight = _task().compile()
    straight.run()
    resumed = _task(FailingFeeder(at=-1, exc=None)).resume(tmp_path / "ck")  # (the same feeder class)
    resumed.run()
    assert _state(resumed) == _state(straight)


def test_a_resume_ends_the_cancelled_state(tmp_path):
    t = _task().compile()
    t.run(1)
    t.save(tmp_path / "e1")
    t.on_step(lambda k, r: (_ for _ in ()).throw(KeyboardInterrupt) if k == 1 else None)
    with pytest.raises(KeyboardInterrupt):
        t.run(1)
    with pytest.raises(PhaseError, match="cancelled"):
        t.save(tmp_path / "again")
    t.resume(tmp_path / "e1")  # the arena holds epoch 1's whole state again
    t.save(tmp_path / "again")
    assert checkpoint_files.read(tmp_path / "again")[0]["epoch"] == 1
