"""A resident data set's order and batches (tr.graph.resident).

shuffle_order computes tr.core.philox.shuffle_indices' Fisher-Yates permutation as the CUDA kernel does, by
deterministic reservations (Shun et al., SODA 2015): every pending swap i (i = n-1 .. 1, with j = r0(seed, i)
% (i + 1)) reserves its two positions with priority i (a max), and a swap that holds both runs; the others
wait for the next round. The swaps that run in a round touch disjoint positions, and each position sees its
swaps in the sequential order, so the result is the sequential permutation (tests: test_cpu_resident.py),
in O(log n) rounds (35 for 60,000 samples).
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import resident as rules
from tr.core.philox import raw


def reserved_shuffle(n: int, seed: int) -> tuple[np.ndarray, int]:
    """(the permutation, the rounds it took)."""
    perm = np.arange(n, dtype=np.int64)
    if n < 2:
        return perm, 0
    i = np.arange(n, dtype=np.int64)
    js = raw(seed, 0, n)[:, 0].astype(np.int64) % (i + 1)
    pending = i[:0:-1]  # n-1 .. 1
    owner = np.full(n, -1, dtype=np.int64)
    rounds = 0
    while len(pending):
        rounds += 1
        np.maximum.at(owner, pending, pending)
        np.maximum.at(owner, js[pending], pending)
        runs = (owner[pending] == pending) & (owner[js[pending]] == pending)
        a, b = pending[runs], js[pending[runs]]
        perm[a], perm[b] = perm[b], perm[a].copy()
        owner[pending] = -1
        owner[js[pending]] = -1
        pending = pending[~runs]
    return perm, rounds


def _seed(key: np.ndarray) -> int:
    return int(np.ascontiguousarray(key).reshape(-1).view("<u8")[0])


@cpu_op("shuffle_order")
def shuffle_order(b: Binder) -> Step:
    n, shuffle = rules.shuffle_order(b)
    key, order, pos = b.flat("key"), b.flat("order"), b.flat("pos")

    def run() -> None:
        order[:] = reserved_shuffle(n, _seed(key))[0] if shuffle else np.arange(n)
        pos[0] = 0

    return run


@cpu_op("batch_select")
def batch_select(b: Binder) -> Step:
    n, rows, has_order, world, pad = rules.batch_select(b)
    order = b.flat("order") if has_order else None
    labels_all, pos, index, labels = b.flat("labels_all"), b.flat("pos"), b.flat("index"), b.flat("labels")
    rank = b.flat("rank")

    def run() -> None:
        p, r = int(pos[0]), int(rank[0])
        count = max(0, min(rows, rules.share(n, r, world, pad) - p))
        positions = (r + world * np.arange(p, p + count, dtype=np.int64)) % max(n, 1)
        idx = order[positions] if order is not None else positions.astype(np.int32)
        index[:count] = idx
        labels[:count] = labels_all[idx]
        pos[0] = p + rows

    return run


@cpu_op("batch_restart")
def batch_restart(b: Binder) -> Step:
    rules.batch_restart(b)
    pos = b.flat("pos")

    def run() -> None:
        pos[0] = 0

    return run
