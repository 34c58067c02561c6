"""shuffle_order / batch_select / batch_restart on the CPU backend: the reservation rounds give the sequential
Fisher-Yates permutation of tr.core.philox.shuffle_indices (hence tr.data's epoch order), and the batches walk
an epoch's order with its short last batch."""

import numpy as np
import pytest
from backend_testkit import SimpleArena, op, run

from tr.backend.cpu.ops.resident import reserved_shuffle
from tr.core.errors import BackendError
from tr.core.philox import derive_seed, shuffle_indices
from tr.data.seeds import shuffle_order as data_shuffle_order


@pytest.mark.parametrize("n", [1, 2, 3, 10, 257, 5000, 60000])
@pytest.mark.parametrize("seed", [0, 123, 2**64 - 1, derive_seed(7, 3, 11)])
def test_reservations_give_the_sequential_fisher_yates(n, seed):
    perm, rounds = reserved_shuffle(n, seed)
    assert np.array_equal(perm, shuffle_indices(n, seed))
    assert rounds <= 4 * max(1, int(np.log2(max(n, 2)))) + 8  # O(log n): 35 for 60,000


def _key(seed: int) -> np.ndarray:
    return np.array([seed], dtype="<u8").view(np.int32)


def _arena(n: int, rows: int):
    a = SimpleArena()
    t = {"key": a.add("key", (1, 1, 1, 2), "int32"), "order": a.add("order", (n, 1, 1, 1), "int32"),
         "pos": a.add("pos", (1, 1, 1, 1), "int32"), "labels_all": a.add("labels_all", (n, 1, 1, 1), "int32"),
         "index": a.add("index", (rows, 1, 1, 1), "int32"), "labels": a.add("labels", (rows,), "int32"),
         "rank": a.add("rank", (1, 1, 1, 1), "int32")}
    be = a.allocate()
    be.write(t["rank"], np.zeros(1, np.int32))
    return be, t


def test_an_epoch_of_batches_is_tr_datas_order():
    n, rows, seed, epoch = 1000, 64, 123, 4
    be, t = _arena(n, rows)
    labels = (np.arange(n) * 7 % 10).astype(np.int32)
    be.write(t["labels_all"], labels)
    be.write(t["pos"], np.array([99], np.int32))  # the op restarts the epoch
    be.write(t["key"], _key(derive_seed(seed, 3, epoch)))
    run(be, op("shuffle_order", key=t["key"], order=t["order"], pos=t["pos"], shuffle=True))
    want = data_shuffle_order(n, seed, epoch)
    assert np.array_equal(be.read(t["order"]).ravel(), want) and be.read(t["pos"]).ravel()[0] == 0
    step = be.capture("step", [op("batch_select", order=t["order"], labels_all=t["labels_all"], rank=t["rank"],
                                  pos=t["pos"], index=t["index"], labels=t["labels"])])
    seen = []
    for k in range(-(-n // rows)):
        be.write(t["index"], np.full(rows, -1, np.int32))
        be.launch(step)
        m = min(rows, n - k * rows)
        idx = be.read(t["index"]).ravel()
        assert np.array_equal(idx[:m], want[k * rows:k * rows + m]) and (idx[m:] == -1).all()
        assert np.array_equal(be.read(t["labels"]).ravel()[:m], labels[idx[:m]])
        seen.extend(idx[:m])
    assert sorted(seen) == list(range(n))
    run(be, op("batch_restart", pos=t["pos"]))
    assert be.read(t["pos"]).ravel()[0] == 0


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("n,world", [(1000, 3), (10, 4), (7, 7), (5, 8)])
def test_a_rank_takes_tr_datas_share(n, world, train):
    """Rank r of W walks the positions tr.data.sharding deals it (training padded, validation not): the same
    samples, in the same order, as tr.data.seeds.epoch_order for that rank."""
    from tr.data.seeds import epoch_order

    rows, seed, epoch = 16, 5, 2
    for rank in range(world):
        be, t = _arena(n, rows)
        be.write(t["rank"], np.array([rank], np.int32))
        be.write(t["labels_all"], np.arange(n, dtype=np.int32))
        be.write(t["key"], _key(derive_seed(seed, 3, epoch)))
        run(be, op("shuffle_order", key=t["key"], order=t["order"], pos=t["pos"], shuffle=train))
        want = epoch_order(n, seed, epoch, train, True, rank, world)
        got = []
        for _ in range(-(-len(want) // rows) + 1):
            be.write(t["index"], np.full(rows, -1, np.int32))
            run(be, op("batch_select", order=t["order"], labels_all=t["labels_all"], rank=t["rank"], pos=t["pos"],
                       index=t["index"], labels=t["labels"], world=world, pad=train))
            idx = be.read(t["index"]).ravel()
            got.extend(idx[idx >= 0])
        assert got == list(want), (rank, got[:8], list(want[:8]))


def test_unshuffled_order_and_validation_batches():
    n, rows = 10, 4
    be, t = _arena(n, rows)
    be.write(t["labels_all"], np.arange(n, dtype=np.int32) + 100)
    run(be, op("shuffle_order", key=t["key"], order=t["order"], pos=t["pos"], shuffle=False))
    assert np.array_equal(be.read(t["order"]).ravel(), np.arange(n))
    got = []
    for _ in range(3):  # no order: positions in turn (validation)
        run(be, op("batch_select", labels_all=t["labels_all"], rank=t["rank"], pos=t["pos"], index=t["index"],
                   labels=t["labels"], pad=False))
        got.append(be.read(t["labels"]).ravel().copy())
    assert got[0].tolist() == [100, 101, 102, 103] and got[2][:2].tolist() == [108, 109]


def test_rules_name_the_problem():
    a = SimpleArena()
    f = {name: a.add(name, shape, dt) for name, shape, dt in
         (("key", (1, 1, 1, 2), "int32"), ("order", (8, 1, 1, 1), "fp32"), ("pos", (1, 1, 1, 1), "int32"),
          ("key3", (1, 1, 1, 3), "int32"), ("order8", (8, 1, 1, 1), "int32"), ("index2", (2, 1, 1, 1), "int32"),
          ("labels4", (4,), "int32"), ("rank", (1, 1, 1, 1), "int32"))}
    be = a.allocate()
    with pytest.raises(BackendError, match="argument 'order' has dtype FP32; expected INT32"):
        be.capture("g", [op("shuffle_order", key=f["key"], order=f["order"], pos=f["pos"])])
    with pytest.raises(Exception, match="argument 'key' .* has 3 elements; expected 2"):
        be.capture("g", [op("shuffle_order", key=f["key3"], order=f["order8"], pos=f["pos"])])
    with pytest.raises(Exception, match="argument 'labels' .* has 4 elements; expected 2"):
        be.capture("g", [op("batch_select", labels_all=f["order8"], rank=f["rank"], pos=f["pos"], index=f["index2"],
                            labels=f["labels4"])])
