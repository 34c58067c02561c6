"""checkpoint_every on the CPU backend: the pruning and best/ remove only tr checkpoints the policy wrote (a user's
epoch-NNNN folder survives and is not counted), a target that is not a checkpoint is refused before the first
epoch trains, keep_best's validation metrics without validation data are a ConfigError, and a run that validated
nothing reports no best (None, not 0.0 at epoch -1)."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError, DataError
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.task import checkpoint_files
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.report import EpochRecord, TrainingResult

BATCH = 8
_rng = np.random.default_rng(0)
X = _rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
Y = (np.arange(40) % 3).astype(np.int32)


def _feeder(val: bool = True) -> ArrayFeeder:
    return ArrayFeeder((X[:32], Y[:32]), (X[32:], Y[32:]) if val else None, BATCH, seed=2, num_classes=3)


def _task(epochs: int = 3, feeder: ArrayFeeder | None = None) -> DeepLearningTask:
    t = (DeepLearningTask(Settings().manual_seed(1).global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(fc(8), relu(), fc(3))).optimizer(SGD()).scheduler(ConstantLR(0.05)).total_epochs(epochs))
    return t.data(feeder) if feeder is not None else t


def test_pruning_removes_only_its_own_checkpoints(tmp_path):
    user = tmp_path / "epoch-0001"  # a user's folder with the policy's naming, no tr manifest
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    (tmp_path / "epoch-0000-draft").mkdir()  # not the policy's pattern at all
    t = _task(5, _feeder()).checkpoint_every(2, tmp_path, keep_last=1).compile()
    t.run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0000-draft", "epoch-0001", "epoch-0004"]
    assert (user / "notes.txt").read_text() == "mine"  # was: removed by the epoch-* rmtree
    assert checkpoint_files.is_checkpoint(tmp_path / "epoch-0004")


def test_a_target_that_is_not_a_checkpoint_is_refused_before_training(tmp_path):
    (tmp_path / "epoch-0002").mkdir()
    (tmp_path / "epoch-0002" / "results.csv").write_text("mine")
    t = _task(3, _feeder()).checkpoint_every(1, tmp_path, keep_last=3).compile()
    before = t.weights()
    with pytest.raises(DataError, match="epoch-0002: cannot save a checkpoint there: .*holds results.csv"):
        t.run()
    assert t._epochs_done == 0 and all(np.array_equal(before[k], v) for k, v in t.weights().items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002"]  # nothing written, nothing removed


def test_a_users_best_folder_is_refused_before_training(tmp_path):
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "model.pt").write_bytes(b"mine")
    t = _task(2, _feeder()).checkpoint_every(1, tmp_path, keep_best="val_loss").compile()
    with pytest.raises(DataError, match="best: cannot save a checkpoint there"):
        t.run()
    assert (tmp_path / "best" / "model.pt").read_bytes() == b"mine" and t._epochs_done == 0


@pytest.mark.parametrize("metric", ["top1", "top5", "val_loss"])
def test_keep_best_by_a_validation_metric_needs_validation_data(metric, tmp_path):
    msg = f"keep_best='{metric}' needs validation data, and the feeder has none"
    with pytest.raises(ConfigError, match=msg):  # the feeder is known: at checkpoint_every
        _task(2, _feeder(val=False)).checkpoint_every(1, tmp_path, keep_best=metric)
    t = _task(2).checkpoint_every(1, tmp_path, keep_best=metric).data(_feeder(val=False)).compile()
    with pytest.raises(ConfigError, match=msg):  # known only later: when run() starts
        t.run()
    assert t._epochs_done == 0 and list(tmp_path.iterdir()) == []  # was: no best/, and nothing said


def test_keep_best_by_the_training_loss_needs_no_validation(tmp_path):
    t = _task(3, _feeder(val=False)).checkpoint_every(3, tmp_path, keep_best="train_loss").compile()
    losses = [r.train_loss for r in t.run().history]
    best = checkpoint_files.read(tmp_path / "best")[0]
    assert best["metrics"]["train_loss"] == min(losses) and best["epoch"] == 1 + int(np.argmin(losses))


def test_a_run_without_validation_reports_no_best():
    r = _task(2, _feeder(val=False)).compile().run()
    assert (r.best_top1, r.best_top5, r.best_epoch) == (None, None, None)  # was: 0.0, 0.0, -1
    assert not {"best_top1", "best_top5", "best_epoch"} & set(r.as_dict()) and r.as_dict()["epochs"] == 2


def test_a_validated_epoch_is_a_best_even_at_zero_accuracy():
    res = TrainingResult()
    res.add(EpochRecord(1, 1.0, 0.1, 0.0, val_loss=2.0, top1=0.0, top5=0.25))
    res.add(EpochRecord(2, 1.0, 0.1, 0.0))  # not validated
    assert (res.best_top1, res.best_top5, res.best_epoch) == (0.0, 0.25, 1)  # was: epoch -1, "never validated"
    assert res.as_dict()["best_epoch"] == 1
