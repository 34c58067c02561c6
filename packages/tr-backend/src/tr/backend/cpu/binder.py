"""Binding one op call to numpy views at capture time (the CPU backend's "graph capture").

An op implementation is a builder ``impl(b: Binder) -> step | None``: it reads its arguments through the
Binder (views into the arena, typed span views, attributes), checks shapes and dtypes (``b.fail`` raises a
BackendError naming the graph, op and layer), preallocates what it needs, and returns a closure with no
arguments that does the work at launch. ``None`` means the op has nothing to do (e.g. an all-reduce with one
rank) and is left out of the graph.

Mixed precision: ``b.load`` / ``b.store`` give float32 arrays for tensors of any float dtype. FP32 tensors
are the arena views themselves (no copy); FP16 and BF16 tensors get a float32 scratch array plus a step that
widens before (load) or narrows after (store) the computation. So every op computes in FP32 and stores in
the tensor's own dtype: AMP semantics with FP32 accumulation.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from tr.backend.binding import CallBinder, pair  # noqa: F401  (pair: re-exported for op modules)
from tr.backend.cpu.convert import bf16_to_f32, f32_to_bf16
from tr.core.dtype import DType
from tr.core.ops import OpCall, OpDef

if TYPE_CHECKING:
    from tr.backend.cpu.backend import CpuBackend

Step = Callable[[], None]


class Workspace:
    """Scratch arrays shared by every closure of one backend.

    Closures run one at a time and keep nothing in scratch between launches, so two ops may share a buffer.
    Inside one op the i-th request for a given (dtype, size) gets the i-th buffer, so an op's own scratch
    arrays never alias each other.
    """

    def __init__(self) -> None:
        self._pool: dict[tuple[str, int], list[np.ndarray]] = {}

    def get(self, dtype: np.dtype, numel: int, index: int) -> np.ndarray:
        bufs = self._pool.setdefault((np.dtype(dtype).str, numel), [])
        while len(bufs) <= index:
            bufs.append(np.zeros(numel, dtype))
        return bufs[index]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for bufs in self._pool.values() for b in bufs)


def seq(*steps: Step | None) -> Step | None:
    """One closure running ``steps`` (None entries dropped) in order."""
    todo = tuple(s for s in steps if s is not None)
    if not todo:
        return None
    if len(todo) == 1:
        return todo[0]

    def run() -> None:
        for s in todo:
            s()

    return run


class Binder(CallBinder):
    def __init__(self, backend: CpuBackend, graph: str, index: int, call: OpCall, opdef: OpDef) -> None:
        super().__init__(backend, graph, index, call, opdef)
        self._counts: dict[tuple[str, int], int] = {}

    def view(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """The arena view of a tensor argument (its own dtype), optionally reshaped (no copy)."""
        v = self.backend.view(self.tensor(name))
        return v if shape is None else v.reshape(shape)

    def flat(self, name: str) -> np.ndarray:
        return self.view(name, (-1,))

    def span(self, name: str, dtype: np.dtype | type = np.uint8) -> np.ndarray:
        """The bytes of a span argument as a 1-D array of ``dtype``."""
        raw = self.backend.span_view(self.call.args[name])
        item = np.dtype(dtype).itemsize
        if raw.nbytes % item:
            self.fail(f"span {name!r} has {raw.nbytes} bytes, not a multiple of {np.dtype(dtype).name}'s {item}")
        return raw.view(dtype)

    # --- scratch --------------------------------------------------------------------------------------
    def scratch(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A shared scratch array: contents undefined at the start of every launch."""
        numel = int(np.prod(shape, dtype=np.int64))
        key = (np.dtype(dtype).str, numel)
        i = self._counts.get(key, 0)
        self._counts[key] = i + 1
        return self.backend.workspace.get(np.dtype(dtype), numel, i).reshape(shape)

    def private(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32, fill: float = 0) -> np.ndarray:
        """An array owned by this op alone: what the op leaves in it survives until its next launch."""
        return np.full(shape, fill, dtype)

    # --- float32 access -------------------------------------------------------------------------------
    def load(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, Step | None]:
        """(float32 array holding the tensor's values, step that fills it or None when it is the view)."""
        self.expect_float(name)
        raw = self.view(name, shape)
        dt = self.dtype(name)
        if dt is DType.FP32:
            return raw, None
        buf = self.scratch(raw.shape)
        if dt is DType.FP16:
            return buf, partial(np.copyto, buf, raw)
        return buf, partial(bf16_to_f32, raw, buf)

    def store(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, Step | None]:
        """(float32 array to compute into, step that narrows it into the tensor or None)."""
        self.expect_float(name)
        raw = self.view(name, shape)
        dt = self.dtype(name)
        if dt is DType.FP32:
            return raw, None
        buf = self.scratch(raw.shape)
        if dt is DType.FP16:
            return buf, partial(np.copyto, raw, buf)
        return buf, partial(f32_to_bf16, buf, raw)

    def modify(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, Step | None, Step | None]:
        """For inout tensors: (float32 array, load step, store step)."""
        self.expect_float(name)
        raw = self.view(name, shape)
        dt = self.dtype(name)
        if dt is DType.FP32:
            return raw, None, None
        buf = self.scratch(raw.shape)
        if dt is DType.FP16:
            return buf, partial(np.copyto, buf, raw), partial(np.copyto, raw, buf)
        return buf, partial(bf16_to_f32, raw, buf), partial(f32_to_bf16, buf, raw)

    def source(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, Step | None]:
        """An array ``np.copyto`` can read float values from: the view itself unless it holds BF16 bits."""
        self.expect_float(name)
        if self.dtype(name) is DType.BF16:
            return self.load(name, shape)
        return self.view(name, shape), None
