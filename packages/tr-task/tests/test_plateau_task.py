"""ReduceLROnPlateau in a task on the CPU backend (tr.task.plateau): the LR the device reads drops from the step
after the epoch that exhausts the patience; the decisions are torch's on the run's own epoch metrics; a resumed run
reduces where the unbroken one did (same bytes); validation metrics without validation data are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tr.algo.optimizer import SGD
from tr.algo.plateau import ReduceLROnPlateau
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH, STEPS = 8, 4
_rng = np.random.default_rng(2)
X = _rng.standard_normal((BATCH * STEPS + 16, 4, 4, 1)).astype(np.float32)
Y = (X.reshape(len(X), -1)[:, :3].argmax(1)).astype(np.int32)


def _task(rule: ReduceLROnPlateau, epochs: int = 6, val: bool = True) -> DeepLearningTask:
    n = BATCH * STEPS
    feeder = ArrayFeeder((X[:n], Y[:n]), (X[n:], Y[n:]) if val else None, BATCH, shuffle=False, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(4).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(16), relu(), fc(3))).optimizer(SGD().momentum(0.9)).scheduler(rule).data(feeder)
            .total_epochs(epochs))


# threshold 1 (rel): nothing is ever an improvement (torch's best * 0 comparison), so with patience 1 every
# second epoch reduces: a schedule that does not depend on the metrics' values
EVERY_SECOND = ReduceLROnPlateau(0.2).threshold(1.0).patience(1).factor(0.5)


def test_the_lr_drops_from_the_step_after_the_epoch_that_exhausts_the_patience():
    task = _task(EVERY_SECOND).compile()
    lrs = [r.lr for r in task.run().history]
    assert lrs == pytest.approx([0.2, 0.2, 0.1, 0.1, 0.05, 0.05])
    table = task.backend.read(task.program.tensor("lr_table")).ravel()
    np.testing.assert_array_equal(table, np.repeat(np.float32([0.2, 0.2, 0.1, 0.1, 0.05, 0.05]), STEPS))
    # the last epoch's reduction applies from step 24, past this run's table (a longer run would train at it)
    assert task._plateau.changes == ((2 * STEPS, 0.1), (4 * STEPS, 0.05), (6 * STEPS, 0.025))


def test_the_decisions_are_torch_s_on_the_run_s_metrics():
    rule = ReduceLROnPlateau(0.5).patience(0).factor(0.5).threshold(1e-3)
    hist = _task(rule, epochs=8).compile().run().history
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    ref = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=1e-3)
    reductions = 0
    for before, after in zip(hist, hist[1:]):
        ref.step(before.val_loss)
        assert after.lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-6), f"epoch {after.epoch}"
        reductions += after.lr < before.lr
    assert reductions >= 1  # the run did plateau: the test compared decisions, not a constant LR


def test_a_resumed_run_reduces_where_the_unbroken_one_did(tmp_path):
    def state(t):
        return {x.name: t.backend.read(x).tobytes() for x in checkpoint.state_tensors(t.program)}

    full = _task(EVERY_SECOND).compile()
    lrs = [r.lr for r in full.run().history]
    part = _task(EVERY_SECOND).compile()
    part.run(3)
    part.save(tmp_path / "ck")
    resumed = _task(EVERY_SECOND).resume(tmp_path / "ck")
    rest = resumed.run()
    assert [r.lr for r in rest.history] == lrs[3:]
    assert state(resumed) == state(full) and resumed._plateau == full._plateau
    grown = _task(EVERY_SECOND, epochs=8).resume(tmp_path / "ck")  # total_epochs may grow: the past LRs stay
    assert [r.lr for r in grown.run().history] == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.025])


def test_a_validation_metric_without_validation_data_is_refused_at_compile():
    with pytest.raises(ConfigError, match="ReduceLROnPlateau monitors 'val_loss', which needs validation data"):
        _task(ReduceLROnPlateau(0.1), val=False).compile()
    _task(ReduceLROnPlateau(0.1).monitor("train_loss"), epochs=2, val=False).compile().run()
