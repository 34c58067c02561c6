"""DeepLearningTask's chain API: validated at once, frozen after compile, run() only when compiled."""

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.errors import CompileError, ConfigError, DataError, PhaseError
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder, steps_for


@pytest.mark.parametrize("call,msg", [
    (lambda t: t.total_epochs(0), "total_epochs must be an integer >= 1, got 0"),
    (lambda t: t.num_classes(1), "num_classes must be an integer >= 2, got 1"),
    (lambda t: t.validate_every(0), "interval must be >= 1, got 0"),
    (lambda t: t.early_stop_by_top1(1.5), r"threshold must be in \(0, 1\], got 1.5"),
    (lambda t: t.grad_clip(0), "grad_clip must be a finite number > 0"),
    (lambda t: t.device("tpu"), "device must be 'cpu', 'cuda' or 'auto', got 'tpu'"),
    (lambda t: t.optimizer(0.1), "optimizer must be SGD"),
    (lambda t: t.loss("mse"), "loss must be a CrossEntropyLoss"),
])
def test_bad_settings_are_named(call, msg):
    with pytest.raises(ConfigError, match=msg):
        call(DeepLearningTask())


def test_run_before_compile():
    with pytest.raises(PhaseError, match="run\\(\\) needs a compiled task.*call compile\\(\\) first"):
        DeepLearningTask().run()


def test_compile_needs_model_and_optimizer():
    with pytest.raises(CompileError, match="no model"):
        DeepLearningTask().optimizer(SGD()).compile()


def test_labels_outside_range_rejected():
    x = np.zeros((8, 1, 1, 4), np.float32)
    y = np.array([0, 1, 2, 3, 4, 5, 6, 10], np.int32)
    with pytest.raises(DataError, match=r"train label at index 7 is 10, outside \[0, 10\)"):
        ArrayFeeder((x, y), None, 4, num_classes=10)


def test_steps_for():
    assert steps_for(60000, 200, False) == (300, 200)
    assert steps_for(10001, 200, False) == (51, 1)
    assert steps_for(10001, 200, True) == (50, 200)
    with pytest.raises(ConfigError, match="leaves no batch"):
        steps_for(10, 20, True)


def test_array_feeder_epochs_are_deterministic_permutations():
    x = np.arange(10, dtype=np.float32).reshape(10, 1, 1, 1)
    y = np.arange(10, dtype=np.int32)
    f = ArrayFeeder((x, y), None, 4, seed=3)
    seen = []
    for _k, buf, n in f.epoch(0, True):
        labels, data = f.buffers()[buf]
        seen += labels[:n].tolist()
        assert np.array_equal(data[:n].reshape(-1), labels[:n].astype(np.float32))
    assert sorted(seen) == list(range(10)) and seen != list(range(10))
    again = [lab for k, buf, n in f.epoch(0, True) for lab in f.buffers()[buf][0][:n].tolist()]
    assert again == seen
