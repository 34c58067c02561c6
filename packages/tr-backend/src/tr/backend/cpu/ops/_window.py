"""Sliding-window geometry shared by convolution and pooling (NHWC, symmetric zero padding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tr.backend.cpu.binder import Binder, pair
from tr.core.errors import ShapeError


@dataclass(frozen=True)
class Window:
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
    p: int  # output height
    q: int  # output width

    @property
    def padded(self) -> bool:
        return self.ph > 0 or self.pw > 0

    @property
    def hp(self) -> int:
        return self.h + 2 * self.ph

    @property
    def wp(self) -> int:
        return self.w + 2 * self.pw

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    def tap_views(self, a: np.ndarray) -> list[np.ndarray]:
        """For each kernel position (kh, kw) in row-major order, the [N, P, Q, C] strided view of the padded
        input ``a`` [N, Hp, Wp, C] that this position reads for every output."""
        out = []
        for i in range(self.kh):
            for j in range(self.kw):
                out.append(a[:, i:i + self.sh * (self.p - 1) + 1:self.sh, j:j + self.sw * (self.q - 1) + 1:self.sw, :])
        return out

    def interior(self, a: np.ndarray) -> np.ndarray:
        """The unpadded [N, H, W, C] part of a padded array."""
        return a[:, self.ph:self.ph + self.h, self.pw:self.pw + self.w, :]

    def patches(self, a: np.ndarray) -> np.ndarray:
        """Read-only im2col view [N, P, Q, KH, KW, C] of a C-contiguous padded input [N, Hp, Wp, C]."""
        sn, sh, sw, sc = a.strides
        return as_strided(a, (self.n, self.p, self.q, self.kh, self.kw, a.shape[3]),
                          (sn, sh * self.sh, sw * self.sw, sh, sw, sc), writeable=False)


def window(b: Binder, x: str, y: str, kernel: tuple[int, int] | None = None) -> Window:
    """Geometry from the ``kernel``/``stride``/``padding`` attributes, checked against x and y (N,P,Q)."""
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
    return Window(n, h, w, c, kh, kw, sh, sw, ph, pw, p, q)
