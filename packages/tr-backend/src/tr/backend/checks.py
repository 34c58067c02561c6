"""Capture-time validation of op calls, shared by every backend.

Each check raises BackendError with a message that starts with :func:`where` (graph, op, index, layer),
so a plan bug is reported once, at capture, and never surfaces as a wrong number at run time.
"""

from __future__ import annotations

import numpy as np

from tr.core.errors import BackendError, ShapeError
from tr.core.memory import Span
from tr.core.ops import CATALOGUE, OpCall, OpDef
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout


def where(graph: str, index: int, call: OpCall) -> str:
    """``graph 'x', op #3 fc_fwd (layer 2, fc1)``: the prefix of every capture or launch error."""
    layer = f"layer {call.layer}" if call.layer >= 0 else "no layer"
    label = f", {call.label}" if call.label else ""
    return f"graph {graph!r}, op #{index} {call.op} ({layer}{label})"


def byte_range(value: DTensor | Span, layout: ArenaLayout) -> tuple[int, int]:
    """[start, end) bytes an argument touches: a tensor's compact elements or a span's regions."""
    if isinstance(value, Span):
        return layout.span(value)
    return value.offset, value.offset + value.nbytes


def _check_tensor(name: str, t: object, layout: ArenaLayout, at: str) -> None:
    if not isinstance(t, DTensor):
        raise BackendError(f"{at}: argument {name!r} must be a DTensor, got {type(t).__name__}")
    if not t.placed:
        raise BackendError(f"{at}: argument {name!r} = {t!r} has no offset (the memory plan was not finalised)")
    if not t.allocated:
        raise BackendError(f"{at}: argument {name!r} = {t!r} is not allocated (slot_bytes 0)")
    if t.offset % t.dtype.itemsize:
        raise BackendError(f"{at}: argument {name!r} = {t!r} offset is not a multiple of {t.dtype.itemsize}")
    bounds = layout.regions.get(t.region)
    if bounds is None:
        raise BackendError(f"{at}: argument {name!r} = {t!r} lies in region {t.region.name}, which the arena "
                           f"layout does not hold (it has {', '.join(r.name for r in layout.regions)})")
    lo, hi = bounds
    if t.offset < lo or t.offset + t.nbytes > hi:
        raise BackendError(
            f"{at}: argument {name!r} = {t!r} needs bytes [{t.offset}, {t.offset + t.nbytes}) but region "
            f"{t.region.name} is [{lo}, {hi})"
        )


def _check_span(name: str, s: object, layout: ArenaLayout, at: str) -> None:
    if not isinstance(s, Span):
        raise BackendError(f"{at}: argument {name!r} must be a Span, got {type(s).__name__}")
    lo, hi = layout.span(s)
    if hi < lo or hi > layout.total_bytes:
        raise BackendError(f"{at}: span {name!r} = {s!r} resolves to [{lo}, {hi}) outside the arena")


def _may_share(d: OpDef, a: str, b: str) -> bool:
    return (a, b) in d.inplace or (b, a) in d.inplace


def check_call(call: OpCall, layout: ArenaLayout, graph: str, index: int) -> OpDef:
    """Validate ``call`` against the catalogue and the arena layout; return its OpDef."""
    at = where(graph, index, call)
    d = CATALOGUE.get(call.op)
    if d is None:
        raise BackendError(f"{at}: op {call.op!r} is not in the op catalogue")
    touched: list[tuple[str, str, int, int]] = []
    for a in d.args:
        v = call.args.get(a.name)
        if v is None:
            if not a.optional:
                raise BackendError(f"{at}: required argument {a.name!r} is missing")
            continue
        if a.kind == "span":
            _check_span(a.name, v, layout, at)
        else:
            _check_tensor(a.name, v, layout, at)
        lo, hi = byte_range(v, layout)
        if hi > lo:
            touched.append((a.name, a.role, lo, hi))
    for k in call.attrs:
        if k not in d.attrs:
            raise BackendError(f"{at}: unknown attribute {k!r} (expects {list(d.attrs)})")
    # An output may share bytes with another argument only where the catalogue says "inplace".
    for i, (na, ra, la, ha) in enumerate(touched):
        for nb, rb, lb, hb in touched[i + 1:]:
            if ra == "in" and rb == "in":
                continue
            if la < hb and lb < ha and not _may_share(d, na, nb):
                raise BackendError(
                    f"{at}: arguments {na!r} [{la}, {ha}) and {nb!r} [{lb}, {hb}) overlap, and the catalogue "
                    f"does not allow {call.op} to run in place on them"
                )
    return d


def check_host_buffers(buffers) -> tuple:
    """The two host staging buffers (A, B) of bind_host_buffers: (labels int32 [B], data [B, H, W, C])."""
    bufs = tuple(buffers)
    if len(bufs) != 2:
        raise BackendError(f"bind_host_buffers needs two buffers (A, B), got {len(bufs)}")
    for k, buf in enumerate(bufs):
        if len(buf) != 2:
            raise BackendError(f"host buffer {'AB'[k]} must be a pair (labels, data), got {len(buf)} items")
        labels, data = buf
        if not isinstance(labels, np.ndarray) or not isinstance(data, np.ndarray):
            raise BackendError(f"host buffer {'AB'[k]} must hold numpy arrays")
        if labels.ndim != 1 or labels.dtype != np.int32:
            raise ShapeError(f"host buffer {'AB'[k]} labels must be int32 [B], got {labels.dtype} {labels.shape}")
        if data.ndim != 4 or len(labels) != data.shape[0]:
            raise ShapeError(
                f"host buffer {'AB'[k]} data must be [B, H, W, C] with B = {len(labels)}, got {data.shape}")
    return bufs
