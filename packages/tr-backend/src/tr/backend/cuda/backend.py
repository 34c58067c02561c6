"""The CUDA backend: one device arena, each graph captured once as a cudaGraphExec, launched with one call.

- Arena: one cudaMalloc (``_native.DeviceArena``) for the whole layout; a DTensor is (offset, shape) in it,
  compact NHWC like the CPU backend. A plan larger than the device's free memory raises OutOfMemoryError
  (needed and free bytes) before anything is allocated or run.
- DeviceContext (``_native.Context``): five streams (tr.core.phase.StreamKind), a cuBLASLt handle (the
  library is opened at run time) and its workspace.
- capture(name, calls): every call is checked (tr.backend.checks), bound by its builder to a native op with
  device addresses resolved once, then all ops are recorded by stream capture on one stream and
  instantiated. capture_branches(name, branches) records each Branch on its own stream after the marks of
  the branches it waits for, giving a graph with parallel paths (e.g. the deep gradient bucket's all-reduce
  beside the first layer's backward). A failure anywhere names the graph, the op and its layer. launch(graph) is one
  cudaGraphLaunch: no per-op Python work. Graphs launch on COMP_1 unless told otherwise, so launches run in
  order, as on the CPU backend.
- Host staging: ``host_buffers(batch, sample_shape, dtype)`` gives pinned (A, B) pairs (labels INT32 [B],
  data [B, *sample_shape]) for the feeder to fill; ``bind_host_buffers`` takes those or any other C-contiguous
  numpy arrays (page-locked on binding). h2d_copy nodes are re-pointed when other buffers are bound later.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

import numpy as np

from tr.backend.base import Branch, CapturedGraph, Collective, HostBuffer, check_branches, serial_calls
from tr.backend.binding import bind_call
from tr.backend.checks import check_host_buffers
from tr.backend.cpu.convert import converter
from tr.backend.cuda import attention_engines
from tr.backend.cuda.attention_engines import AttentionEngine
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.conv_engines import ConvEngine, used_by
from tr.backend.cuda.device import require_cuda
from tr.backend.cuda.native import require_native, wheel_libraries
from tr.backend.cuda.nccl import NcclCollective
from tr.backend.registry import op_impls
from tr.backend.rules.transfer import host_data_problem
from tr.core import env as tr_env
from tr.core.dtype import DType
from tr.core.errors import (
    BackendError,
    ConfigError,
    DeviceUnavailableError,
    DTypeError,
    OutOfMemoryError,
    ShapeError,
    TrError,
)
from tr.core.log import get_logger
from tr.core.memory import Span
from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout

log = get_logger(__name__)

DEFAULT_WORKSPACE_BYTES = 32 << 20
_PAGE = 4096


def _cublaslt_candidates() -> list[str]:
    """libcublasLt from NVIDIA's wheels (nvidia/cu13/lib for CUDA 13, nvidia/cublas/lib for CUDA 12)."""
    return wheel_libraries((("cu13/lib", "libcublasLt.so.13"), ("cublas/lib", "libcublasLt.so.13"),
                            ("cublas/lib", "libcublasLt.so.12")))


