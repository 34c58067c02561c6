"""The Preprocessor end to end: worker-count independence, the documented sample placement and seeds,
multi-device stations, CPVS, externally supplied buffers, and errors reaching the consumer."""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, PhaseError, ShapeError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    ColorJitter,
    Compose,
    EpochCancelled,
    EpochPlan,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandomCrop,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    TransferStation,
    shuffle_order,
)

MNIST_CHAIN = [Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomScale(0.8, 1.2), RandomErasing(0.5)]
RGB_CHAIN = [RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomErasing(0.5)]


@pytest.fixture(scope="module")
def mnist_ds(mnist_val):
    return ArrayDataset(
        (mnist_val.images[:1200], mnist_val.labels[:1200]), (mnist_val.images[1200:1500], mnist_val.labels[1200:1500])
    )


@pytest.fixture(scope="module")
def ragged_ds():
    r = np.random.default_rng(7)
    imgs = [
        r.integers(0, 256, (int(r.integers(20, 60)), int(r.integers(20, 60)), 3), dtype=np.uint8) for _ in range(300)
    ]
    return ArrayDataset((imgs, r.integers(0, 10, 300)), (imgs[:50], np.arange(50)))


def settings(ds, chain, workers=2, norm=NormMode.MNIST, **kw) -> PreprocessorSettings:
    s = (
        PreprocessorSettings()
        .dataset(ds)
        .preprocess_workers(workers)
        .normalization(norm)
        .train_transforms(*chain)
        .seed(11)
    )
    for k, v in kw.items():
        getattr(s, k)(*v) if isinstance(v, tuple) else getattr(s, k)(v)
    return s


def collect(pre: Preprocessor, epoch: int, train: bool = True, rank: int = 0):
    st = pre.stations[rank]
    data, labels = [], []
    with pre.epoch(epoch, train) as run:
        for b in run.batches(rank):
            data.append(b.valid_data.copy())
            labels.append(b.valid_labels.copy())
    return np.concatenate(data), np.concatenate(labels), [len(x) for x in labels], st


def run_epochs(s, shape, dtype, batch, epochs=(0, 1), train=True):
    st = TransferStation(batch, shape, dtype)
    with Preprocessor(s, st) as pre:
        return [collect(pre, e, train)[:2] for e in epochs]


def test_worker_counts_1_2_7_give_byte_identical_epochs(mnist_ds):
    outs = [run_epochs(settings(mnist_ds, MNIST_CHAIN, w), (28, 28, 1), "float32", 100) for w in (1, 2, 7)]
    for other in outs[1:]:
        for (d0, l0), (d1, l1) in zip(outs[0], other):
            assert d0.tobytes() == d1.tobytes() and np.array_equal(l0, l1)
    (d0, l0), (d1, l1) = outs[0]
    assert not np.array_equal(d0, d1)  # epochs differ
    assert sorted(l0.tolist()) == sorted(l1.tolist())


def test_static_and_claimed_assignment_write_the_same_bytes(mnist_ds):
    from tr.data import _native

    assert not _native.static_assignment()  # workers claim items by default
    claimed = run_epochs(settings(mnist_ds, MNIST_CHAIN, 3), (28, 28, 1), "float32", 64)
    _native.set_static_assignment(True)
    try:
        fixed = run_epochs(settings(mnist_ds, MNIST_CHAIN, 3), (28, 28, 1), "float32", 64)
    finally:
        _native.set_static_assignment(False)
    for (d0, l0), (d1, l1) in zip(claimed, fixed):
        assert d0.tobytes() == d1.tobytes() and np.array_equal(l0, l1)


def test_epoch_times_account_for_every_sample(mnist_ds):
    st = TransferStation(100, (28, 28, 1), "float32")
    with Preprocessor(settings(mnist_ds, MNIST_CHAIN, 3), st) as pre:
        t0 = time.perf_counter()
        run = pre.epoch(0)
        with pytest.raises(PhaseError, match="still running"):
            run.times()  # batch 0 and 1 fill; the workers wait for a release
        for _b in run.batches():
            pass
        run.close()
        wall_s = time.perf_counter() - t0
        t = run.times()
        assert t.workers == 3 and sum(t.items) == 1200
        # workers claim items, so on a busy machine one may run none: only those that ran some have worked
        assert all((w > 0) == (n > 0) for w, n in zip(t.work_s, t.items)) and all(w >= 0 for w in t.wait_s)
        assert len(t.consumer_wait_s) == 1 and t.consumer_wait_s[0] >= 0
        assert 0 < t.busy_fraction(wall_s) <= 1  # each worker's work lies within the epoch's wall time
        pre.epoch(1).close()
        with pytest.raises(PhaseError, match="later epoch"):
            run.times()


