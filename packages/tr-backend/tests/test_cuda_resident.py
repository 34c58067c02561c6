"""The resident family on CUDA (csrc/ops/resident.cu) against the CPU backend: the epoch order by reservations
in one block is the CPU's (and so tr.core.philox.shuffle_indices') to the byte, for small, MNIST-sized and
ImageNet-sized sets; the batch selection matches; relaunches give the same bytes. Prints the shuffle's time."""

import time

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin

from tr.core.philox import derive_seed

pytestmark = pytest.mark.gpu


def _twin(n: int, rows: int) -> Twin:
    tw = Twin()
    for name, shape in (("key", (1, 1, 1, 2)), ("order", (n, 1, 1, 1)), ("pos", (1, 1, 1, 1)),
                        ("labels_all", (n, 1, 1, 1)), ("index", (rows, 1, 1, 1)), ("labels", (rows,)),
                        ("rank", (1, 1, 1, 1))):
        tw.add(name, shape, "int32")
    tw.allocate()
    tw.write("rank", np.zeros(1, np.int32))
    return tw


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 60000, 1281167])
def test_epoch_order_matches_the_cpu(n):
    tw = _twin(n, 8)
    for seed in (123, derive_seed(123, 3, 5), 2**64 - 1):
        tw.write("key", np.array([seed], dtype="<u8").view(np.int32))
        tw.write("pos", np.array([5], np.int32))
        _, g = tw.run(op("shuffle_order", key=tw["key"], order=tw["order"], pos=tw["pos"], shuffle=True),
                      poison=("order",))
        cpu, gpu = tw.both("order")
        assert cpu.tobytes() == gpu.tobytes(), f"n={n} seed={seed}"
        assert tw.gpu.read(tw["pos"]).ravel()[0] == 0
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        tw.gpu.launch(g)
    tw.gpu.synchronize()
    print(f"\nshuffle_order n={n}: {(time.perf_counter() - t0) / reps * 1e6:.0f} us a launch ({g.ops[0].info})")
    again = set()
    for _ in range(2):
        tw.gpu.launch(g)
        tw.gpu.synchronize()
        again.add(tw.gpu.read(tw["order"]).tobytes())
    assert again == {cpu.tobytes()}


@pytest.mark.parametrize("world,rank,pad", [(1, 0, True), (3, 2, True), (3, 1, False), (8, 7, False)])
def test_batches_match_the_cpu(world, rank, pad):
    n, rows = 1000, 96
    tw = _twin(n, rows)
    tw.write("rank", np.array([rank], np.int32))
    tw.write("labels_all", (np.arange(n) * 7 % 10).astype(np.int32))
    tw.write("key", np.array([99], dtype="<u8").view(np.int32))
    tw.run(op("shuffle_order", key=tw["key"], order=tw["order"], pos=tw["pos"], shuffle=True))
    call = op("batch_select", order=tw["order"], labels_all=tw["labels_all"], rank=tw["rank"], pos=tw["pos"],
              index=tw["index"], labels=tw["labels"], world=world, pad=pad)
    gc, gg = tw.cpu.capture("b", [call]), tw.gpu.capture("b", [call])
    for _ in range(-(-n // (rows * world)) + 1):  # one past the end: nothing written, pos still advances
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
        tw.gpu.synchronize()
        for name in ("index", "labels", "pos"):
            cpu, gpu = tw.both(name)
            assert cpu.tobytes() == gpu.tobytes(), name
    tw.run(op("batch_restart", pos=tw["pos"]))
    assert tw.gpu.read(tw["pos"]).ravel()[0] == 0
