"""Binding one op call to a native CUDA op at capture time.

An op implementation is a builder ``impl(b: CudaBinder) -> native op | list of native ops | None``. It
runs its family's rule (tr.backend.rules: the checks both backends share; ``b.fail`` raises naming the graph,
op and layer),
resolves its DTensors and spans to device addresses ONCE, and asks the extension for the native op
(``b.native``). What the builder returns is recorded into the graph; at launch nothing of it runs in Python.

Device tensors use the CPU backend's compact NHWC layout, so both backends read the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tr.backend.binding import FLOATS, CallBinder, pair  # noqa: F401  (re-exported for op modules)
from tr.core.errors import TrError

if TYPE_CHECKING:
    from tr.backend.cuda.backend import CudaBackend

class CudaBinder(CallBinder):
    backend: CudaBackend

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
    def native_args(self, tensors: Iterable[str] = (), ptrs: Mapping[str, int] | None = None,
                    ints: Mapping[str, int] | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """The (pointers, integers) ``native`` passes: ``tensors`` (argument names; absent optional ones are
        skipped) add their address and dtype code (``<name>_dt``) to ``ptrs`` and ``ints``."""
        p: dict[str, int] = dict(ptrs or {})
        i: dict[str, int] = {k: int(v) for k, v in (ints or {}).items()}
        for name in tensors:
            if self.has(name):
                p[name] = self.ptr(name)
                i[f"{name}_dt"] = self.dtype(name).code
        return p, i

    def native(self, op: str, tensors: Iterable[str] = (), ptrs: Mapping[str, int] | None = None,
               ints: Mapping[str, int] | None = None, floats: Mapping[str, float] | None = None) -> Any:
        """The native op ``op``: ``tensors`` (argument names; absent optional ones are skipped) pass their
        address and dtype code (``<name>_dt``); ``ptrs``, ``ints`` and ``floats`` pass the rest by name."""
        p, i = self.native_args(tensors, ptrs, ints)
        f = {k: float(v) for k, v in (floats or {}).items()}
        try:
            return self.backend.native.make_op(self.backend.ctx, op, p, i, f)
        except TrError as e:
            raise type(e)(f"{self.where}: {e}") from e