def test_worker_counts_ragged_rgb_fp16_padded(ragged_ds):
    outs = []
    for w in (1, 2, 7):
        s = settings(ragged_ds, RGB_CHAIN, w, NormMode.IMAGENET, pad_channels_to=4, val_transforms=(CenterCrop(24),))
        outs.append(run_epochs(s, (24, 24, 4), "float16", 32, epochs=(3,)))
    for o in outs[1:]:
        assert o[0][0].tobytes() == outs[0][0][0].tobytes()
    assert (outs[0][0][0][..., 3] == 0).all()


def test_each_sample_is_the_compose_of_its_dataset_image(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2)
    data, labels = run_epochs(s, (28, 28, 1), "float32", 128, epochs=(2,))[0]
    split = mnist_ds.load("train")
    order = shuffle_order(len(split), 11, 2)
    np.testing.assert_array_equal(labels, split.labels[order])
    chain = Compose(MNIST_CHAIN, NormMode.MNIST)
    for p in (0, 1, 127, 128, 555, 1199):
        i = int(order[p])
        np.testing.assert_array_equal(data[p], chain(split.images[i], seed=11, epoch=2, index=i))


def test_validation_is_in_order_and_uses_val_transforms(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2, val_transforms=(RandomCrop(28, padding=2),))
    st = TransferStation(64, (28, 28, 1), "float32")
    with Preprocessor(s, st) as pre:
        data, labels, sizes, _ = collect(pre, 0, train=False)
    val = mnist_ds.load("val")
    np.testing.assert_array_equal(labels, val.labels)
    assert sizes == [64] * 4 + [44]
    chain = Compose([RandomCrop(28, padding=2)], NormMode.MNIST)
    np.testing.assert_array_equal(data[17], chain(val.images[17], seed=11, epoch=0, index=17, train=False))


def test_epoch_plan():
    assert EpochPlan.make(1000, 1, 128, False) == EpochPlan(1000, 1, 128, 1000, 8, 104)
    assert EpochPlan.make(1000, 1, 128, True) == EpochPlan(1000, 1, 128, 896, 7, 128)
    assert EpochPlan.make(1001, 2, 100, False) == EpochPlan(1001, 2, 100, 501, 6, 1)
    assert EpochPlan.make(256, 1, 128, False).last_batch_size == 128


def test_drop_last_applies_to_training_only(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2, drop_last=True)
    st = TransferStation(500, (28, 28, 1), "float32")
    with Preprocessor(s, st) as pre:
        assert collect(pre, 0)[2] == [500, 500]
        assert collect(pre, 0, train=False)[2] == [300]


