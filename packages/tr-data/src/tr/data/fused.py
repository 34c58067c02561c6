"""Normalisation: the (mean, std) of a NormMode or a pair, the output dtype, and FusedNormalization,
the one-pass uint8 NHWC -> normalised float32/float16 of whole batches (the native fused_normalize)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, ShapeError
from tr.core.norm import NormMode
from tr.data import _native
from tr.data.checks import integer, num


def norm_constants(normalization: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of a NormMode or of an explicit (mean, std) pair (values for x / 255)."""
    if isinstance(normalization, NormMode):
        return tuple(normalization.mean), tuple(normalization.std)
    if isinstance(normalization, Sequence) and len(normalization) == 2:
        mean = normalization[0] if isinstance(normalization[0], Sequence) else (normalization[0],)
        std = normalization[1] if isinstance(normalization[1], Sequence) else (normalization[1],)
        mean = tuple(num("normalization", "mean", m) for m in mean)
        std = tuple(num("normalization", "std", s) for s in std)
        if len(mean) != len(std) or not mean:
            raise ConfigError(f"normalization needs as many std as mean values, got mean={mean}, std={std}")
        if any(s <= 0 for s in std):
            raise ConfigError(f"normalization std must be > 0, got {std}")
        return mean, std
    raise ConfigError(f"normalization must be a NormMode or a (mean, std) pair, got {normalization!r}")


def out_dtype(dtype: Any) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError as e:
        raise ConfigError(f"output dtype must be float32 or float16, got {dtype!r}") from e
    if name not in ("float32", "float16"):
        raise ConfigError(f"output dtype must be float32 or float16, got {name}")
    return name


class FusedNormalization:
    """uint8 NHWC -> (x / 255 - mean) / std as float32 or float16 NHWC, in one native pass.

    Each value is the float64 formula rounded once to float32 (and float16 is rounded from that float32,
    by F16C when the CPU has it). ``flip``: one bool per image; ``erase``: one (top, left, height, width)
    per image (height 0: none), set to ``erase_value`` (normalised space).
    """

    def __init__(
        self, normalization: Any = NormMode.NO_NORM, dtype: Any = "float32", pad_channels_to: int | None = None
    ):
        self.mean, self.std = norm_constants(normalization)
        self.dtype = out_dtype(dtype)
        self.pad_channels_to = (
            0 if pad_channels_to is None else integer("FusedNormalization", "pad_channels_to", pad_channels_to, 1, 64)
        )

    def __call__(
        self,
        images: Any,
        out: np.ndarray | None = None,
        flip: Any = None,
        erase: Any = None,
        erase_value: float | Sequence[float] = 0.0,
    ) -> np.ndarray:
        a = np.asarray(images)
        single = a.ndim == 3
        if single:
            a = a[None]
        if a.ndim != 4 or a.dtype != np.uint8:
            raise ShapeError(f"images must be uint8 (n, h, w, c) or (h, w, c), got {a.dtype} {a.shape}")
        n, h, w, c = a.shape
        if len(self.mean) not in (1, c):
            raise ShapeError(f"normalization has {len(self.mean)} channels but the images have {c}")
        oc = max(c, self.pad_channels_to)
        if out is None:
            out = np.empty((n, h, w, oc), dtype=self.dtype)
        elif single and out.ndim == 3:
            out = out[None]
        if out.dtype != np.dtype(self.dtype):
            raise ConfigError(f"out must be {self.dtype}, got {out.dtype}")
        ev = list(erase_value) if isinstance(erase_value, Sequence) else [float(erase_value)]
        if erase is not None:
            erase = _erase_rects(erase, n)
        _native.fused_normalize(
            np.ascontiguousarray(a), out, list(self.mean), list(self.std), self.pad_channels_to, flip, erase, ev
        )
        return out[0] if single else out


def _erase_rects(erase: Any, n: int) -> np.ndarray:
    """(n, 4) int32 (top, left, height, width) rows; values that do not fit int32 are refused here, not
    wrapped by a cast (the native side checks each rectangle against the image, in 64 bits)."""
    er = np.asarray(erase)
    if er.shape != (n, 4) or er.dtype.kind not in "iu":
        raise ShapeError(f"erase needs one integer (top, left, height, width) row per image, got {er.dtype} {er.shape}")
    if er.size and (int(er.min()) < -(2**31) or int(er.max()) > 2**31 - 1):
        raise ShapeError(f"erase rectangle values must fit in int32, got min {int(er.min())}, max {int(er.max())}")
    return er.astype(np.int32)
