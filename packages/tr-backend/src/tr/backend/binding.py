"""What every backend's op builders share: reading one op call's arguments and attributes, and the
sliding-window geometry of convolution and pooling. Errors name the graph, the op and its layer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

import numpy as np

from tr.backend.checks import check_call
from tr.backend.checks import where as _where
from tr.core.dtype import DType
from tr.core.errors import BackendError, ShapeError, TrError
from tr.core.ops import OpCall, OpDef
from tr.tensor.dtensor import DTensor

REQUIRED = object()
FLOATS = (DType.FP32, DType.FP16, DType.BF16)


def pair(value: Any, what: str, b: CallBinder) -> tuple[int, int]:
    """An int or a 2-sequence of ints as (height, width)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if is_int(value):
        return int(value), int(value)
    if isinstance(value, Sequence) and len(value) == 2 and all(is_int(v) for v in value):
        return int(value[0]), int(value[1])
    b.fail(f"{what} must be an int or a pair of ints, got {value!r}")


def bind_call(backend: Any, label: str, binder: type[CallBinder], impls: Any, layout: Any, graph: str, index: int,
              call: OpCall) -> tuple[Any, str]:
    """Check one call against the catalogue and the arena layout and run its backend's builder: (what the builder
    made, where the call is). Both backends capture through it; their builders keep only execution."""
    opdef = check_call(call, layout, graph, index)
    impl = impls.get(call.op)
    if impl is None:
        raise BackendError(f"{_where(graph, index, call)}: the {label} backend has no implementation of {call.op!r}")
    b = binder(backend, graph, index, call, opdef)
    try:
        return impl(b), b.where
    except TrError:
        raise
    except Exception as e:  # a library's complaint while binding (numpy's, or a bug): report it with its op
        raise BackendError(f"{b.where}: {type(e).__name__}: {e}") from e


class CallBinder:
    """One op call at capture time: its arguments and attributes, checked, with errors that say where."""

    def __init__(self, backend: Any, graph: str, index: int, call: OpCall, opdef: OpDef) -> None:
        self.backend = backend
        self.graph = graph
        self.index = index
        self.call = call
        self.opdef = opdef
        self.where = _where(graph, index, call)

    # --- errors and attributes ----------------------------------------------------------------------
    def fail(self, msg: str, exc: type[Exception] = BackendError) -> NoReturn:
        raise exc(f"{self.where}: {msg}")

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        v = self.call.attrs.get(name, default)
        if v is REQUIRED:
            self.fail(f"attribute {name!r} is required")
        return v

    def float_attr(self, name: str, default: Any = REQUIRED, lo: float | None = None,
                   hi: float | None = None) -> float:
        v = self.attr(name, default)
        try:
            f = float(v)
        except (TypeError, ValueError):
            self.fail(f"attribute {name!r} must be a number, got {v!r}")
        if not math.isfinite(f) or (lo is not None and f < lo) or (hi is not None and f > hi):
            self.fail(f"attribute {name!r} = {v!r} is out of range [{lo}, {hi}]")
        return f

    def int_attr(self, name: str, default: Any = REQUIRED, lo: int | None = None) -> int:
        v = self.attr(name, default)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (lo is not None and v < lo):
            self.fail(f"attribute {name!r} must be an integer{'' if lo is None else f' >= {lo}'}, got {v!r}")
        return int(v)

    def bool_attr(self, name: str, default: Any = REQUIRED) -> bool:
        v = self.attr(name, default)
        if not isinstance(v, (bool, np.bool_)):
            self.fail(f"attribute {name!r} must be True or False, got {v!r}")
        return bool(v)

    # --- tensors --------------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return self.call.args.get(name) is not None

    def tensor(self, name: str) -> DTensor:
        t = self.call.args.get(name)
        if t is None:
            self.fail(f"argument {name!r} is missing")
        return t

    def dtype(self, name: str) -> DType:
        return self.tensor(name).dtype

    def span_size(self, name: str, itemsize: int = 1) -> int:
        """Elements of ``itemsize`` bytes in a span argument (the backend's arena layout)."""
        lo, hi = self.backend.layout.span(self.call.args[name])
        if (hi - lo) % itemsize:
            self.fail(f"span {name!r} has {hi - lo} bytes, not a multiple of {itemsize}")
        return (hi - lo) // itemsize

    def same_numel(self, *names: str) -> int:
        """The first tensor's element count, which every other given one must have (absent ones are skipped)."""
        n = self.tensor(names[0]).numel
        for name in names[1:]:
            if self.has(name) and self.tensor(name).numel != n:
                self.fail(f"{name} {self.tensor(name).shape} must match {names[0]} {self.tensor(names[0]).shape}",
                          ShapeError)
        return n

    def expect_numel(self, name: str, numel: int) -> None:
        t = self.tensor(name)
        if t.numel != numel:
            self.fail(f"argument {name!r} {t.shape} has {t.numel} elements; expected {numel}", ShapeError)

    def expect_dtype(self, name: str, *allowed: DType) -> DType:
        dt = self.dtype(name)
        if dt not in allowed:
            self.fail(f"argument {name!r} has dtype {dt.name}; expected {' or '.join(d.name for d in allowed)}")
        return dt

    def expect_float(self, *names: str) -> None:
        for n in names:
            if self.has(n):
                self.expect_dtype(n, *FLOATS)


@dataclass(frozen=True)
class Geometry:
    """A sliding window over NHWC with symmetric zero padding; p, q are the output height and width."""

    n: int
    h: int
    w: int
    c: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    p: int
    q: int

    def as_ints(self) -> dict[str, int]:
        return asdict(self)


def window_geometry(b: CallBinder, x: str, y: str, kernel: tuple[int, int] | None = None) -> Geometry:
    """Geometry from the ``kernel``/``stride``/``padding`` attributes (the kernel may come from the weight),
    checked against x and y ([N, P, Q, *])."""
    kh, kw = kernel if kernel is not None else pair(b.attr("kernel"), "kernel", b)
    if kernel is not None and "kernel" in b.call.attrs and pair(b.attr("kernel"), "kernel", b) != kernel:
        b.fail(f"attribute kernel={b.attr('kernel')!r} disagrees with the weight's {kernel}", ShapeError)
    sh, sw = pair(b.attr("stride", 1), "stride", b)
    ph, pw = pair(b.attr("padding", 0), "padding", b)
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        b.fail(f"kernel {kh}x{kw}, stride {sh}x{sw}, padding {ph}x{pw}: kernel and stride must be >= 1, "
               f"padding >= 0")
    if ph >= kh or pw >= kw:
        b.fail(f"padding {ph}x{pw} must be smaller than the kernel {kh}x{kw}")
    n, h, w, c = b.tensor(x).shape.dims
    p, q = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if p < 1 or q < 1:
        b.fail(f"a {kh}x{kw} window with padding {ph}x{pw} does not fit input {b.tensor(x).shape}", ShapeError)
    yt = b.tensor(y)
    if yt.shape.dims[:3] != (n, p, q):
        b.fail(f"{y} {yt.shape} must be [{n},{p},{q},*] for input {b.tensor(x).shape}, kernel {kh}x{kw}, "
               f"stride {sh}x{sw}, padding {ph}x{pw}", ShapeError)
    return Geometry(n, h, w, c, kh, kw, sh, sw, ph, pw, p, q)
