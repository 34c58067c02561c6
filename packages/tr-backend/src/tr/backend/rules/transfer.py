"""The rule of h2d_copy: host staging buffer 0 (A) or 1 (B), INT32 labels one per sample of ``data`` (the
first N samples of the buffer, N the batch of the data DTensor). ``packed``: the buffer's samples are of the
largest training side and this copy's are smaller (progressive resizing): the feeder writes them packed at the
data DTensor's shape from the buffer's start, so the copy reads its first N x H x W x C elements."""

from __future__ import annotations

from collections.abc import Sequence

from tr.backend.binding import CallBinder
from tr.core.dtype import DType


def h2d_copy(b: CallBinder) -> tuple[int, int, bool]:
    """(buffer, samples, packed)."""
    buffer = b.attr("buffer")
    if buffer not in (0, 1) or isinstance(buffer, bool):
        b.fail(f"attribute buffer must be 0 (A) or 1 (B), got {buffer!r}")
    packed = b.attr("packed", False)
    if not isinstance(packed, bool):
        b.fail(f"attribute packed must be True or False, got {packed!r}")
    b.expect_dtype("labels", DType.INT32)
    n = b.tensor("data").shape.n
    b.expect_numel("labels", n)
    return int(buffer), n, packed


def host_data_problem(host: Sequence[int], device: Sequence[int], packed: bool, contiguous: bool) -> str | None:
    """Why a host buffer's data of shape ``host`` cannot supply the device tensor's ``device`` [N, H, W, C], or None:
    its first N samples of the same shape, or (``packed``) its first N x H x W x C elements, C-contiguous and of the
    same channels, which the feeder writes packed at the smaller side."""
    n = device[0]
    if not packed:
        if host[0] < n or tuple(host[1:]) != tuple(device[1:]):
            return f"first {n} samples of [B, H, W, C]"
        return None
    need = 1
    for d in device:
        need *= d
    have = 1
    for d in host:
        have *= d
    if not contiguous or host[-1] != device[-1] or have < need:
        return f"{n} samples packed at {tuple(device[1:])}: a C-contiguous buffer of the same channels"
    return None
