"""PipelineFeeder: the native pipeline behind the Feeder interface, and adopting external (pinned) buffers."""

from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError
from tr.data import PreprocessorSettings
from tr.data.transforms import Pad, RandomCrop
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

MNIST = Path(__file__).resolve().parents[3] / "data" / "mnist"


def _feeder(batch=500):
    s = PreprocessorSettings().dataset("mnist", str(MNIST)).preprocess_workers(2) \
        .train_transforms(Pad(2), RandomCrop(28)).commit()
    return PipelineFeeder(s, batch, seed=5)


def test_epoch_fills_the_adopted_buffers():
    f = _feeder()
    assert f.sample_shape == (28, 28, 1) and f.num_classes == 10 and f.steps(False) == 20
    mine = [(np.zeros(500, np.int32), np.zeros((500, 28, 28, 1), np.float32)) for _ in range(2)]
    f.adopt_buffers(mine)
    assert all(a[0] is b[0] for a, b in zip(f.buffers(), mine))
    seen = 0
    for k, buf, n in f.epoch(0, False):
        labels, data = mine[buf]
        assert n == 500 and buf == k % 2 and data[:n].std() > 0.2 and data[:n].max() <= 1.0 and 0 <= labels[:n].min()
        seen += n
        f.release(k)
    assert seen == 10_000
    f.close()


def test_adopt_rejects_mismatched_buffers():
    f = _feeder()
    with pytest.raises(ConfigError):
        f.adopt_buffers([(np.zeros(500, np.int32), np.zeros((500, 28, 28, 1), np.float16))] * 2)
    f.close()
    a = ArrayFeeder((np.zeros((8, 2, 2, 1), np.float32), np.zeros(8, np.int32)), None, 4)
    with pytest.raises(ConfigError, match="do not match"):
        a.adopt_buffers([(np.zeros(4, np.int32), np.zeros((4, 2, 2, 2), np.float32))] * 2)
