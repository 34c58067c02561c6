"""GlooCollective: mean all-reduce, broadcast (FP16, BF16 bit patterns, bytes) and barrier over real gloo groups
(one thread per rank, over 127.0.0.1), range_allreduce_mean through CPU backends, and the one-rank / no-torch
cases."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pytest
from backend_testkit import DEEP_CONV, RESULT, SimpleArena, op, run

from tr.backend.base import Collective
from tr.backend.cpu.collective import GlooCollective
from tr.core.bf16 import bf16_bits
from tr.core.errors import BackendError, ConfigError
from tr.core.memory import Region, Role, Span


def _ranks(world: int, body: Callable[[GlooCollective], object]) -> list[object]:
    """Run ``body(collective)`` on ``world`` threads, one per rank of a fresh gloo group; results by rank."""
    dist = pytest.importorskip("torch.distributed")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    master = dist.TCPStore("127.0.0.1", port, None, True, timeout=timedelta(seconds=20), wait_for_workers=False,
                           master_listen_fd=sock.detach())
    out: list[object] = [None] * world

    def rank(r: int) -> None:
        store = master if r == 0 else dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=20))
        coll = GlooCollective(store, r, world, timeout_s=20, hostname="127.0.0.1")
        try:
            out[r] = body(coll)
        except Exception as e:  # reported by the main thread
            out[r] = e
        finally:
            coll.close()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r, v in enumerate(out):
        if isinstance(v, Exception):
            raise AssertionError(f"rank {r} failed") from v
    return out


def test_allreduce_mean_broadcast_barrier_three_ranks():
    def body(c: GlooCollective):
        assert isinstance(c, Collective) and c.world_size == 3
        x = np.arange(5, dtype=np.float32) * (c.rank + 1)  # mean over ranks 1, 2, 3 -> 2
        c.allreduce_mean(x)
        h = np.full((2, 3), c.rank, np.float16)
        bf = bf16_bits(np.full((3, 2), c.rank - 1.00390625, np.float32))  # BF16 travels as its bit patterns
        b = np.arange(7, dtype=np.uint8) + 10 * c.rank
        c.broadcast(h)
        c.broadcast(bf)
        c.broadcast(b)
        c.barrier()
        return x, h, bf, b

    for x, h, bf, b in _ranks(3, body):
        np.testing.assert_array_equal(x, np.arange(5, dtype=np.float32) * 2)
        np.testing.assert_array_equal(h, np.zeros((2, 3), np.float16))
        np.testing.assert_array_equal(bf, np.full((3, 2), 0xBF80, np.uint16))  # rank 0's -1.00390625 -> -1.0
        np.testing.assert_array_equal(b, np.arange(7, dtype=np.uint8))


def test_every_rank_gets_the_same_bits():
    """What keeps data-parallel weights bitwise equal across ranks; the mean is close to float64's."""
    data = np.random.default_rng(3).standard_normal((3, 1000)).astype(np.float32)

    def body(c: GlooCollective):
        x = data[c.rank].copy()
        c.allreduce_mean(x)
        return x

    out = _ranks(3, body)
    for x in out[1:]:
        np.testing.assert_array_equal(x, out[0])
    np.testing.assert_allclose(out[0], data.astype(np.float64).mean(0), rtol=1e-6, atol=1e-6)


def test_bad_buffers_are_named():
    def body(c: GlooCollective):
        errs = []
        for bad in (np.zeros(4, np.float64), np.zeros((4, 4), np.float32)[:, 1]):
            with pytest.raises(BackendError) as e:
                c.allreduce_mean(bad)
            errs.append(str(e.value))
        return errs

    for errs in _ranks(2, body):
        assert "takes a float32 buffer, got float64" in errs[0]
        assert "contiguous, writable" in errs[1]


def test_range_allreduce_mean_through_cpu_backends():
    """The gradient bucket and the step result reach the mean on every rank; the one-rank graph runs nothing."""
    def body(c: GlooCollective):
        a = SimpleArena()
        g = a.add("g", (2, 1, 1, 3), region=Region(Role.GRAD, DEEP_CONV))
        res = a.add("result", (1, 1, 1, 3), region=RESULT)
        be = a.allocate(collective=c)
        be.write(g, np.arange(6, dtype=np.float32) + 6 * c.rank)
        be.write(res, [c.rank, 1.0, 2.0 * c.rank])
        run(be, op("range_allreduce_mean", span=Span.of(Role.GRAD, early=True) + Span.of(Role.RESULT)))
        return be.read(g).ravel(), be.read(res).ravel()

    for g, res in _ranks(2, body):
        np.testing.assert_array_equal(g, np.arange(6, dtype=np.float32) + 3)
        np.testing.assert_array_equal(res, [0.5, 1.0, 1.0])


def test_one_rank_needs_no_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    c = GlooCollective(None, 0, 1)
    x = np.ones(3, np.float32)
    c.allreduce_mean(x)
    c.broadcast(x)
    c.barrier()
    np.testing.assert_array_equal(x, 1)
    c.close()
    with pytest.raises(BackendError, match="allreduce_mean on a closed collective"):
        c.allreduce_mean(x)  # a skipped all-reduce would let the ranks drift apart silently
    with pytest.raises(BackendError, match="over 2 ranks needs gloo from torch.distributed.*install torch"):
        GlooCollective(None, 0, 2)


@pytest.mark.parametrize("kw,msg", [
    ({"rank": 2, "world_size": 2}, r"rank must be an integer in \[0, 2\), got 2"),
    ({"rank": 0, "world_size": 0}, "world size must be an integer >= 1, got 0"),
    ({"rank": 0, "world_size": 1, "timeout_s": 0}, "timeout_s must be > 0 seconds, got 0"),
])
def test_bad_arguments(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        GlooCollective(None, **kw)


def test_store_must_be_a_torch_store():
    pytest.importorskip("torch.distributed")
    with pytest.raises(BackendError, match="needs a torch.distributed.Store.*got dict"):
        GlooCollective({}, 0, 2)
