"""The exchange a data-parallel save makes (tr.task.distributed.Group.gather/share, tr.task.checkpoint.together),
two ranks played in one process over an in-memory store: a rank that never arrives is a BackendError naming what
and which rank within the operation timeout (was: the store's bootstrap timeout and an internal key), and rank
0's failure is raised on every rank with its own error class. The real two-process runs are in
tests-integration/test_distributed_resume.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tr.core.errors import BackendError, DataError
from tr.task import checkpoint
from tr.task.distributed import DistEnv, Group


class MemoryStore:
    """The store calls a Group makes, over a dict; nothing waits (a missing key is missing now)."""

    def __init__(self) -> None:
        self.kv: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.kv[key] = value

    def get(self, key: str, timeout_s: float | None = None) -> bytes:
        if key not in self.kv:
            raise BackendError(f"no rank set {key!r} within {timeout_s} s")
        return self.kv[key]

    def missing(self, keys: list[str], timeout_s: float) -> list[int]:
        return [i for i, k in enumerate(keys) if k not in self.kv]


def _ranks(timeout_s: float = 3.0) -> tuple[Group, Group]:
    store, coll = MemoryStore(), SimpleNamespace(timeout_s=timeout_s)
    return tuple(Group(DistEnv(r, 2), store, coll, 300.0) for r in (0, 1))  # type: ignore[return-value]


def test_a_rank_missing_at_a_gather_is_named_within_the_operation_timeout():
    main, _other = _ranks()
    with pytest.raises(BackendError, match=r"rank 0: the checkpoint save: rank\(s\) \[1\] of 2 did not arrive within "
                                           r"3 s \(TR_DIST_OP_TIMEOUT\)"):
        main.gather("the checkpoint save", b"mine")


def test_a_gather_gives_rank_0_every_value_in_rank_order():
    main, other = _ranks()
    assert other.gather("x", b"one") is None
    assert main.gather("x", b"zero") == [b"zero", b"one"]


def test_rank_0_missing_at_a_share_is_named():
    _main, other = _ranks(timeout_s=2.5)
    with pytest.raises(BackendError, match=r"rank 1: the outcome: no answer from rank 0 \(waited up to 2.5 s, "
                                           r"TR_DIST_OP_TIMEOUT; missing ranks: \[0\]\)"):
        other.share("the outcome", None)


def test_rank_0_waits_until_every_rank_took_its_share():
    main, _ = _ranks()
    with pytest.raises(BackendError, match=r"rank\(s\) \[1\] of 2 did not take rank 0's answer within 3 s"):
        main.share("best", b"yes")  # rank 1 has not read it (yet): rank 0 must not close the store under it
    main, other = _ranks()
    main.store.set("tr/share/1/best/read/1", b"1")  # rank 1 will have read it
    assert main.share("best", b"yes") == b"yes" == other.share("best", None)


def test_rank_0s_failure_is_raised_on_every_rank():
    main, other = _ranks()

    def write() -> None:
        raise DataError("/ck: cannot save a checkpoint there: it is a file")

    with pytest.raises(DataError, match="it is a file"):
        checkpoint.together(SimpleNamespace(group=main), write)
    with pytest.raises(DataError, match="rank 1: rank 0 failed: /ck: cannot save a checkpoint there: it is a file"):
        checkpoint.together(SimpleNamespace(group=other), lambda: None)  # was: waited for a collective, then died


def test_a_successful_exchange_returns_on_every_rank():
    main, other = _ranks()
    main.store.set("tr/share/1/the checkpoint's outcome on rank 0/read/1", b"1")  # rank 1 will have read it
    ran = []
    checkpoint.together(SimpleNamespace(group=main), lambda: ran.append(0))
    checkpoint.together(SimpleNamespace(group=other), lambda: ran.append(1))
    assert ran == [0, 1]
