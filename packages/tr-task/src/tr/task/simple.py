"""SimpleTask: allocate DTensors by hand, add named graphs of op calls, compile, run.

The seed's tests are built on it; ours too. PLANNING: ``alloc``; ``finalize_memory()`` lays the tensors
out (regions in enum order, 256-byte aligned) -> MEMORY_LOCKED: ``add_graph``; ``compile()`` allocates the
arena on the backend and captures every graph -> COMPILED: ``run``, ``write``, ``read``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.ops import OpCall
from tr.core.phase import Phase
from tr.core.region import Region
from tr.core.shape import Shape
from tr.task.base import TaskBase
from tr.tensor.dtensor import DTensor, slot_bytes_for
from tr.tensor.layout import ArenaLayout


class SimpleTask(TaskBase):
    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self._device = device
        self._pending: list[DTensor] = []
        self._tensors: dict[str, DTensor] = {}
        self._graphs: dict[str, list[OpCall]] = {}
        self._captured: dict[str, Any] = {}
        self.layout: ArenaLayout | None = None
        self.backend = None

    def alloc(self, name: str, shape: Shape | Sequence[int], dtype: DType | str = DType.FP32,
              region: Region = Region.T_TEMP_FP32) -> DTensor:
        self._require(Phase.PLANNING, f"alloc({name!r})")
        if name in self._tensors or any(t.name == name for t in self._pending):
            raise ConfigError(f"a tensor named {name!r} already exists")
        s = shape if isinstance(shape, Shape) else Shape.of(*shape)
        dt = DType.parse(dtype)
        t = DTensor(len(self._pending), name, Region(region), s, dt, slot_bytes_for(s, dt))
        self._pending.append(t)
        return t

    def alloc_scalar(self, name: str, dtype: DType | str = DType.FP32, region: Region | None = None) -> DTensor:
        dt = DType.parse(dtype)
        default = Region.S_SCALAR_INT32 if dt is DType.INT32 else Region.S_SCALAR_FP32
        return self.alloc(name, Shape(), dt, region or default)

    def finalize_memory(self) -> ArenaLayout:
        self._require(Phase.PLANNING, "finalize_memory()")
        cursor = 0
        regions: dict[Region, tuple[int, int]] = {}
        for r in Region:
            start = cursor
            for t in self._pending:
                if t.region is r:
                    self._tensors[t.name] = t.at(cursor)
                    cursor += t.slot_bytes
            regions[r] = (start, cursor)
        self.layout = ArenaLayout(cursor, regions)
        self.layout.validate()
        self._advance(Phase.MEMORY_LOCKED)
        return self.layout

    def tensor(self, name: str) -> DTensor:
        """The placed DTensor (after finalize_memory)."""
        try:
            return self._tensors[name]
        except KeyError:
            raise ConfigError(f"no placed tensor {name!r}; call finalize_memory() after alloc()") from None

    def add_graph(self, name: str, calls: Sequence[OpCall]) -> None:
        self._require(Phase.MEMORY_LOCKED, f"add_graph({name!r})")
        if name in self._graphs:
            raise ConfigError(f"a graph named {name!r} already exists")
        self._graphs[name] = list(calls)

    def compile(self) -> SimpleTask:
        self._no_backwards("compile()")
        self._require(Phase.MEMORY_LOCKED, "compile()")
        from tr.backend.registry import get_backend

        self.backend = get_backend(self._device)
        self.backend.allocate(self.layout)
        for name, calls in self._graphs.items():
            self._captured[name] = self.backend.capture(name, calls)
        self._advance(Phase.COMPILED)
        return self

    def run(self, *names: str) -> None:
        self._require(Phase.COMPILED, "run()")
        for n in names:
            if n not in self._captured:
                raise ConfigError(f"no graph named {n!r}; graphs: {sorted(self._captured)}")
            self.backend.launch(self._captured[n])
        self.backend.synchronize()

    def write(self, name: str, array: Any) -> None:
        self._require(Phase.COMPILED, f"write({name!r})")
        self.backend.write(self.tensor(name), np.asarray(array))

    def read(self, name: str) -> np.ndarray:
        self._require(Phase.COMPILED, f"read({name!r})")
        return self.backend.read(self.tensor(name))