class _HostSite:
    """One h2d_copy call: destination addresses, and the host addresses its memcpy nodes read now."""

    def __init__(self, where_: str, buffer: int, data: DTensor, label_bytes: int, dst: tuple[int, int],
                 packed: bool = False) -> None:
        self.where = where_
        self.buffer = buffer
        self.packed = packed  # progressive resizing: the samples packed at data's shape from the buffer's start
        self.data = data
        self.label_bytes = label_bytes
        self.data_bytes = data.nbytes
        self.dst = dst
        self.src: tuple[int, int] = (0, 0)
        self.bound = False
        self.graph: Any = None  # the native Graph once captured
        self.placeholder: Any = None  # a PinnedBuffer read before any host buffer is bound

    def source(self, buffers: Sequence[HostBuffer]) -> tuple[int, int]:
        labels, data = buffers[self.buffer]
        n = self.data.shape.n
        name = "AB"[self.buffer]
        problem = host_data_problem(data.shape, self.data.shape.dims, self.packed, data.flags.c_contiguous)
        if problem is not None:
            raise ShapeError(f"{self.where}: host buffer {name} data {data.shape} cannot supply "
                             f"{self.data.shape} ({problem})")
        if data.dtype != self.data.dtype.np_dtype:
            raise DTypeError(f"{self.where}: host buffer {name} data is {data.dtype}, the device tensor is "
                             f"{self.data.dtype.name}; the CUDA backend copies bytes and does not convert")
        if len(labels) < n:
            raise ShapeError(f"{self.where}: host buffer {name} has {len(labels)} labels, {n} are needed")
        return labels.ctypes.data, data.ctypes.data


class CudaGraph(CapturedGraph):
    """A captured graph: the native executable graph and everything it reads (kept alive with it)."""

    __slots__ = ("graph", "ops", "stream", "sites")

    def __init__(self, name: str, backend: CudaBackend, graph: Any, ops: list, calls: tuple[OpCall, ...],
                 stream: int, sites: list[_HostSite]) -> None:
        super().__init__(name, backend, calls)
        self.graph = graph
        self.ops = ops
        self.stream = stream
        self.sites = sites

    @property
    def num_nodes(self) -> int:
        """Nodes of the instantiated CUDA graph (kernels, copies, memsets)."""
        return 0 if self.graph is None else int(self.graph.num_nodes)

    @property
    def depth(self) -> int:
        """Nodes on its longest dependency path: num_nodes when everything runs in a chain, fewer when
        branches run side by side."""
        return 0 if self.graph is None else int(self.graph.depth)

    def __repr__(self) -> str:
        return f"CudaGraph({self.name!r}, {len(self.calls)} ops, {self.num_nodes} nodes)"


