"""The Backend protocol: what tr.task asks of any device (CPU numpy arena, CUDA extension).

A backend owns ONE arena laid out by an :class:`ArenaLayout`. Everything else is a view into it: a DTensor
is (offset, shape, dtype), a :class:`tr.core.memory.Span` is a byte range. ``capture`` turns a sequence of
:class:`OpCall` into an executable graph once, validating every call (errors name the graph, the op and its
layer); ``launch`` runs it with no per-op Python work beyond calling what capture prepared.

Branches (``capture_branches``): a graph may be given as :class:`Branch` es, each on a stream and after
earlier branches, so work with no data between it runs side by side on the device (the gradient all-reduce
of the deep layers beside the first layer's backward). A backend that runs ops one after another (the CPU)
runs the branches in list order, which is always a valid order.

Host staging (``bind_host_buffers``): two host buffers A and B, each a pair ``(labels, data)`` with labels
INT32 ``[B]`` and data ``[B, H, W, C]``; the ``h2d_copy`` op copies the first N samples of buffer
``attrs["buffer"]`` (N = the batch of its ``data`` DTensor) into the device input tensors.

Counters: ``launches`` (graphs launched) and ``host_time_s`` (host seconds spent inside ``launch``); a
task reads them for profiles, ``reset_counters()`` zeroes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tr.core.errors import BackendError
from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout
from tr.tensor.program import Branch

HostBuffer = tuple[np.ndarray, np.ndarray]  # (labels INT32 [B], data [B, H, W, C])


class CapturedGraph:
    """An executable graph, made by ``Backend.capture`` and run by ``Backend.launch``: its name, the backend that
    runs it and the op calls captured (in the order a serial backend runs them). Each backend's graph class
    derives from it and adds what launching it needs."""

    __slots__ = ("name", "backend", "calls")

    def __init__(self, name: str, backend: Any, calls: tuple[OpCall, ...]) -> None:
        self.name = name
        self.backend = backend
        self.calls = calls

    @property
    def num_ops(self) -> int:
        """Op calls captured (calls with nothing to do, e.g. a one-rank all-reduce, may run nothing)."""
        return len(self.calls)


def check_branches(name: str, branches: Sequence[Branch]) -> None:
    """BackendError unless every branch waits only for earlier ones and every stream but the first branch's
    starts after some branch (a side stream must fork from work already in the graph)."""
    if not branches:
        raise BackendError(f"graph {name!r}: no branches")
    for i, b in enumerate(branches):
        if not isinstance(b, Branch):
            raise BackendError(f"graph {name!r}: branch {i} is a {type(b).__name__}, not a Branch")
    seen = {int(branches[0].stream)}
    for i, b in enumerate(branches):
        bad = [j for j in b.after if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < i]
        if bad:
            raise BackendError(f"graph {name!r}: branch {i} waits for {bad}; a branch may wait only for earlier "
                               f"branches (0..{i - 1})")
        if int(b.stream) not in seen and not b.after:
            raise BackendError(f"graph {name!r}: branch {i} starts stream {StreamKind(b.stream).name} without "
                               f"waiting for any branch")
        seen.add(int(b.stream))


def serial_calls(branches: Sequence[Branch]) -> list[OpCall]:
    """The calls of all branches, one after another in list order (a valid order of the branch graph)."""
    return [c for b in branches for c in b.calls]


@runtime_checkable
class Collective(Protocol):
    """Hook for multi-rank work (``range_allreduce_mean``); a backend with none acts as world size 1.

    Every rank must make the same calls in the same order with buffers of the same size (the compiled
    plans of all ranks emit the same collectives). The CPU implementation is
    :class:`tr.backend.cpu.collective.GlooCollective`.
    """

    world_size: int
    rank: int

    def allreduce_mean(self, buf: np.ndarray) -> None:
        """Replace ``buf`` (FP32, in place) by its element-wise mean over all ranks."""
        ...

    def broadcast(self, buf: np.ndarray) -> None:
        """Replace ``buf`` (any dtype, contiguous, in place) by rank 0's bytes."""
        ...


@runtime_checkable
class Store(Protocol):
    """The key-value rendezvous every rank reaches (a TCP store hosted by rank 0, see tr.task.distributed).

    What ranks exchange while they bootstrap goes through it: gloo's addresses, and for the CUDA backend
    the NCCL unique id (rank 0 ``set``s it, the others ``get`` it), never through files.
    """

    rank: int
    world_size: int

    def set(self, key: str, value: bytes) -> None: ...

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting for some rank to set it (BackendError after the store's timeout)."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What the task needs of a backend, all of it (tr.task asks nothing with hasattr): the arena, graphs,
    host staging, and where launches are asynchronous their streams and events."""

    name: str  # "cpu" | "cuda"
    launches: int
    host_time_s: float
    streams: bool  # launches run asynchronously on streams, ordered by events (CUDA); False: synchronous

    def configure(self, tf32: bool | None = None) -> None:
        """Settings the backend reads at capture (``tf32``: FP32 GEMMs on TF32 tensor cores, where they exist;
        the CPU backend computes FP32 and has none)."""
        ...

    @property
    def layout(self) -> ArenaLayout | None: ...

    def allocate(self, layout: ArenaLayout) -> None:
        """Reserve the one arena (zero-filled) for ``layout``; only once per backend object."""
        ...

    def view(self, t: DTensor) -> np.ndarray:
        """A compact NHWC array aliasing the arena (FP16 as float16, BF16 as its uint16 bits)."""
        ...

    def write(self, t: DTensor, array: Any) -> None:
        """Copy ``array`` (any shape with t.numel elements) into t's bytes."""
        ...

    def read(self, t: DTensor) -> np.ndarray:
        """A host copy of t, shape t.shape.dims."""
        ...

    def capture(self, name: str, calls: Sequence[OpCall]) -> CapturedGraph:
        """Validate and prepare ``calls`` (in order) as one graph named ``name``."""
        ...

    def capture_branches(self, name: str, branches: Sequence[Branch]) -> CapturedGraph:
        """One graph of several branches (see :class:`Branch`); validated like ``capture``."""
        ...

    def launch(self, graph: CapturedGraph, stream: Any = None) -> None:
        """Run ``graph`` (on ``stream``, a tr.core.phase.StreamKind, where the backend has streams)."""
        ...

    def event(self) -> Any:
        """A stream event (``record(stream)``, ``wait(stream)``, ``synchronize()``): only where ``streams``."""
        ...

    def host_buffers(self, batch: int, sample_shape: Sequence[int], dtype: Any = ...) -> Any:
        """Two staging pairs (A, B) in the memory the backend copies from fastest (CUDA: pinned), or None when
        any host memory will do (CPU)."""
        ...

    def synchronize(self) -> None:
        """Wait until every launched graph has finished (a no-op where launches are synchronous)."""
        ...

    def bind_host_buffers(self, buffers: Sequence[HostBuffer]) -> None:
        """Bind the host staging buffers A and B that ``h2d_copy`` reads."""
        ...

    def reset_counters(self) -> None: ...
