"""Sliding-window geometry for convolution and pooling, as integers for the native ops."""

from __future__ import annotations

from tr.backend.binding import window_geometry
from tr.backend.cuda.binder import CudaBinder


def window(b: CudaBinder, x: str, y: str, kernel: tuple[int, int] | None = None) -> dict[str, int]:
    """n, h, w, c, kh, kw, sh, sw, ph, pw, p, q (checked against x and y; see tr.backend.binding)."""
    return window_geometry(b, x, y, kernel).as_ints()
