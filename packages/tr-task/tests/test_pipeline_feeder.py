"""PipelineFeeder: the native pipeline behind the Feeder interface, and adopting external (pinned) buffers."""

from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError, PhaseError
from tr.core.norm import NormMode
from tr.data import ArrayDataset, PreprocessorSettings, shard_positions
from tr.data.mnist import MNIST as MNISTData
from tr.data.transforms import Pad, RandomCrop, RandomErasing
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


def test_last_epoch_times_say_where_the_pass_went():
    f = _feeder()
    assert f.last_epoch_times() is None  # no pass yet
    for k, _buf, _n in f.epoch(0, False):
        f.release(k)
    t = f.last_epoch_times()
    assert t.workers == 2 and sum(t.items) == 10_000  # workers claim items: one may run none
    assert all((w > 0) == (n > 0) for w, n in zip(t.work_s, t.items))
    assert len(t.consumer_wait_s) == 1 and t.consumer_wait_s[0] >= 0
    f.close()


def test_a_compiled_task_exposes_the_feeder_it_trains_from():
    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, flatten, seq
    from tr.task.deep_learning import DeepLearningTask

    x = np.random.default_rng(0).standard_normal((16, 2, 2, 1), dtype=np.float32)
    a = ArrayFeeder((x, np.arange(16, dtype=np.int32) % 2), None, 4)
    task = DeepLearningTask(Settings().global_batch_size(4)).device("cpu").quiet() \
        .model(seq(flatten(), fc(2))).num_classes(2).optimizer(SGD()).data(a)
    assert task.feeder is a
    task.compile()
    assert task.feeder is a


def test_the_epoch_record_says_how_long_training_waited_for_data():
    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, flatten, seq
    from tr.task.deep_learning import DeepLearningTask

    def train(feeder):
        task = DeepLearningTask(Settings().global_batch_size(100)).device("cpu").quiet() \
            .model(seq(flatten(), fc(10))).num_classes(10).optimizer(SGD()).total_epochs(2).data(feeder)
        return task.compile().run().history

    for rec in train(_feeder(100)):  # the native pipeline: its EpochTimes of the training pass
        assert rec.data_wait_s is not None and rec.data_wait_s >= 0
        assert 0 < rec.pipeline_busy <= 1
    x = np.random.default_rng(0).standard_normal((200, 28, 28, 1), dtype=np.float32)
    for rec in train(ArrayFeeder((x, np.arange(200, dtype=np.int32) % 10), None, 100)):
        assert rec.data_wait_s is None and rec.pipeline_busy is None


def test_adopt_rejects_mismatched_buffers():
    f = _feeder()
    with pytest.raises(ConfigError):
        f.adopt_buffers([(np.zeros(500, np.int32), np.zeros((500, 28, 28, 1), np.float16))] * 2)
    f.close()
    a = ArrayFeeder((np.zeros((8, 2, 2, 1), np.float32), np.zeros(8, np.int32)), None, 4)
    with pytest.raises(ConfigError, match="do not match"):
        a.adopt_buffers([(np.zeros(4, np.int32), np.zeros((4, 2, 2, 2), np.float32))] * 2)



# --- data parallelism: shard(rank, world_size) ------------------------------------------------------------------

N_TRAIN, N_VAL = 150, 41  # not divisible by the world sizes


@pytest.fixture(scope="module")
def small():
    val = MNISTData(MNIST).load("val")
    ds = ArrayDataset((val.images[:N_TRAIN], val.labels[:N_TRAIN]),
                      (val.images[N_TRAIN:N_TRAIN + N_VAL], val.labels[N_TRAIN:N_TRAIN + N_VAL]), num_classes=10)
    return PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST) \
        .train_transforms(Pad(2), RandomCrop(28), RandomErasing(0.5)).commit()  # random: the seeds matter


def _epoch(f: PipelineFeeder, epoch: int, train: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for k, buf, n in f.epoch(epoch, train):
        labels, data = f.buffers()[buf]
        out.append((labels[:n].copy(), data[:n].copy()))
        f.release(k)
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_feeders_feed_the_steps_of_one_feeder(small, world):
    gb = 8 * world
    one = PipelineFeeder(small, gb, seed=5)
    ranks = [PipelineFeeder(small, gb, seed=5) for _ in range(world)]
    for r, f in enumerate(ranks):
        f.shard(r, world)
        per_rank = -(-N_TRAIN // world)
        assert (f.batch, f.global_batch, f.rank, f.world_size) == (8, gb, r, world)
        assert f.station.batch_size == 8 and f.buffers()[0][1].shape == (8, 28, 28, 1)
        assert (f.num_samples(True), f.steps(True), f.last_batch(True)) == \
            (per_rank, -(-per_rank // 8), per_rank - (-(-per_rank // 8) - 1) * 8)
        assert f.steps(True) == one.steps(True)  # padded: every rank runs the steps of one process
        n_val = len(range(r, N_VAL, world))
        assert (f.num_samples(False), f.steps(False), f.last_batch(False)) == \
            (n_val, -(-n_val // 8), n_val - (-(-n_val // 8) - 1) * 8)
    for train in (True, False):
        whole = _epoch(one, 1, train)
        labels = np.concatenate([lab for lab, _ in whole])
        data = np.concatenate([d for _, d in whole])
        for r, f in enumerate(ranks):
            pos = shard_positions(len(labels), r, world, pad=train)
            mine = _epoch(f, 1, train)
            np.testing.assert_array_equal(np.concatenate([lab for lab, _ in mine]), labels[pos])
            assert np.concatenate([d for _, d in mine]).tobytes() == data[pos].tobytes()
            # step k of the ranks together is step k of the one feeder (before the padded last step)
            if train:
                for k in range(len(whole) - 1):
                    assert mine[k][0].tolist() == whole[k][0][r::world].tolist()
    for f in (one, *ranks):
        f.close()


def test_shard_then_adopt_the_backends_buffers_of_the_local_batch(small):
    f = PipelineFeeder(small, 12, seed=5, zones=[(np.zeros(12, np.int32), np.zeros((12, 28, 28, 1), np.float32))
                                                 for _ in range(2)])
    f.shard(1, 3)
    assert f.batch == 4
    with pytest.raises(ConfigError, match=r"labels must be C-contiguous int32 \(4,\), got int32 \(12,\)"):
        f.adopt_buffers([(np.zeros(12, np.int32), np.zeros((12, 28, 28, 1), np.float32))] * 2)
    mine = [(np.zeros(4, np.int32), np.zeros((4, 28, 28, 1), np.float32)) for _ in range(2)]
    f.adopt_buffers(mine)
    got = []
    for k, buf, n in f.epoch(0, False):
        assert mine[buf][1][:n].std() > 0.2
        got += mine[buf][0][:n].tolist()
        f.release(k)
    val = small.open_dataset().load("val").labels
    assert got == val[1::3].tolist()
    f.close()


def test_shard_rejects(small):
    f = PipelineFeeder(small, 10, seed=5)
    with pytest.raises(ConfigError, match="the global batch size 10 does not divide by the world size 4"):
        f.shard(0, 4)
    with pytest.raises(ConfigError, match=r"rank must be an integer in \[0, 2\), got 2"):
        f.shard(2, 2)
    assert (f.batch, f.num_samples(True)) == (10, N_TRAIN)  # refused: nothing changed
    gen = f.epoch(0, True)
    next(gen)
    with pytest.raises(PhaseError, match="during an epoch"):
        f.shard(0, 2)
    gen.close()
    f.shard(0, 2)
    assert f.batch == 5
    f.close()
