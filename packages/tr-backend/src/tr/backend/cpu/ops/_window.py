"""Sliding-window geometry shared by convolution and pooling (NHWC, symmetric zero padding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tr.backend.binding import Geometry


@dataclass(frozen=True)
class Window(Geometry):
    """The shared geometry plus the numpy views the CPU kernels read through."""

    @classmethod
    def of(cls, g: Geometry) -> Window:
        return cls(**g.as_ints())

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
