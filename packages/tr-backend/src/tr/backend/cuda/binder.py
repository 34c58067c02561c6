"""Binding one op call to a native CUDA op at capture time.

An op implementation is a builder ``impl(b: CudaBinder) -> native op | list of native ops | None``. It
checks shapes and dtypes like the CPU backend does (``b.fail`` raises naming the graph, op and layer),
resolves its DTensors and spans to device addresses ONCE, and asks the extension for the native op
(``b.native``). What the builder returns is recorded into the graph; at launch nothing of it runs in Python.

Device tensors use the CPU backend's compact NHWC layout, so both backends read the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from tr.backend.checks import where as _where
from tr.core.dtype import DType
from tr.core.errors import BackendError, ShapeError, TrError
from tr.core.ops import OpCall, OpDef
from tr.tensor.dtensor import DTensor

if TYPE_CHECKING:
    from tr.backend.cuda.backend import CudaBackend

# tr.core.dtype.DType -> the native code (csrc/ops/op.hpp, enum class DT)
DTYPE_CODES = {DType.FP32: 0, DType.FP16: 1, DType.BF16: 2, DType.INT8: 3, DType.INT32: 4}
FLOATS = (DType.FP32, DType.FP16, DType.BF16)
_REQUIRED = object()


def pair(value: Any, what: str, b: CudaBinder) -> tuple[int, int]:
    """An int or a 2-sequence of ints as (height, width)."""
    if isinstance(value, bool):
        b.fail(f"{what} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int):
        return value, value
    if isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                for v in value):
        return int(value[0]), int(value[1])
    b.fail(f"{what} must be an int or a pair of ints, got {value!r}")


class CudaBinder:
    def __init__(self, backend: CudaBackend, graph: str, index: int, call: OpCall, opdef: OpDef) -> None:
        self.backend = backend
        self.graph = graph
        self.index = index
        self.call = call
        self.opdef = opdef
        self.where = _where(graph, index, call)

    # --- errors and attributes ----------------------------------------------------------------------
    def fail(self, msg: str, exc: type[Exception] = BackendError) -> NoReturn:
        raise exc(f"{self.where}: {msg}")

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        v = self.call.attrs.get(name, default)
        if v is _REQUIRED:
            self.fail(f"attribute {name!r} is required")
        return v

    def float_attr(self, name: str, default: Any = _REQUIRED, lo: float | None = None,
                   hi: float | None = None) -> float:
        v = self.attr(name, default)
        try:
            f = float(v)
        except (TypeError, ValueError):
            self.fail(f"attribute {name!r} must be a number, got {v!r}")
        if f != f or f in (float("inf"), float("-inf")) or (lo is not None and f < lo) or (hi is not None and f > hi):
            self.fail(f"attribute {name!r} = {v!r} is out of range [{lo}, {hi}]")
        return f

    # --- tensors ---------------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return self.call.args.get(name) is not None

    def tensor(self, name: str) -> DTensor:
        t = self.call.args.get(name)
        if t is None:
            self.fail(f"argument {name!r} is missing")
        return t

    def dtype(self, name: str) -> DType:
        return self.tensor(name).dtype

    def expect_dtype(self, name: str, *allowed: DType) -> DType:
        dt = self.dtype(name)
        if dt not in allowed:
            self.fail(f"argument {name!r} has dtype {dt.name}; the CUDA backend expects "
                      f"{' or '.join(d.name for d in allowed)}")
        return dt

    def expect_float(self, *names: str) -> None:
        for n in names:
            if self.has(n):
                self.expect_dtype(n, *FLOATS)

    def expect_numel(self, name: str, numel: int) -> None:
        t = self.tensor(name)
        if t.numel != numel:
            self.fail(f"argument {name!r} {t.shape} has {t.numel} elements; expected {numel}", ShapeError)

    def same_numel(self, *names: str) -> int:
        n = self.tensor(names[0]).numel
        for name in names[1:]:
            if self.has(name) and self.tensor(name).numel != n:
                self.fail(f"{name} {self.tensor(name).shape} must match {names[0]} {self.tensor(names[0]).shape}",
                          ShapeError)
        return n

    # --- device addresses ------------------------------------------------------------------------------
    def ptr(self, name: str) -> int:
        return self.backend.arena_ptr + self.tensor(name).offset

    def span(self, name: str) -> tuple[int, int]:
        """(device address, bytes) of a span argument."""
        lo, hi = self.backend.layout.span(self.call.args[name])
        return self.backend.arena_ptr + lo, hi - lo

    def span_elems(self, name: str, itemsize: int = 4) -> tuple[int, int]:
        """(device address, elements of ``itemsize`` bytes) of a span argument."""
        ptr, nbytes = self.span(name)
        if nbytes % itemsize:
            self.fail(f"span {name!r} has {nbytes} bytes, not a multiple of {itemsize}")
        return ptr, nbytes // itemsize

    # --- native ops ------------------------------------------------------------------------------------
    def native(self, op: str, tensors: Iterable[str] = (), ptrs: Mapping[str, int] | None = None,
               ints: Mapping[str, int] | None = None, floats: Mapping[str, float] | None = None) -> Any:
        """The native op ``op``: ``tensors`` (argument names; absent optional ones are skipped) pass their
        address and dtype code (``<name>_dt``); ``ptrs``, ``ints`` and ``floats`` pass the rest by name."""
        p: dict[str, int] = dict(ptrs or {})
        i: dict[str, int] = {k: int(v) for k, v in (ints or {}).items()}
        for name in tensors:
            if self.has(name):
                p[name] = self.ptr(name)
                i[f"{name}_dt"] = DTYPE_CODES[self.dtype(name)]
        f = {k: float(v) for k, v in (floats or {}).items()}
        try:
            return self.backend.native.make_op(self.backend.ctx, op, p, i, f)
        except TrError as e:
            raise type(e)(f"{self.where}: {e}") from e
