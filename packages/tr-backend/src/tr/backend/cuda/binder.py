"""Binding one op call to a native CUDA op at capture time.

An op implementation is a builder ``impl(b: CudaBinder) -> native op | list of native ops | None``. It
runs its family's rule (tr.backend.rules: the checks both backends share; ``b.fail`` raises naming the graph,
op and layer), resolves its DTensors and spans to device addresses ONCE, and asks the extension for the native
op by its typed record (``b.make(SIG, field=...)``, SIG declared in tr.backend.cuda.signatures). What the builder
returns is recorded into the graph; at launch nothing of it runs in Python.

Device tensors use the CPU backend's compact NHWC layout, so both backends read the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tr.backend.binding import FLOATS, CallBinder, pair  # noqa: F401  (re-exported for op modules)
from tr.backend.cuda.native import require_native
from tr.backend.cuda.signatures._types import NativeOp
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
    def dev(self, name: str) -> Any:
        """Tensor argument ``name`` as a native op's ``Dev`` (address, dtype code); None when it is an optional
        argument not given."""
        if not self.has(name):
            return None
        return require_native().Dev(self.ptr(name), self.dtype(name).code)

    def make(self, sig: NativeOp, **fields: Any) -> Any:
        """The native op ``sig`` (tr.backend.cuda.signatures) made from ``fields``, by keyword. A misspelt,
        missing or mistyped field is a ConfigError naming the op and the field, raised here."""
        try:
            sig.check(fields)
            args = getattr(require_native(), sig.cls)(**fields)
            return self.backend.native.make_op(self.backend.ctx, args)
        except TrError as e:
            raise type(e)(f"{self.where}: {e}") from e
