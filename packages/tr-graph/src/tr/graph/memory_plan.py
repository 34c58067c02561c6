"""MemoryPlan: regions in layout order (tr.core.memory: role, then group) over one arena, 256-byte aligned, and
the checks range ops rely on.

A region holds its fixed slots (in allocation order) followed by its pool (liveness-packed tensors, see
tr.graph.liveness). Only regions that hold a tensor exist.

Checks (``check_layout``):
- the layout itself: regions contiguous, in layout order, 256-byte aligned;
- every tensor inside its region, 256-byte aligned; fixed slots pairwise disjoint;
- every span a range op names is contiguous (ArenaLayout.span), and: casts line up element by element (an FP32
  slot is twice its FP16 twin's, in the same order), the optimizer's weight / gradient / moment ranges hold the
  same tensors at the same relative offsets, copies go between identical layouts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tr.core.align import align_up_256
from tr.core.errors import CompileError
from tr.core.memory import Region, Span
from tr.core.ops import OpCall
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout


@dataclass
class MemoryPlan:
    fixed: dict[Region, list[tuple[str, int]]] = field(default_factory=dict)
    pools: dict[Region, tuple[int, dict[str, int]]] = field(default_factory=dict)

    def alloc(self, key: str, region: Region, slot: int) -> int:
        """Reserve a slot; returns its size."""
        if slot % 256:
            raise CompileError(f"slot of {key} ({slot} B) is not a multiple of 256")
        self.fixed.setdefault(region, []).append((key, slot))
        return slot

    def pool(self, region: Region, extent: int, offsets: Mapping[str, int]) -> None:
        self.pools[region] = (align_up_256(extent), dict(offsets))

    def regions(self) -> list[Region]:
        """Every region holding a tensor, in layout order; two groups of one name must be one group."""
        regions = sorted(set(self.fixed) | set(self.pools))
        groups: dict[str, Region] = {}
        for r in regions:
            other = groups.setdefault(r.group.name, r)
            if other.group != r.group:
                raise CompileError(f"group {r.group.name!r} is declared twice, differently: {other.group} (region "
                                   f"{other.name}) and {r.group} (region {r.name}); give one of them another name")
        return regions

    def finalize(self) -> tuple[ArenaLayout, dict[str, int]]:
        """Lay regions out in layout order; returns the layout and every key's absolute offset."""
        cursor = 0
        regions: dict[Region, tuple[int, int]] = {}
        offsets: dict[str, int] = {}
        for r in self.regions():
            base = cursor
            for key, s in self.fixed.get(r, []):
                offsets[key] = cursor
                cursor += s
            if r in self.pools:
                extent, rel = self.pools[r]
                for key, o in rel.items():
                    offsets[key] = cursor + o
                cursor += extent
            regions[r] = (base, cursor)
        layout = ArenaLayout(cursor, regions)
        layout.validate()
        return layout, offsets

    def bytes_by_region(self) -> dict[Region, int]:
        out = {r: sum(s for _, s in self.fixed.get(r, [])) for r in self.regions()}
        for r, (extent, _) in self.pools.items():
            out[r] += extent
        return out


# --- checks -------------------------------------------------------------------------------------------

def tensors_in(layout: ArenaLayout, tensors: Iterable[DTensor], s: Span) -> list[DTensor]:
    """Allocated tensors inside the span, by offset (aliases of one slot appear once)."""
    a, b = layout.span(s)
    seen: dict[int, DTensor] = {}
    for t in tensors:
        if t.allocated and a <= t.offset < b and t.offset not in seen:
            seen[t.offset] = t
    return [seen[o] for o in sorted(seen)]


def check_layout(layout: ArenaLayout, tensors: Sequence[DTensor], pooled: set[int]) -> None:
    """``pooled``: ids of the liveness-packed tensors (they may share bytes; the reuse checker covers them)."""
    layout.validate()
    fixed: list[DTensor] = []
    for t in tensors:
        a, b = layout.regions[t.region]
        if t.offset % 256:
            raise CompileError(f"{t.name}: offset {t.offset} is not 256-byte aligned")
        if t.slot_bytes and not (a <= t.offset and t.offset + t.slot_bytes <= b):
            raise CompileError(f"{t.name}: slot [{t.offset}, {t.end}) leaves its region {t.region.name} [{a}, {b})")
        if t.allocated and t.id not in pooled:
            fixed.append(t)
    fixed.sort(key=lambda t: t.offset)
    for x, y in zip(fixed, fixed[1:]):
        if y.offset < x.end:
            raise CompileError(f"fixed slots overlap: {x.name} [{x.offset}, {x.end}) and {y.name} at {y.offset}")


def check_twins(layout: ArenaLayout, tensors: Sequence[DTensor], src: Span, dst: Span,
                ratio: float) -> None:
    """Element k of ``src`` lines up with element k of ``dst``; dst slots are ``ratio`` x src slots."""
    sa, sb = layout.span(src)
    da, db = layout.span(dst)
    if (db - da) != (sb - sa) * ratio:
        raise CompileError(f"range {src!r} ({sb - sa} B) and {dst!r} ({db - da} B) differ by more than the "
                           f"element size ratio {ratio}")
    xs, ys = tensors_in(layout, tensors, src), tensors_in(layout, tensors, dst)
    if len(xs) != len(ys):
        raise CompileError(f"range {src!r} holds {len(xs)} tensors but {dst!r} holds {len(ys)}")
    for x, y in zip(xs, ys):
        if x.shape != y.shape or y.slot_bytes != x.slot_bytes * ratio or (y.offset - da) != (x.offset - sa) * ratio:
            raise CompileError(f"{x.name} in {src!r} does not line up with its twin {y.name} in {dst!r}: "
                               f"{x.shape} {x.slot_bytes} B at +{x.offset - sa} vs {y.shape} {y.slot_bytes} B "
                               f"at +{y.offset - da}")


def check_range_ops(layout: ArenaLayout, tensors: Sequence[DTensor], calls: Iterable[OpCall],
                    pooled: set[Region]) -> None:
    """Every span of every range op: no pooled region inside, and the pairings each op relies on."""
    pooled_bytes = [layout.regions[r] for r in pooled]
    for c in calls:
        spans = {k: v for k, v in c.args.items() if isinstance(v, Span)}
        for name, s in spans.items():
            a, b = layout.span(s)
            for pa, pb in pooled_bytes:
                if a < pb and pa < b:
                    raise CompileError(f"{c.op} {name}={s!r} covers pooled memory [{pa}, {pb})")
        if c.op == "range_cast":
            src_size, dst_size = c.attrs["src_dtype"].itemsize, c.attrs["dst_dtype"].itemsize
            check_twins(layout, tensors, spans["src"], spans["dst"], dst_size / src_size)
        elif c.op == "range_copy":
            check_twins(layout, tensors, spans["src"], spans["dst"], 1)
        elif c.op == "range_accumulate":  # GRAD and its GRAD_ACCUM twins, element for element
            check_twins(layout, tensors, spans["src"], spans["acc"], 1)
        elif c.op == "range_optimizer":
            for other in ("g", "m", "v"):
                if other in spans:
                    check_twins(layout, tensors, spans["w"], spans[other], 1)
