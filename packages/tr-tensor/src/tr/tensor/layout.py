"""ArenaLayout: where each region lies in the arena, in layout order. It is the data a backend needs to resolve
spans."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tr.core.errors import CompileError
from tr.core.memory import Region, Span


@dataclass(frozen=True)
class ArenaLayout:
    total_bytes: int
    regions: Mapping[Region, tuple[int, int]]  # region -> [start, end) bytes, in layout order
    _spans: dict[Span, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def span(self, s: Span) -> tuple[int, int]:
        """Byte range [start, end) of the regions ``s`` selects; (0, 0) when it selects no bytes. A region with
        bytes between two selected ones is a CompileError: the span would cover memory it does not name."""
        hit = self._spans.get(s)
        if hit is None:
            hit = self._spans[s] = self._resolve(s)
        return hit

    def _resolve(self, s: Span) -> tuple[int, int]:
        picked = [r for r, (a, b) in self.regions.items() if b > a and s.matches(r)]
        if not picked:
            return 0, 0
        start, end = self.regions[picked[0]][0], self.regions[picked[-1]][1]
        for r, (a, b) in self.regions.items():
            if start <= a and b <= end and b > a and not s.matches(r):
                raise CompileError(f"span {s!r} is not contiguous: region {r.name} [{a}, {b}) lies between "
                                   f"{picked[0].name} and {picked[-1].name}")
        return start, end

    def region_bytes(self, r: Region) -> int:
        a, b = self.regions.get(r, (0, 0))
        return b - a

    def validate(self) -> None:
        cursor = 0
        prev: Region | None = None
        for r, (a, b) in self.regions.items():
            if prev is not None and not prev < r:
                raise CompileError(f"region {r.name} follows {prev.name}: regions must be in layout order")
            if a != cursor or b < a:
                raise CompileError(f"region {r.name} at [{a}, {b}) breaks the contiguous layout (expected {cursor})")
            if a % 256:
                raise CompileError(f"region {r.name} base {a} is not 256-byte aligned")
            cursor, prev = b, r
        if cursor != self.total_bytes:
            raise CompileError(f"regions end at {cursor} but the arena has {self.total_bytes} bytes")
