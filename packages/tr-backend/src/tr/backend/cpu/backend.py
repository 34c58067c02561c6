"""The CPU backend: one numpy byte arena, graphs "captured" as tuples of bound numpy closures.

Capture resolves every op call once (views, spans, attributes, shape checks, scratch buffers) into a
closure; launch runs the tuple. Launches are synchronous, so ``synchronize`` has nothing to wait for.
Floating-point warnings are silenced inside launches: like a GPU kernel, an op lets inf/NaN through and
the plan's ``range_check_finite`` decides what to do with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any, Protocol

import numpy as np

from tr.backend.base import Branch, CapturedGraph, Collective, HostBuffer, check_branches, serial_calls
from tr.backend.binding import bind_call
from tr.backend.checks import check_host_buffers
from tr.backend.cpu.binder import Binder, Workspace
from tr.backend.cpu.blas import set_blas_threads
from tr.backend.cpu.convert import converter
from tr.backend.registry import op_impls
from tr.core.dtype import DType
from tr.core.errors import BackendError, DTypeError, OutOfMemoryError, ShapeError, TrError
from tr.core.memory import Span
from tr.core.ops import OpCall
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout

ARENA_ALIGNMENT = 64


class HostConsumer(Protocol):
    def bind(self, buffers: Sequence[HostBuffer]) -> None: ...


class CpuGraph(CapturedGraph):
    """A captured graph: the closures to run, and for each a description for error messages."""

    __slots__ = ("steps", "wheres")

    def __init__(self, name: str, backend: CpuBackend, steps: tuple, wheres: tuple[str, ...],
                 calls: tuple[OpCall, ...]) -> None:
        super().__init__(name, backend, calls)
        self.steps = steps
        self.wheres = wheres

    def __repr__(self) -> str:
        return f"CpuGraph({self.name!r}, {len(self.calls)} ops, {len(self.steps)} closures)"


class CpuBackend:
    name = "cpu"
    streams = False  # every launch runs to completion before it returns

    def __init__(self, collective: Collective | None = None, threads: int | None = None) -> None:
        """``collective``: multi-rank hook for range_allreduce_mean (None: one rank). ``threads``: make
        numpy's BLAS use this many threads (process-wide; None leaves it alone), see tr.backend.cpu.blas."""
        if threads is not None:
            set_blas_threads(threads)
        self.collective = collective
        self.workspace = Workspace()
        self.launches = 0
        self.host_time_s = 0.0
        self._arena: np.ndarray | None = None
        self._layout: ArenaLayout | None = None
        self._host: tuple[HostBuffer, ...] | None = None
        self._host_consumers: list[HostConsumer] = []

    # --- arena ----------------------------------------------------------------------------------------
    @property
    def layout(self) -> ArenaLayout | None:
        return self._layout

    @property
    def arena(self) -> np.ndarray:
        if self._arena is None:
            raise BackendError("the CPU backend has no arena yet; call allocate(layout) first")
        return self._arena

    @property
    def world_size(self) -> int:
        return 1 if self.collective is None else int(self.collective.world_size)

    def allocate(self, layout: ArenaLayout) -> None:
        if self._arena is not None:
            raise BackendError("the CPU backend already holds an arena; make a new backend for another plan")
        layout.validate()
        total = int(layout.total_bytes)
        try:
            raw = np.zeros(total + ARENA_ALIGNMENT, np.uint8)
        except MemoryError:
            raise OutOfMemoryError(f"the arena needs {total} bytes of host memory, which numpy could not get") from None
        start = (-raw.ctypes.data) % ARENA_ALIGNMENT
        self._arena = raw[start:start + total]
        self._layout = layout

    def _check_tensor(self, t: DTensor) -> None:
        if not isinstance(t, DTensor):
            raise BackendError(f"expected a DTensor, got {type(t).__name__}")
        if not t.placed:
            raise BackendError(f"{t!r} has no offset; the memory plan was not finalised")
        if t.offset + t.nbytes > self.arena.nbytes:
            raise BackendError(f"{t!r} ends at byte {t.offset + t.nbytes}, past the arena's {self.arena.nbytes}")

    def view(self, t: DTensor) -> np.ndarray:
        self._check_tensor(t)
        return self.arena[t.offset:t.offset + t.nbytes].view(t.dtype.np_dtype).reshape(t.shape.dims)

    def span_view(self, s: Span) -> np.ndarray:
        """The bytes of the regions ``s`` selects (uint8, aliasing the arena; empty when it selects none)."""
        if self._layout is None:
            raise BackendError("the CPU backend has no arena yet; call allocate(layout) first")
        lo, hi = self._layout.span(s)
        return self.arena[lo:hi]

    def write(self, t: DTensor, array: Any) -> None:
        v = self.view(t)
        a = np.asarray(array)
        if a.size != t.numel:
            raise ShapeError(f"cannot write {a.shape} ({a.size} elements) into {t!r} ({t.numel} elements)")
        a = a.reshape(v.shape)
        if t.dtype is DType.BF16 and a.dtype != np.uint16:
            if a.dtype.kind != "f":
                raise DTypeError(f"cannot write {a.dtype} values into BF16 tensor {t!r}")
            converter(DType.FP32, DType.BF16)(a.astype(np.float32), v)
            return
        try:
            np.copyto(v, a, casting="same_kind")
        except TypeError as e:
            raise DTypeError(f"cannot write {a.dtype} values into {t.dtype.name} tensor {t!r}: {e}") from None

    def read(self, t: DTensor) -> np.ndarray:
        return self.view(t).copy()

    # --- graphs ---------------------------------------------------------------------------------------
    def capture(self, name: str, calls: Sequence[OpCall]) -> CpuGraph:
        layout = self._layout
        if layout is None:
            raise BackendError(f"cannot capture graph {name!r}: call allocate(layout) first")
        calls = tuple(calls)
        impls = op_impls("cpu")
        steps: list = []
        wheres: list[str] = []
        for i, call in enumerate(calls):
            step, at = bind_call(self, "CPU", Binder, impls, layout, name, i, call)
            if step is not None:
                steps.append(step)
                wheres.append(at)
        return CpuGraph(name, self, tuple(steps), tuple(wheres), calls)

    def capture_branches(self, name: str, branches: Sequence[Branch]) -> CpuGraph:
        """The branches one after another: launches are synchronous, nothing runs side by side here."""
        check_branches(name, branches)
        return self.capture(name, serial_calls(branches))

    def configure(self, tf32: bool | None = None) -> None:
        """The CPU backend computes FP32 in FP32 (numpy has no TF32): ``tf32`` changes nothing here."""

    def event(self) -> Any:
        raise BackendError("the CPU backend runs graphs synchronously: it has no streams and no events")

    def host_buffers(self, batch: int, sample_shape: Sequence[int], dtype: Any = None) -> None:
        """None: the CPU backend copies from any host memory, so the feeder keeps its own buffers."""
        return None

    def launch(self, graph: CpuGraph, stream: Any = None) -> None:
        """Run ``graph`` now (``stream`` is accepted for the protocol: there is one, the caller's thread)."""
        if not isinstance(graph, CpuGraph) or graph.backend is not self:
            raise BackendError(f"{graph!r} was not captured by this CPU backend")
        t0 = perf_counter()
        i = 0
        try:
            with np.errstate(all="ignore"):
                for step in graph.steps:
                    step()
                    i += 1
        except TrError:
            raise
        except Exception as e:
            raise BackendError(f"{graph.wheres[i]}: {type(e).__name__}: {e}") from e
        finally:
            self.launches += 1
            self.host_time_s += perf_counter() - t0

    def synchronize(self) -> None:
        """Launches are synchronous on the CPU: nothing to wait for."""

    def reset_counters(self) -> None:
        self.launches = 0
        self.host_time_s = 0.0

    # --- host staging ---------------------------------------------------------------------------------
    def bind_host_buffers(self, buffers: Sequence[HostBuffer]) -> None:
        bufs = check_host_buffers(buffers)
        for site in self._host_consumers:
            site.bind(bufs)
        self._host = bufs

    def add_host_consumer(self, site: HostConsumer) -> None:
        """Called by h2d_copy at capture: the site is (re)bound whenever host buffers are bound."""
        self._host_consumers.append(site)
        if self._host is not None:
            site.bind(self._host)

    def __repr__(self) -> str:
        size = "no arena" if self._arena is None else f"arena {self._arena.nbytes} B"
        return f"CpuBackend({size}, world_size={self.world_size})"
