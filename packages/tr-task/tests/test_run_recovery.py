"""A task survives an exception inside a step: the epoch is cancelled (the pipeline's zones released, the feeder
reset) and run() goes on; epoch numbers and the learning rate continue across run() calls; a failed compile()
leaves the settings editable."""

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import CosineAnnealingLR
from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.core.settings import Settings
from tr.data import ArrayDataset, PreprocessorSettings
from tr.graph.blueprint import fc, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

BATCH, STEPS, EPOCHS = 8, 4, 3


def _pipeline() -> PipelineFeeder:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 255, (BATCH * STEPS + 5, 6, 6, 1), dtype=np.uint8)
    y = rng.integers(0, 3, len(x)).astype(np.int32)
    ds = ArrayDataset((x[:BATCH * STEPS], y[:BATCH * STEPS]), (x[BATCH * STEPS:], y[BATCH * STEPS:]), num_classes=3)
    s = PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST).commit()
    return PipelineFeeder(s, BATCH, seed=5)


def _task(feeder, on_step=None) -> DeepLearningTask:
    t = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(fc(16), relu(), fc(3))).optimizer(SGD()).total_epochs(EPOCHS).data(feeder)
         .scheduler(CosineAnnealingLR(0.1).eta_min(0.01)))
    return t.on_step(on_step) if on_step else t


class Interrupt:
    """on_step hook: raise ``exc`` at step ``step`` of the ``at``-th epoch it sees (1-based), once."""

    def __init__(self, exc: BaseException, at: int, step: int) -> None:
        self.exc, self.at, self.step, self.epochs, self.fired = exc, at, step, 0, False

    def __call__(self, k: int, result: np.ndarray) -> None:
        self.epochs += k == 0
        if not self.fired and self.epochs == self.at and k == self.step:
            self.fired = True
            raise self.exc


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), ValueError("a bad batch")])
def test_an_exception_in_a_step_cancels_the_epoch_and_run_goes_on(exc):
    task = _task(_pipeline(), Interrupt(exc, at=2, step=1)).compile()
    with pytest.raises(type(exc)):
        task.run()  # epoch 1 completes, epoch 2 is interrupted with batch 1 acquired
    rest = task.run()  # was: PhaseError "batch 1 of the previous epoch is still acquired"
    assert [r.epoch for r in rest.history] == [2, 3]  # epoch 2 starts again, the schedule's end is kept
    assert all(np.isfinite(r.train_loss) and r.top1 is not None for r in rest.history)
    task._feeder.close()


def test_a_second_run_continues_the_epoch_numbers_and_reports_the_device_lr():
    x = np.random.default_rng(1).standard_normal((BATCH * STEPS, 1, 1, 4)).astype(np.float32)
    y = (np.arange(len(x)) % 3).astype(np.int32)
    task = _task(ArrayFeeder((x, y), None, BATCH, num_classes=3)).compile()
    first = task.run()
    assert [r.epoch for r in first.history] == [1, 2, 3]
    expect = [task._sched.lr_at(e, 0) for e in range(EPOCHS)]
    assert [r.lr for r in first.history] == pytest.approx(expect, rel=1e-6) and expect[0] > expect[-1]
    second = task.run(epochs=2)
    assert [r.epoch for r in second.history] == [4, 5]  # was: 1, 2 again, at the warm-up LR
    # past the schedule's end the device's lr_lookup reads the table's last entry: that is what is reported
    assert [r.lr for r in second.history] == pytest.approx([float(task._sched.table()[-1])] * 2, rel=1e-6)
    with pytest.raises(ConfigError, match="run\\(epochs\\) must be an integer >= 1, got 0"):
        task.run(epochs=0)


def test_a_failed_compile_leaves_the_settings_editable():
    s = Settings().global_batch_size(BATCH)
    x, y = np.zeros((16, 1, 1, 4), np.float32), np.zeros(16, np.int32)
    task = (DeepLearningTask(s).device("cpu").quiet().model(seq(fc(3))).optimizer(SGD()).num_classes(3)
            .data(ArrayFeeder((x, y), None, 4)))
    with pytest.raises(ConfigError, match="the feeder's batch 4 differs from the local batch size 8"):
        task.compile()
    assert not s.frozen
    s.global_batch_size(4)  # was: FrozenError, the settings stayed locked by the failed compile
    task.compile()
    assert s.frozen and task.compiled
