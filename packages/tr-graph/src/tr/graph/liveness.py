"""Liveness of pooled tensors over one step, in-place aliasing, and packing into per-region pools.

Pooled tensors (features, activation gradients, masks, saved BN statistics) only live inside one step's
compute chain: the training chain FIRST_FWD -> DEEP_FWD_BWD -> FIRST_BWD, or one inference
pass. Their live range is [first write, last access] over the timeline "training chain, then inference
chain" (the two never run at once, so inference tensors can reuse training memory entirely).

In-place: where the catalogue allows an output to share memory with an input (bn_bwd dx/x, act_bwd dx/dy,
dropout_bwd dx/dy, add_fwd y/a|b) and that input's buffer is not accessed after the op, the output joins
the input's buffer. Buffers whose live ranges overlap never overlap in bytes. Placement is first-fit (the
lowest offset free for the whole live range) in a few fixed orders (longest-lived first, largest first,
largest size x lifetime first), keeping the smallest pool: deterministic, and within a fraction of a
percent of the lower bound (the most bytes live at one time) on the example CNNs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tr.core.errors import CompileError
from tr.core.memory import Region
from tr.core.ops import op_def


@dataclass
class Buffer:
    keys: list[str]
    region: Region
    size: int
    start: int
    end: int
    offset: int = -1


@dataclass
class PoolPlan:
    offsets: dict[str, int] = field(default_factory=dict)  # key -> offset inside its region's pool
    extents: dict[Region, int] = field(default_factory=dict)  # pool bytes per region
    lower_bounds: dict[Region, int] = field(default_factory=dict)  # max bytes live at one time
    buffers: list[Buffer] = field(default_factory=list)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)


def live_ranges(timeline: Sequence, pooled: Mapping[str, object]) -> dict[str, list[int]]:
    """[first write, last access] op indices of every pooled key used in ``timeline``."""
    ranges: dict[str, list[int]] = {}
    for idx, op in enumerate(timeline):
        for a in op_def(op.op).args:
            if a.kind != "tensor":
                continue
            key = op.args.get(a.name)
            if key is None or key not in pooled:
                continue
            if a.role in ("in", "inout") and key not in ranges:
                raise CompileError(f"internal: {op.op} (op {idx}) reads {key} before anything writes it")
            r = ranges.setdefault(key, [idx, idx])
            r[1] = idx
    return ranges


def alias_inplace(timeline: Sequence, ranges: Mapping[str, list[int]], size: Mapping[str, int],
                  region: Mapping[str, Region]) -> dict[str, str]:
    """Union of in-place pairs; returns key -> representative key of its buffer."""
    parent = {k: k for k in ranges}
    end = {k: r[1] for k, r in ranges.items()}  # per representative: last access of the whole buffer

    def find(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for idx, op in enumerate(timeline):
        for out_name, in_name in op_def(op.op).inplace:
            o, i = op.args.get(out_name), op.args.get(in_name)
            if o is None or i is None or o == i or o not in ranges or i not in ranges:
                continue
            ri = find(i)
            if find(o) != o or ranges[o][0] != idx or end[ri] != idx:
                continue  # o existed before, or the input is still needed after this op
            if size[o] != size[ri] or region[o] != region[ri]:
                continue
            parent[o] = ri
            end[ri] = max(end[ri], ranges[o][1])
            break
    return {k: find(k) for k in ranges}


ORDERS = {  # placement orders tried; the smallest pool wins (ties: the first)
    "longest_first": lambda b: (-(b.end - b.start), -b.size),
    "largest_first": lambda b: (-b.size, b.start),
    "largest_area_first": lambda b: (-b.size * (b.end - b.start + 1), b.start),
}


def first_fit(buffers: Sequence[Buffer], order: Sequence[int]) -> list[int]:
    """Offsets placing buffers in ``order``, each at the lowest offset free during its whole live range."""
    start = np.array([b.start for b in buffers], dtype=np.int64)
    end = np.array([b.end for b in buffers], dtype=np.int64)
    size = np.array([b.size for b in buffers], dtype=np.int64)
    offs = np.zeros(len(buffers), dtype=np.int64)
    placed = np.zeros(len(buffers), dtype=bool)
    for j in order:
        busy = np.nonzero(placed & (start <= end[j]) & (end >= start[j]))[0]
        if busy.size:
            lo = offs[busy]
            k = np.argsort(lo, kind="stable")
            lo, hi = lo[k], lo[k] + size[busy][k]
            reach = np.maximum.accumulate(hi)  # highest end among the busy ranges up to each one
            before = np.concatenate(([0], reach[:-1]))  # first free byte before busy range i
            fits = np.nonzero(lo - before >= size[j])[0]
            offs[j] = before[fits[0]] if fits.size else reach[-1]
        placed[j] = True
    return [int(o) for o in offs]


def place(buffers: list[Buffer]) -> int:
    """Set every buffer's offset; returns the pool extent. Deterministic: fixed orders, ties by index."""
    best: tuple[int, list[int]] | None = None
    for key in ORDERS.values():
        order = sorted(range(len(buffers)), key=lambda j: (*key(buffers[j]), j))  # noqa: B023
        offs = first_fit(buffers, order)
        extent = max((o + b.size for o, b in zip(offs, buffers)), default=0)
        if best is None or extent < best[0]:
            best = (extent, offs)
    assert best is not None
    for b, o in zip(buffers, best[1]):
        b.offset = o
    return best[0]


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """The most bytes live at any one op: no placement can use less."""
    events: list[tuple[int, int]] = []
    for b in buffers:
        events.append((b.start, b.size))
        events.append((b.end + 1, -b.size))
    events.sort(key=lambda e: (e[0], e[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def plan_pools(timeline: Sequence, size: Mapping[str, int], region: Mapping[str, Region]) -> PoolPlan:
    """Liveness, aliasing and placement for the pooled keys (``size``/``region`` give their slots)."""
    ranges = live_ranges(timeline, size)
    rep = alias_inplace(timeline, ranges, size, region)
    members: dict[str, list[str]] = {}
    for k in ranges:
        members.setdefault(rep[k], []).append(k)
    by_region: dict[Region, list[Buffer]] = {}
    for r, keys in members.items():
        b = Buffer(keys, region[r], max(size[k] for k in keys), min(ranges[k][0] for k in keys),
                   max(ranges[k][1] for k in keys))
        by_region.setdefault(b.region, []).append(b)
    plan = PoolPlan(ranges={k: (v[0], v[1]) for k, v in ranges.items()})
    for reg in sorted(by_region):
        bufs = by_region[reg]
        plan.extents[reg] = place(bufs)
        plan.lower_bounds[reg] = lower_bound(bufs)
        plan.buffers.extend(bufs)
        for b in bufs:
            for k in b.keys:
                plan.offsets[k] = b.offset
    return plan