def test_two_devices_split_the_epoch(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 3)
    sts = [TransferStation(50, (28, 28, 1), "float32") for _ in range(2)]
    with Preprocessor(s, sts) as pre:
        results: dict[int, tuple] = {}

        def consume(rank, run):
            results[rank] = [b.valid_labels.copy() for b in run.batches(rank)]

        run = pre.epoch(1)
        threads = [threading.Thread(target=consume, args=(r, run)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.close()
    labels = mnist_ds.load("train").labels[shuffle_order(1200, 11, 1)]
    for r in range(2):
        np.testing.assert_array_equal(np.concatenate(results[r]), labels[r::2])


def test_cpvs_replays_the_first_validation_pass(mnist_ds):
    images = mnist_ds.load("val").images.copy()
    ds = ArrayDataset((images[:100], np.zeros(100)), (images, np.zeros(300)))
    s = settings(ds, MNIST_CHAIN, 2, val_transforms=(Pad(1), CenterCrop(28)))
    st = TransferStation(128, (28, 28, 1), "float32")
    with Preprocessor(s, st) as pre:
        first = collect(pre, 0, train=False)[0]
        assert pre.cpvs_ready
        ds.load("val").images[:] = 0  # the cache, not the images, feeds later passes
        again = collect(pre, 1, train=False)[0]
    np.testing.assert_array_equal(first, again)
    s2 = settings(ds, MNIST_CHAIN, 2, cpvs=False)
    with Preprocessor(s2, TransferStation(128, (28, 28, 1), "float32")) as pre:
        collect(pre, 0, train=False)
        assert not pre.cpvs_ready


def test_cpvs_never_freezes_random_val_transforms(mnist_ds):
    """The default caches deterministic val chains only; cpvs(True) with a random one is refused at commit (it
    used to cache the first pass's draws and log a warning)."""
    images = mnist_ds.load("val").images[:64].copy()
    ds = ArrayDataset((images, np.zeros(64)), (images, np.zeros(64)))
    s = settings(ds, MNIST_CHAIN, 2, val_transforms=(Pad(1), RandomCrop(28)))
    with Preprocessor(s, TransferStation(32, (28, 28, 1), "float32")) as pre:
        first, again = collect(pre, 0, train=False)[0], collect(pre, 1, train=False)[0]
        assert not pre.cpvs_ready and not np.array_equal(first, again)  # each pass draws its own crops
    with pytest.raises(ConfigError, match=r"cpvs\(True\) replays the first validation pass, but the val transforms "
                                          r"\['RandomCrop'\] are random"):
        settings(ds, MNIST_CHAIN, 2, val_transforms=(Pad(1), RandomCrop(28)), cpvs=True).commit()
    assert settings(ds, MNIST_CHAIN, 2, val_transforms=(Pad(1), CenterCrop(28)), cpvs=True).commit().frozen


@pytest.mark.parametrize("kind", ["bytearray", "mmap", "arrays"])
def test_externally_supplied_buffers(kind, mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2)
    lay = TransferStation.layout(64, (28, 28, 1), "float16")
    assert lay.data_offset % 256 == 0 and lay.zone_bytes % 256 == 0
    if kind == "bytearray":
        bufs = [bytearray(lay.zone_bytes), bytearray(lay.zone_bytes + 100)]
    elif kind == "mmap":
        bufs = [mmap.mmap(-1, lay.zone_bytes), mmap.mmap(-1, lay.zone_bytes)]
    else:
        bufs = [(np.zeros(64, np.int32), np.zeros((64, 28, 28, 1), np.float16)) for _ in range(2)]
    st = TransferStation(64, (28, 28, 1), "float16", buffers=bufs)
    ref = TransferStation(64, (28, 28, 1), "float16")
    with Preprocessor(s, st) as pre, Preprocessor(s, ref) as pre_ref:
        a, b = collect(pre, 0), collect(pre_ref, 0)
    assert a[0].tobytes() == b[0].tobytes() and np.array_equal(a[1], b[1])
    if kind == "bytearray":  # the data really lands in the caller's memory
        labels, data = st.zone(0)
        assert np.shares_memory(np.frombuffer(bufs[0], np.uint8), data)


def test_a_failing_sample_reaches_the_consumer(ragged_ds):
    # some images are smaller than 30x30
    s = settings(ragged_ds, [RandomCrop(30)], 2, NormMode.IMAGENET, val_transforms=(CenterCrop(30),))
    st = TransferStation(16, (30, 30, 3), "float32")
    with Preprocessor(s, st) as pre:
        with pytest.raises(
            DataError, match=r"sample \d+: RandomCrop.*: the image is \d+x\d+, smaller than the crop 30x30"
        ):
            collect(pre, 0)
        # the next epoch starts cleanly (and fails the same way: the data did not change)
        with pytest.raises(DataError):
            collect(pre, 1)


def test_station_shape_must_match_the_transforms(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 1)
    with pytest.raises(ShapeError, match=r"\(28, 28, 1\) samples, but the TransferStation holds \(32, 32, 1\)"):
        Preprocessor(s, TransferStation(8, (32, 32, 1)))


def test_acquire_release_protocol(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2)
    st = TransferStation(100, (28, 28, 1), "float32")
    with Preprocessor(s, st) as pre:
        run = pre.epoch(0)
        assert run.num_batches == 12 and st.num_batches == 12
        with pytest.raises(ConfigError, match="batch index 12 is out of range: this epoch has 12 batches"):
            st.acquire(12)
        b0, b1 = st.acquire(0), st.acquire(1)
        assert (b0.zone, b1.zone, b0.size) == (0, 1, 100)
        with pytest.raises(PhaseError, match="batch 0 is already acquired"):
            st.acquire(0)
        with pytest.raises(PhaseError, match="still holds batch 0: acquire and release batch 0 first"):
            st.acquire(2)
        with pytest.raises(PhaseError, match="batch 3 is not acquired"):
            st.release(3)
        st.release(0)
        with pytest.raises(PhaseError, match="batch 0 was already released"):
            st.acquire(0)
        with st.batch(2) as b2:
            assert b2.zone == 0
        st.release(1)
        run.close()  # stops the workers half-way
        with pytest.raises(EpochCancelled):
            st.acquire(3)
        # a fresh epoch after a cancelled one is complete and equal to a clean run
        a = collect(pre, 5)
    with Preprocessor(s, TransferStation(100, (28, 28, 1), "float32")) as pre2:
        b = collect(pre2, 5)
    assert a[0].tobytes() == b[0].tobytes()


def test_abandoned_epoch_is_cancelled_by_the_next(mnist_ds):
    s = settings(mnist_ds, MNIST_CHAIN, 2)
    st = TransferStation(100, (28, 28, 1), "float32")
    with Preprocessor(s, st) as pre:
        run = pre.epoch(0)
        st.release(st.acquire(0).index)
        st.acquire(1)  # still held
        with pytest.raises(PhaseError, match="still acquired"):
            pre.epoch(1)
        st.release(1)
        assert len(collect(pre, 1)[1]) == 1200
        assert run.closed