class CudaBackend:
    name = "cuda"
    streams = True  # graphs run on the context's streams, ordered by events

    def __init__(self, device: int = 0, use_tf32: bool = False, workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
                 collective: Collective | None = None, nccl: NcclCollective | None = None) -> None:
        """``collective``: the host collective of the ranks (the task's gloo group); ``nccl``: the device
        communicator that range_allreduce_mean runs on (an NcclCollective on this device; None: one rank
        only)."""
        tr_env.check_native()  # the variables the native code reads, parsed strictly first (C's atol is not)
        require_cuda(device)
        if nccl is not None:
            if not isinstance(nccl, NcclCollective):
                raise ConfigError(f"nccl must be a tr.backend.cuda.nccl.NcclCollective, got {type(nccl).__name__}")
            if nccl.device != device:
                raise ConfigError(f"the NCCL communicator is on CUDA device {nccl.device}, the backend on {device}")
            if collective is not None and int(collective.world_size) != nccl.world_size:
                raise ConfigError(f"the collective has world size {collective.world_size} but the NCCL "
                                  f"communicator {nccl.world_size}; expected the same ranks")
        native = require_native()
        if not hasattr(native, "Context"):
            raise DeviceUnavailableError("CUDA unavailable: tr.backend._native was built without the CUDA ops")
        self.native = native
        self.device = device
        self.use_tf32 = bool(use_tf32)
        self.conv_autotune: bool | None = None  # None: TR_CUDNN_AUTOTUNE decides (tr.backend.cuda.cudnn.autotune)
        self.attention_deterministic = True  # cuDNN's deterministic attention backward (attention_engines)
        self.attention_sdpa = True  # FP16/BF16 attention may run cuDNN's SDPA (False: tr's kernels everywhere)
        self.collective = collective
        self.nccl = nccl
        native.add_cublaslt_candidates(_cublaslt_candidates())
        self.ctx = native.Context(device, int(workspace_bytes))
        self.launches = 0
        self.host_time_s = 0.0
        self._arena: Any = None
        self._layout: ArenaLayout | None = None
        self._host: tuple[HostBuffer, ...] | None = None
        self._pinned: list[Any] = []  # PinnedBuffers handed out by host_buffers()
        self._registered: list[int] = []  # page-locked foreign host ranges (start addresses)
        self._sites: list[_HostSite] = []

    def configure(self, tf32: bool | None = None, conv_autotune: bool | None = None,
                  attention_deterministic: bool | None = None, attention_sdpa: bool | None = None) -> None:
        """Settings read at capture (graphs captured later): ``tf32`` lets FP32 GEMMs use TF32 tensor cores;
        ``conv_autotune`` times cuDNN's candidate engines and keeps the fastest (an opt-in: the choice may
        differ between machines, and so may the bytes) instead of the deterministic rule;
        ``attention_deterministic=False`` lets FP16/BF16 attention backwards use cuDNN's non-deterministic
        algorithm (an opt-in: faster, and other bytes on every run; tr.backend.cuda.attention_engines);
        ``attention_sdpa=False`` keeps FP16/BF16 attention on tr's kernels (the CPU backend's float32 arithmetic
        rounded once, slower than cuDNN's flash attention, whose probabilities are rounded to 16 bits); None leaves
        each as it is (conv_autotune starts unset: TR_CUDNN_AUTOTUNE decides; attention_deterministic and
        attention_sdpa start True)."""
        if tf32 is not None:
            self.use_tf32 = bool(tf32)
        if conv_autotune is not None:
            self.conv_autotune = bool(conv_autotune)
        if attention_deterministic is not None:
            self.attention_deterministic = bool(attention_deterministic)
        if attention_sdpa is not None:
            self.attention_sdpa = bool(attention_sdpa)

    def conv_engines(self) -> list[ConvEngine]:
        """The cuDNN engines (or direct kernels) the convolutions captured so far use, by plan key
        (tr.backend.cuda.conv_engines)."""
        return used_by(self)

    def attention_engines(self) -> list[AttentionEngine]:
        """The engines (cuDNN's SDPA plans or tr's kernels) the attention ops captured so far use, by plan key
        (tr.backend.cuda.attention_engines)."""
        return attention_engines.used_by(self)

    def close(self) -> None:
        """Un-pin the host memory that bind_host_buffers page-locked (also done when the backend is deleted)."""
        registered, self._registered = self._registered, []
        for start in registered:
            self.native.host_unregister(start)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the extension may already be gone
            pass

    # --- arena ----------------------------------------------------------------------------------------
    @property
    def layout(self) -> ArenaLayout | None:
        return self._layout

    @property
    def world_size(self) -> int:
        if self.nccl is not None:
            return self.nccl.world_size
        return 1 if self.collective is None else int(self.collective.world_size)

    @property
    def arena_ptr(self) -> int:
        if self._arena is None:
            raise BackendError("the CUDA backend has no arena yet; call allocate(layout) first")
        return int(self._arena.ptr)

    def allocate(self, layout: ArenaLayout) -> None:
        if self._arena is not None:
            raise BackendError("the CUDA backend already holds an arena; make a new backend for another plan")
        layout.validate()
        needed = -(-int(layout.total_bytes) // 256) * 256
        free = int(self.native.free_memory(self.device))
        if needed > free:
            raise OutOfMemoryError(
                f"the plan needs {needed} bytes of device memory for its arena but CUDA device {self.device} has "
                f"{free} bytes free; reduce the batch size or the model")
        self._arena = self.native.DeviceArena(max(needed, 256), self.device)
        self._arena.memset(0)
        self._layout = layout

    def _check_tensor(self, t: DTensor) -> None:
        if not isinstance(t, DTensor):
            raise BackendError(f"expected a DTensor, got {type(t).__name__}")
        if not t.placed:
            raise BackendError(f"{t!r} has no offset; the memory plan was not finalised")
        if self._arena is None:
            raise BackendError("the CUDA backend has no arena yet; call allocate(layout) first")
        if t.offset + t.nbytes > int(self._arena.size):
            raise BackendError(f"{t!r} ends at byte {t.offset + t.nbytes}, past the arena's {self._arena.size}")

    def view(self, t: DTensor) -> np.ndarray:
        raise BackendError(f"{t!r} lives in device memory and cannot be viewed from the host; use read() or write()")

    def cupy_view(self, t: DTensor) -> Any:
        """A zero-copy CuPy array over ``t`` in the arena (for debugging and tests; needs cupy).

        It aliases device memory that captured graphs write: read it after ``synchronize()``. The arena
        outlives the view only while this backend is alive.
        """
        self._check_tensor(t)
        try:
            import cupy
        except ImportError as e:
            raise BackendError("cupy_view needs CuPy (pip install cupy-cuda13x, or the 'cuda13' extra)") from e
        if t.dtype is DType.BF16:
            raise BackendError(f"{t!r}: CuPy has no bfloat16; read() it instead")
        mem = cupy.cuda.UnownedMemory(self.arena_ptr + t.offset, t.nbytes, self, self.device)
        return cupy.ndarray(t.shape.dims, dtype=t.dtype.np_dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))

    def write(self, t: DTensor, array: Any) -> None:
        self._check_tensor(t)
        a = np.asarray(array)
        if a.size != t.numel:
            raise ShapeError(f"cannot write {a.shape} ({a.size} elements) into {t!r} ({t.numel} elements)")
        host = np.empty(t.shape.dims, t.dtype.np_dtype)
        a = a.reshape(host.shape)
        if t.dtype is DType.BF16 and a.dtype != np.uint16:
            if a.dtype.kind != "f":
                raise DTypeError(f"cannot write {a.dtype} values into BF16 tensor {t!r}")
            converter(DType.FP32, DType.BF16)(a.astype(np.float32), host)
        else:
            try:
                np.copyto(host, a, casting="same_kind")
            except TypeError as e:
                raise DTypeError(f"cannot write {a.dtype} values into {t.dtype.name} tensor {t!r}: {e}") from None
        self.write_bytes(t.offset, host)

    def read(self, t: DTensor) -> np.ndarray:
        self._check_tensor(t)
        out = np.empty(t.shape.dims, t.dtype.np_dtype)
        self.synchronize()
        self._arena.download(out, t.offset)
        return out

    def write_bytes(self, offset: int, data: np.ndarray) -> None:
        """Copy a C-contiguous host array's bytes into the arena at ``offset`` (after pending work)."""
        self.synchronize()
        self._arena.upload(np.ascontiguousarray(data), int(offset))

    def read_bytes(self, offset: int, nbytes: int) -> np.ndarray:
        out = np.empty(int(nbytes), np.uint8)
        self.synchronize()
        self._arena.download(out, int(offset))
        return out

    def read_span(self, s: Span) -> np.ndarray:
        """The bytes of the regions ``s`` selects (a host copy, uint8; empty when it selects none)."""
        if self._layout is None:
            raise BackendError("the CUDA backend has no arena yet; call allocate(layout) first")
        lo, hi = self._layout.span(s)
        return self.read_bytes(lo, hi - lo)

    # --- graphs ---------------------------------------------------------------------------------------
    def capture(self, name: str, calls: Sequence[OpCall], stream: StreamKind | int = StreamKind.COMP_1) -> CudaGraph:
        return self.capture_branches(name, [Branch(StreamKind(int(stream)), tuple(calls))])

    def capture_branches(self, name: str, branches: Sequence[Branch]) -> CudaGraph:
        """One CUDA graph; each branch is recorded on its stream after the marks of the branches it waits for,
        so branches with no path between them become parallel paths of the graph. Launched on the first
        branch's stream."""
        layout = self._layout
        if layout is None:
            raise BackendError(f"cannot capture graph {name!r}: call allocate(layout) first")
        check_branches(name, branches)
        impls = op_impls("cuda")
        first_site = len(self._sites)
        bound: list[list[tuple[Any, str]]] = []
        try:
            first = 0
            for b in branches:
                bound.append(self._bind_calls(name, b.calls, impls, layout, first))
                first += len(b.calls)
        except BaseException:
            del self._sites[first_site:]  # h2d sites of a capture that failed
            raise
        sites = self._sites[first_site:]
        origin = int(branches[0].stream)
        streams = [int(b.stream) for b in branches]
        marked = {j for i, b in enumerate(branches) for j in b.after if streams[j] != streams[i]}
        ops = [op for branch_ops in bound for op, _ in branch_ops]
        graph = None
        if ops:
            graph = self.native.Graph(self.ctx, origin)
            graph.begin()
            marks: dict[int, int] = {}
            for i, (b, branch_ops) in enumerate(zip(branches, bound)):
                for j in b.after:
                    if streams[j] != streams[i]:
                        graph.wait(streams[i], marks[j])
                for op, at in branch_ops:
                    try:
                        graph.record(op, streams[i])  # on failure the native side ends and discards the capture
                    except TrError as e:
                        del self._sites[first_site:]
                        raise type(e)(f"{at}: capture failed: {e}") from e
                if i in marked:
                    marks[i] = graph.mark(streams[i])
            try:
                graph.end()
            except TrError as e:
                del self._sites[first_site:]
                raise type(e)(f"graph {name!r}: instantiating {len(ops)} captured ops failed: {e}") from e
        for site in sites:
            site.graph = graph
        return CudaGraph(name, self, graph, ops, tuple(serial_calls(branches)), origin, sites)

    def _bind_calls(self, name: str, calls: Sequence[OpCall], impls: Any, layout: ArenaLayout, first: int = 0
                    ) -> list[tuple[Any, str]]:
        """Check and bind every call to its native op(s): [(op, where)]; ``first`` is the graph index of
        calls[0] (for messages)."""
        ops: list[tuple[Any, str]] = []
        for i, call in enumerate(calls, first):
            made, at = bind_call(self, "CUDA", CudaBinder, impls, layout, name, i, call)
            if made is None:
                continue
            for op in made if isinstance(made, list) else [made]:
                ops.append((op, at))
        return ops

    def launch(self, graph: CudaGraph, stream: StreamKind | int | None = None) -> None:
        if not isinstance(graph, CudaGraph) or graph.backend is not self:
            raise BackendError(f"{graph!r} was not captured by this CUDA backend")
        t0 = perf_counter()
        try:
            if graph.sites and self._host is None:
                raise BackendError(f"{graph.sites[0].where}: no host buffers are bound; call bind_host_buffers first")
            if graph.graph is not None:
                graph.graph.launch(graph.stream if stream is None else int(stream))
        finally:
            self.launches += 1
            self.host_time_s += perf_counter() - t0

    def synchronize(self) -> None:
        self.ctx.synchronize()

    def reset_counters(self) -> None:
        self.launches = 0
        self.host_time_s = 0.0

    def event(self) -> Any:
        """A CUDA event: ``record(kind)``, ``wait(kind)`` (that stream waits), ``synchronize()``, ``elapsed_ms``."""
        return self.native.Event(self.ctx)

    # --- host staging ---------------------------------------------------------------------------------
    def host_buffers(self, batch: int, sample_shape: Sequence[int], dtype: DType | str | np.dtype = DType.FP32
                     ) -> tuple[HostBuffer, HostBuffer]:
        """Two pinned staging pairs (A, B) of (labels INT32 [batch], data [batch, *sample_shape]) for the
        feeder to fill; bind them with ``bind_host_buffers``."""
        dt = DType.parse(dtype)
        shape = (int(batch), *(int(d) for d in sample_shape))
        if len(shape) != 4 or min(shape) < 1:
            raise ShapeError(f"host buffers need batch >= 1 and a sample shape (H, W, C), got {shape}")
        label_bytes = -(-4 * shape[0] // 256) * 256
        data_bytes = int(np.prod(shape)) * dt.itemsize
        out = []
        for _ in range(2):
            buf = self.native.PinnedBuffer(label_bytes + data_bytes)
            self._pinned.append(buf)
            raw = buf.array()
            raw.fill(0)
            labels = raw[:4 * shape[0]].view(np.int32)
            data = raw[label_bytes:label_bytes + data_bytes].view(dt.np_dtype).reshape(shape)
            out.append((labels, data))
        return out[0], out[1]

    def _is_pinned(self, a: np.ndarray) -> bool:
        lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
        return any(p.ptr <= lo and hi <= p.ptr + p.size for p in self._pinned)

    def _page_lock(self, arrays: list[np.ndarray]) -> None:
        """Page-lock the host arrays that are not ours (merged page ranges); drop earlier registrations."""
        self.close()
        ranges = sorted((a.ctypes.data // _PAGE * _PAGE, -(-(a.ctypes.data + a.nbytes) // _PAGE) * _PAGE)
                        for a in arrays if a.nbytes and not self._is_pinned(a))
        merged: list[list[int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for lo, hi in merged:
            try:
                self.native.host_register(lo, hi - lo)
            except TrError as e:
                raise BackendError(f"cannot page-lock host buffer memory [{lo:#x}, {hi:#x}) for device copies: {e}; "
                                   "use CudaBackend.host_buffers() to get pinned buffers") from e
            self._registered.append(lo)

    def bind_host_buffers(self, buffers: Sequence[HostBuffer]) -> None:
        bufs = check_host_buffers(buffers)
        for k, (labels, data) in enumerate(bufs):
            if not (labels.flags.c_contiguous and data.flags.c_contiguous):
                raise BackendError(f"host buffer {'AB'[k]} arrays must be C-contiguous")
        sources = [site.source(bufs) for site in self._sites]  # validate every site before changing anything
        self.synchronize()  # no graph may be reading the old buffers while they are unpinned
        self._page_lock([a for buf in bufs for a in buf])
        for site, src in zip(self._sites, sources):
            self._repoint(site, src)
        self._host = bufs

    def _repoint(self, site: _HostSite, src: tuple[int, int]) -> None:
        if site.graph is not None:
            # another site of the same graph reading the same address may have moved these nodes already
            for old, new, nbytes in zip(site.src, src, (site.label_bytes, site.data_bytes)):
                if nbytes and old != new:
                    site.graph.set_memcpy_source(old, new)
        site.src = src
        site.bound = True

    def add_host_site(self, b: CudaBinder, buffer: int, packed: bool = False) -> _HostSite:
        """Called by h2d_copy at capture: the site reads the bound buffers, or a zeroed placeholder until then."""
        data = b.tensor("data")
        label_bytes = b.tensor("labels").numel * 4
        site = _HostSite(b.where, buffer, data, label_bytes, (b.ptr("labels"), b.ptr("data")), packed)
        if self._host is not None:
            site.src = site.source(self._host)
            site.bound = True
        else:
            pad = -(-label_bytes // 256) * 256
            site.placeholder = self.native.PinnedBuffer(pad + max(site.data_bytes, 1))
            site.placeholder.array().fill(0)
            site.src = (site.placeholder.ptr, site.placeholder.ptr + pad)
        self._sites.append(site)
        return site

    def __repr__(self) -> str:
        size = "no arena" if self._arena is None else f"arena {self._arena.size} B"
        return f"CudaBackend(device={self.device}, {size}, tf32={self.use_tf32})"
