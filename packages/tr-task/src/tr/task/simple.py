"""SimpleTask: allocate DTensors by hand, add named graphs of op calls, compile, run.

The seed's tests are built on it; ours too. PLANNING: ``alloc`` (into a tr.core.memory.Region: a temporary of
the tensor's dtype unless named); ``finalize_memory()`` lays the tensors out (the regions that hold one, in
layout order; a region's tensors in allocation order, 256-byte aligned) -> MEMORY_LOCKED: ``add_graph``;
``compile()`` allocates the arena on the backend and captures every graph -> COMPILED: ``run``, ``write``,
``read``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.memory import Region, Role, dtype_group
from tr.core.ops import OpCall
from tr.core.phase import Phase
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
              region: Region | None = None) -> DTensor:
        """A tensor in ``region`` (default: the temporaries of its dtype, Region(Role.TEMP, dtype_group(dtype)))."""
        self._require(Phase.PLANNING, f"alloc({name!r})")
        if name in self._tensors or any(t.name == name for t in self._pending):
            raise ConfigError(f"a tensor named {name!r} already exists")
        if region is not None and not isinstance(region, Region):
            raise ConfigError(f"alloc({name!r}): region must be a tr.core.memory.Region such as "
                              f"Region(Role.PARAM, Group('w')), got {region!r}")
        s = shape if isinstance(shape, Shape) else Shape.of(*shape)
        dt = DType.parse(dtype)
        r = region if region is not None else Region(Role.TEMP, dtype_group(dt))
        # layouts, checkpoints and errors name a region by its name: two groups of one name would be confused
        clash = next((u.region for u in self._pending if u.region.name == r.name and u.region != r), None)
        if clash is not None:
            raise ConfigError(f"alloc({name!r}): region {r.name} with {r.group}, but {clash.group} already has that "
                              f"name; the groups of a role need distinct names")
        t = DTensor(len(self._pending), name, r, s, dt, slot_bytes_for(s, dt))
        self._pending.append(t)
        return t

    def alloc_scalar(self, name: str, dtype: DType | str = DType.FP32, region: Region | None = None) -> DTensor:
        """A scalar in ``region`` (default: the scalars of its dtype, Region(Role.SCALAR, dtype_group(dtype)))."""
        dt = DType.parse(dtype)
        return self.alloc(name, Shape(), dt, region if region is not None else Region(Role.SCALAR, dtype_group(dt)))

    def finalize_memory(self) -> ArenaLayout:
        self._require(Phase.PLANNING, "finalize_memory()")
        cursor = 0
        regions: dict[Region, tuple[int, int]] = {}
        for t in sorted(self._pending, key=lambda t: t.region.sort_key()):  # stable: allocation order within
            start = regions.get(t.region, (cursor, cursor))[0]
            self._tensors[t.name] = t.at(cursor)
            cursor += t.slot_bytes
            regions[t.region] = (start, cursor)
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
