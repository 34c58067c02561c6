"""ArenaLayout: where each region lies in the arena. It is the data a backend needs to resolve spans."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tr.core.errors import CompileError
from tr.core.ops import RegionSpan
from tr.core.region import Region


@dataclass(frozen=True)
class ArenaLayout:
    total_bytes: int
    regions: Mapping[Region, tuple[int, int]]  # region -> [start, end) bytes; every region present

    def span(self, s: RegionSpan) -> tuple[int, int]:
        """Byte range [start, end) covering regions first..last, which are adjacent by construction."""
        start = self.regions[s.first][0]
        end = self.regions[s.last][1]
        return start, end

    def region_bytes(self, r: Region) -> int:
        a, b = self.regions[r]
        return b - a

    def validate(self) -> None:
        cursor = 0
        for r in Region:
            a, b = self.regions[r]
            if a != cursor or b < a:
                raise CompileError(f"region {r.name} at [{a}, {b}) breaks the contiguous layout (expected {cursor})")
            if a % 256:
                raise CompileError(f"region {r.name} base {a} is not 256-byte aligned")
            cursor = b
        if cursor != self.total_bytes:
            raise CompileError(f"regions end at {cursor} but the arena has {self.total_bytes} bytes")
