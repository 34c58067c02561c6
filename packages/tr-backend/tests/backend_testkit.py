"""Test helpers for tr.backend: lay DTensors out in an arena without tr.graph, run op calls, compare.

SimpleArena places tensors one after another at 256-byte aligned offsets (each takes its
``slot_bytes_for`` slot), region by region in enum order, and builds the matching ArenaLayout (every region
present; unused ones are empty), so span ops can be tested over real region ranges.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tr.backend.cpu import CpuBackend, CpuGraph
from tr.core.dtype import DType
from tr.core.ops import CATALOGUE, OpCall, RegionSpan
from tr.core.region import Region
from tr.core.shape import Shape
from tr.tensor.dtensor import DTensor, slot_bytes_for
from tr.tensor.layout import ArenaLayout


class SimpleArena:
    def __init__(self) -> None:
        self.tensors: dict[str, DTensor] = {}
        self._bounds: dict[Region, list[int]] = {}
        self._cursor = 0
        self._last = Region(0)
        self.backend: CpuBackend | None = None

    def add(self, name: str, shape: Iterable[int] | Shape, dtype: str | DType = "fp32",
            region: Region = Region.T_TEMP_FP32) -> DTensor:
        if self.backend is not None:
            raise RuntimeError("the arena is already allocated")
        if region < self._last:
            raise ValueError(f"add tensors in region order: {region.name} after {self._last.name}")
        shp = shape if isinstance(shape, Shape) else Shape.of(*tuple(shape))
        dt = DType.parse(dtype)
        self._last = region
        bounds = self._bounds.setdefault(region, [self._cursor, self._cursor])
        t = DTensor(len(self.tensors), name, region, shp, dt, slot_bytes_for(shp, dt), offset=self._cursor)
        self._cursor += t.slot_bytes
        bounds[1] = self._cursor
        self.tensors[name] = t
        return t

    def layout(self) -> ArenaLayout:
        regions: dict[Region, tuple[int, int]] = {}
        pos = 0
        for r in Region:
            lo, hi = self._bounds.get(r, (pos, pos))
            assert lo == pos
            regions[r] = (lo, hi)
            pos = hi
        return ArenaLayout(self._cursor, regions)

    def allocate(self, **options: Any) -> CpuBackend:
        self.backend = CpuBackend(**options)
        self.backend.allocate(self.layout())
        return self.backend

    def __getitem__(self, name: str) -> DTensor:
        return self.tensors[name]


def op(name: str, layer: int = -1, label: str = "", **kw: Any) -> OpCall:
    """OpCall.make with arguments and attributes given together as keywords."""
    names = {a.name for a in CATALOGUE[name].args}
    args = {k: v for k, v in kw.items() if k in names}
    attrs = {k: v for k, v in kw.items() if k not in names}
    return OpCall.make(name, args, attrs, layer=layer, label=label)


def run(be: CpuBackend, *calls: OpCall, name: str = "test") -> CpuGraph:
    g = be.capture(name, calls)
    be.launch(g)
    return g


def span(first: Region, last: Region | None = None) -> RegionSpan:
    return RegionSpan(first, first if last is None else last)


def assert_close(actual: Any, expected: Any, tol: float = 1e-5) -> None:
    """max |actual - expected| <= tol * max(1, max |expected|): error relative to the data's scale."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
    err = float(np.max(np.abs(a - e))) if e.size else 0.0
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol:.1g} * {scale:.3g}"


def nchw(a: np.ndarray) -> Any:
    """NHWC numpy -> NCHW float64 torch tensor that requires grad."""
    import torch

    return torch.tensor(np.ascontiguousarray(a.transpose(0, 3, 1, 2)), dtype=torch.float64, requires_grad=True)


def nhwc(t: Any) -> np.ndarray:
    return t.detach().numpy().transpose(0, 2, 3, 1)
