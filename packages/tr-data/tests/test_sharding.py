"""Data-parallel sharding: the position rule of tr.data.sharding, and Preprocessor.shard delivering exactly the
samples (bytes, labels, augmentations) that one process with the W-times larger batch delivers at each step."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, PhaseError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandomCrop,
    RandomErasing,
    RandomRotation,
    TransferStation,
    shard_positions,
    shard_size,
)
from tr.data.sharding import check_shard

CHAIN = [Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomErasing(0.5)]
VAL_CHAIN = [Pad(1), RandomCrop(28)]  # random too, so validation seeds matter as well
N_TRAIN, N_VAL, B = 301, 103, 8  # not divisible by 2, 3 or 4; B: the local batch
SHAPE = (28, 28, 1)


@pytest.fixture(scope="module")
def ds(mnist_val):
    im, lab = mnist_val.images, mnist_val.labels
    return ArrayDataset((im[:N_TRAIN], lab[:N_TRAIN]), (im[N_TRAIN:N_TRAIN + N_VAL], lab[N_TRAIN:N_TRAIN + N_VAL]))


def settings(ds, workers=2, **kw) -> PreprocessorSettings:
    s = (PreprocessorSettings().dataset(ds).preprocess_workers(workers).normalization(NormMode.MNIST)
         .train_transforms(*CHAIN).val_transforms(*VAL_CHAIN).seed(11))
    for k, v in kw.items():
        getattr(s, k)(v)
    return s


def batches(pre: Preprocessor, epoch: int, train: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    with pre.epoch(epoch, train) as run:
        return [(b.valid_data.copy(), b.valid_labels.copy()) for b in run.batches()]


def sharded(ds, rank: int, world: int, epoch: int, train: bool, **kw) -> list[tuple[np.ndarray, np.ndarray]]:
    with Preprocessor(settings(ds, **kw), TransferStation(B, SHAPE)) as pre:
        pre.shard(rank, world)
        return batches(pre, epoch, train)


# --- the rule --------------------------------------------------------------------------------------------------


def test_positions_are_dealt_round_robin():
    assert shard_positions(10, 1, 4, pad=True).tolist() == [1, 5, 9]
    assert shard_positions(10, 3, 4, pad=True).tolist() == [3, 7, 1]  # padded from the start of the order
    assert shard_positions(10, 3, 4, pad=False).tolist() == [3, 7]
    assert [shard_size(10, r, 4, False) for r in range(4)] == [3, 3, 2, 2]
    assert [shard_size(10, r, 4, True) for r in range(4)] == [3, 3, 3, 3]
    assert shard_positions(10, 0, 1, pad=True).tolist() == list(range(10))
    every = np.concatenate([shard_positions(10, r, 4, pad=False) for r in range(4)])
    assert sorted(every.tolist()) == list(range(10))


@pytest.mark.parametrize("rank,world,msg", [
    (0, 0, r"world size must be an integer >= 1, got 0"),
    (0, True, r"world size must be an integer >= 1, got True"),
    (0, 2.0, r"world size must be an integer >= 1, got 2.0"),
    (2, 2, r"rank must be an integer in \[0, 2\), got 2"),
    (-1, 2, r"rank must be an integer in \[0, 2\), got -1"),
    (False, 2, r"rank must be an integer in \[0, 2\), got False"),
    ("1", 2, r"rank must be an integer in \[0, 2\), got '1'"),
])
def test_bad_rank_or_world_size_is_named(rank, world, msg):
    with pytest.raises(ConfigError, match=msg):
        check_shard(rank, world)


# --- Preprocessor.shard ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 3, 4])
def test_step_k_of_all_ranks_is_step_k_of_one_process(ds, world):
    epoch = 3
    with Preprocessor(settings(ds), TransferStation(world * B, SHAPE)) as pre:
        whole = {t: batches(pre, epoch, t) for t in (True, False)}
    for train in (True, False):
        ref = whole[train]
        parts = [sharded(ds, r, world, epoch, train) for r in range(world)]
        data = np.concatenate([d for d, _ in ref])
        labels = np.concatenate([lab for _, lab in ref])
        n = len(labels)
        assert n == (N_TRAIN if train else N_VAL)
        # one process's epoch, extended by wrapping as the rule pads it (training only)
        ext = np.arange(-(-n // world) * world if train else n) % n
        for r, p in enumerate(parts):
            if train:  # padded: every rank runs the steps of the one process
                assert len(p) == len(ref)
            mine = np.concatenate([d for d, _ in p])
            assert mine.tobytes() == data[ext[r::world]].tobytes(), f"rank {r}"
            assert np.array_equal(np.concatenate([lab for _, lab in p]), labels[ext[r::world]])
        # step k: the union over the ranks is the one process's step k (plus the padding at the last step)
        for k, (d, lab) in enumerate(ref):
            got_d = np.concatenate([p[k][0] for p in parts if k < len(p)])
            got_l = np.concatenate([p[k][1] for p in parts if k < len(p)])
            if k < len(ref) - 1 or not train:
                assert sorted(got_l.tolist()) == sorted(lab.tolist())
                assert sorted(x.tobytes() for x in got_d) == sorted(x.tobytes() for x in d)
            else:
                pad = ext[n:]
                assert len(got_l) == len(lab) + len(pad)
                assert sorted(got_l.tolist()) == sorted(lab.tolist() + labels[pad].tolist())
    # validation: not padded, each sample seen by exactly one rank
    assert [sum(len(lab) for _, lab in sharded(ds, r, world, 0, False)) for r in range(world)] == \
        [shard_size(N_VAL, r, world, False) for r in range(world)]


def test_plan_and_order_describe_the_rank(ds):
    with Preprocessor(settings(ds), TransferStation(B, SHAPE)) as pre:
        whole = pre.epoch_order(2)
        pre.shard(3, 4)
        assert (pre.rank, pre.world_size) == (3, 4)
        np.testing.assert_array_equal(pre.epoch_order(2), whole[shard_positions(N_TRAIN, 3, 4, pad=True)])
        np.testing.assert_array_equal(pre.epoch_order(2, False), np.arange(3, N_VAL, 4))
        p = pre.plan(True)
        assert (p.num_samples, p.per_rank, p.num_batches, p.last_batch_size) == (76, 76, 10, 4)
        p = pre.plan(False)
        assert (p.num_samples, p.per_rank, p.num_batches, p.last_batch_size) == (25, 25, 4, 1)
        pre.shard(0, 1)  # whole epochs again
        np.testing.assert_array_equal(pre.epoch_order(2), whole)
        assert pre.plan(True).num_samples == N_TRAIN


def test_a_ranks_epoch_is_deterministic(ds):
    a = sharded(ds, 1, 3, 5, True, workers=1)
    b = sharded(ds, 1, 3, 5, True, workers=3)
    c = sharded(ds, 1, 3, 6, True)
    assert [x[0].tobytes() for x in a] == [x[0].tobytes() for x in b]
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert [x[0].tobytes() for x in a] != [x[0].tobytes() for x in c]  # another epoch: another shuffle


def test_drop_last_applies_to_the_ranks_count(ds):
    # rank 3 of 4 has ceil(301 / 4) = 76 training samples: 9 whole batches of 8, the last 4 dropped
    full = sharded(ds, 3, 4, 0, True)
    dropped = sharded(ds, 3, 4, 0, True, drop_last=True)
    assert [len(lab) for _, lab in dropped] == [B] * 9
    assert all(x[0].tobytes() == y[0].tobytes() for x, y in zip(dropped, full))
    # validation keeps every sample of the rank
    assert [len(lab) for _, lab in sharded(ds, 3, 4, 0, False, drop_last=True)] == [8, 8, 8, 1]


def test_cpvs_caches_the_ranks_validation_samples(mnist_val):
    images = mnist_val.images[:60].copy()
    ds = ArrayDataset((images[:20], np.zeros(20)), (images, np.arange(60)))
    # a deterministic val chain: CPVS caches no random one (test_preprocessor.py)
    with Preprocessor(settings(ds, val_transforms=[Pad(1), CenterCrop(28)]), TransferStation(B, SHAPE)) as pre:
        pre.shard(1, 3)
        first = batches(pre, 0, False)
        assert pre.cpvs_ready and sum(len(lab) for _, lab in first) == 20
        images[:] = 0  # ArrayDataset keeps the array: the cache, not the images, feeds the later passes
        again = batches(pre, 1, False)
        assert [x[0].tobytes() for x in first] == [x[0].tobytes() for x in again]
        pre.shard(2, 3)  # another share: the cache is refilled from the (now black) images
        assert not pre.cpvs_ready
        other = batches(pre, 2, False)
        assert np.concatenate([lab for _, lab in other]).tolist() == list(range(2, 60, 3))
        assert pre.cpvs_ready and len({x.tobytes() for d, _ in other for x in d}) == 1


def test_a_station_of_another_batch_after_shard(ds):
    ref = sharded(ds, 0, 2, 1, True)
    with Preprocessor(settings(ds), TransferStation(2 * B, SHAPE, "float16")) as pre:
        pre.shard(0, 2)
        with pytest.raises(ConfigError, match="differs .* in sample shape or dtype"):
            pre.replace_stations(TransferStation(B, SHAPE, "float32"))
        st = TransferStation(B, SHAPE, "float16")
        pre.replace_stations(st)
        assert pre.plan().batch_size == B
        got = batches(pre, 1, True)
    assert len(got) == len(ref)
    for (d, lab), (rd, rl) in zip(got, ref):
        np.testing.assert_array_equal(lab, rl)
        np.testing.assert_allclose(d, rd, atol=2e-3)  # float16 of the same samples


def test_shard_errors(ds, mnist_val):
    with Preprocessor(settings(ds), TransferStation(B, SHAPE)) as pre:
        run = pre.epoch(0)
        with pytest.raises(PhaseError, match="shard\\(\\) during an epoch; close the running epoch first"):
            pre.shard(0, 2)
        with pytest.raises(PhaseError, match="replace_stations\\(\\) during an epoch"):
            pre.replace_stations(TransferStation(B, SHAPE))
        run.close()
        with pytest.raises(ConfigError, match=r"rank must be an integer in \[0, 4\), got 4"):
            pre.shard(4, 4)
        with pytest.raises(ConfigError, match="world size must be an integer >= 1, got 0"):
            pre.shard(0, 0)
        assert (pre.rank, pre.world_size) == (0, 1)  # a refused shard changes nothing
        pre.shard(1, 2)
    with pytest.raises(PhaseError, match="closed"):
        pre.shard(0, 2)
    small = ArrayDataset((mnist_val.images[:10], mnist_val.labels[:10]), (mnist_val.images[:3], mnist_val.labels[:3]))
    with Preprocessor(settings(small), TransferStation(2, SHAPE)) as pre:
        with pytest.raises(ConfigError, match="the validation split has 3 samples, fewer than the 4 ranks"):
            pre.shard(0, 4)
        pre.shard(2, 3)
        assert sum(len(lab) for _, lab in batches(pre, 0, False)) == 1
    with Preprocessor(settings(ds), [TransferStation(B, SHAPE) for _ in range(2)]) as pre:
        with pytest.raises(ConfigError, match="shard\\(\\) with world size 2 needs one TransferStation .*got 2"):
            pre.shard(0, 2)
        pre.shard(0, 1)  # whole epochs: any number of stations
        with pytest.raises(ConfigError, match="all TransferStations must match"):
            pre.replace_stations([TransferStation(B, SHAPE), TransferStation(2 * B, SHAPE)])
