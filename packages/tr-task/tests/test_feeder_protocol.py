"""A user's feeder needs only the required part of the Feeder protocol; complete_feeder gives it the rest
(tr.task.feeder.FeederDefaults), and the task trains from it without probing for methods."""

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import fc, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder, FeederDefaults, complete_feeder


class MinimalFeeder:
    """The required part only: one epoch of 4 batches of 8 random samples, no validation."""

    batch, sample_shape = 8, (1, 1, 6)

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((32, 1, 1, 6)).astype(np.float32)
        self.y = (np.arange(32) % 3).astype(np.int32)
        self._bufs = [(np.zeros(8, np.int32), np.zeros((8, 1, 1, 6), np.float32)) for _ in range(2)]
        self.released = []

    def buffers(self):
        return self._bufs

    def num_samples(self, train):
        return 32 if train else 0

    def steps(self, train):
        return 4 if train else 0

    def last_batch(self, train):
        return 8

    def epoch(self, epoch, train):
        for k in range(self.steps(train)):
            labels, data = self._bufs[k % 2]
            labels[:] = self.y[8 * k:8 * k + 8]
            data[:] = self.x[8 * k:8 * k + 8]
            yield k, k % 2, 8

    def release(self, k):
        self.released.append(k)

    def close(self):
        pass


def test_defaults_fill_what_a_user_feeder_lacks():
    f = MinimalFeeder()
    c = complete_feeder(f)
    assert c.wrapped is f and c.batch == 8 and c.staging_shape == (1, 1, 6)
    assert not c.adopts_buffers and c.last_epoch_times() is None and c.input_plan() is None
    c.shard(0, 1)  # nothing to do: the feeder already delivers this rank's data
    c.check_labels(3)
    c.batch = 8  # attributes set through the wrapper reach the user's object
    assert f.batch == 8


def test_our_feeders_are_complete_already():
    a = ArrayFeeder((np.zeros((4, 1, 1, 2), np.float32), np.zeros(4, np.int32)), None, 2)
    assert isinstance(a, FeederDefaults) and complete_feeder(a) is a and a.adopts_buffers


def test_a_task_trains_from_a_minimal_feeder():
    f = MinimalFeeder()
    t = DeepLearningTask(Settings().global_batch_size(8)).device("cpu").quiet().model(seq(fc(3, True))) \
        .optimizer(SGD()).scheduler(ConstantLR().base_lr(0.1)).total_epochs(2).num_classes(3).data(f)
    r = t.compile().run()
    assert t.feeder is f and len(r.history) == 2 and np.isfinite(r.history[-1].train_loss)
    assert f.released == [0, 1, 2, 3] * 2


def test_a_feeder_that_cannot_adopt_says_so():
    with pytest.raises(Exception, match="fills its own staging buffers"):
        FeederDefaults().adopt_buffers([])
