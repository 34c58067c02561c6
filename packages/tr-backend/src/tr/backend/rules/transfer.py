"""The rule of h2d_copy: host staging buffer 0 (A) or 1 (B), INT32 labels one per sample of ``data`` (the
first N samples of the buffer, N the batch of the data DTensor)."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.dtype import DType


def h2d_copy(b: CallBinder) -> tuple[int, int]:
    """(buffer, samples)."""
    buffer = b.attr("buffer")
    if buffer not in (0, 1) or isinstance(buffer, bool):
        b.fail(f"attribute buffer must be 0 (A) or 1 (B), got {buffer!r}")
    b.expect_dtype("labels", DType.INT32)
    n = b.tensor("data").shape.n
    b.expect_numel("labels", n)
    return int(buffer), n
