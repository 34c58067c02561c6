"""Normalisation: the (mean, std) of a NormMode or a pair, the output dtype, and FusedNormalization,
the one-pass uint8 NHWC -> normalised float32/float16/bfloat16 of whole batches (the native fused_normalize).

bfloat16 has no numpy type: its samples are uint16 arrays of bit patterns (DType.BF16's storage), rounded as
tr.core.bf16 rounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core import bf16
from tr.core.dtype import DType
from tr.core.errors import ConfigError, ShapeError
from tr.core.norm import NormMode
from tr.data import _native
from tr.data.checks import integer, is_num, num

MAX_NORM_CHANNELS = 64  # as pad_channels_to: no image the pipeline takes has more
OUT_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_NAMES = {DType.FP32: "float32", DType.FP16: "float16", DType.BF16: "bfloat16"}


def _per_channel(name: str, v: Any) -> tuple[float, ...]:
    """A number, or one number per channel (a sequence or a 1-D array), each finite."""
    if isinstance(v, np.ndarray):
        if v.ndim > 1:
            raise ConfigError(f"normalization {name} must be a number or one number per channel, got an array of "
                              f"shape {v.shape}")
        v = v.reshape(-1).tolist()
    if isinstance(v, str) or not (is_num(v) or isinstance(v, Sequence)):
        raise ConfigError(f"normalization {name} must be a number or one number per channel, got {v!r}")
    vals = (v,) if is_num(v) else tuple(v)
    if not 1 <= len(vals) <= MAX_NORM_CHANNELS:
        raise ConfigError(f"normalization {name} needs 1 to {MAX_NORM_CHANNELS} values, got {v!r}")
    return tuple(num("normalization", name, x) for x in vals)


def norm_constants(normalization: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of a NormMode or of an explicit (mean, std) pair (values for x / 255)."""
    if isinstance(normalization, NormMode):
        return tuple(normalization.mean), tuple(normalization.std)
    if isinstance(normalization, Sequence) and not isinstance(normalization, str) and len(normalization) == 2:
        mean, std = _per_channel("mean", normalization[0]), _per_channel("std", normalization[1])
        if len(mean) != len(std):
            raise ConfigError(f"normalization needs as many std as mean values, got mean={mean}, std={std}")
        if any(s <= 0 for s in std):
            raise ConfigError(f"normalization std must be > 0, got {std}")
        norm_range(mean, std, "float32")  # the widest output: a std that overflows even float32 is refused now
        return mean, std
    raise ConfigError(f"normalization must be a NormMode or a (mean, std) pair, got {normalization!r}")


def norm_range(mean: Sequence[float], std: Sequence[float], dtype: str) -> float:
    """The largest |(x / 255 - mean) / std| over x in [0, 255]; ConfigError when it is not finite in ``dtype``
    (a tiny std would make every sample inf, and the erased or padded zeros NaN, in the training step)."""
    top = max(max(abs(-m / s), abs((1.0 - m) / s)) for m, s in zip(mean, std))
    limit = finite_max(dtype)
    if not top <= limit:
        raise ConfigError(f"normalization mean={tuple(mean)}, std={tuple(std)} maps pixels to values up to {top:.4g}, "
                          f"beyond {dtype}'s largest finite value {limit:.6g}: the samples would be inf")
    return top


def check_erase_value(owner: str, value: Sequence[float], dtype: str) -> tuple[float, ...]:
    """Erase values (normalised space) that are finite numbers within ``dtype``'s range."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    vals = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else (value,)
    out = tuple(num(owner, "erase value", v) for v in vals)
    limit = finite_max(dtype)
    for v in out:
        if abs(v) > limit:
            raise ConfigError(f"{owner}: erase value {v:g} is beyond {dtype}'s largest finite value {limit:.6g}")
    return out


def finite_max(dtype: str) -> float:
    """The largest finite value of output dtype ``dtype`` (np.finfo knows no bfloat16)."""
    return bf16.MAX if dtype == "bfloat16" else float(np.finfo(dtype).max)


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that holds samples of output dtype ``dtype``: uint16 bit patterns for bfloat16."""
    return DType.BF16.np_dtype if dtype == "bfloat16" else np.dtype(dtype)


def out_dtype(dtype: Any) -> str:
    """The name of an output dtype (float32, float16 or bfloat16), from that name, a tr DType ("bf16", DType.BF16)
    or a numpy dtype. uint16 is refused: it is bfloat16's storage, but as a dtype it says nothing of floats."""
    if isinstance(dtype, str) and dtype.strip().lower() in ("bfloat16", "bf16"):
        return "bfloat16"
    if isinstance(dtype, DType):
        if dtype in _DTYPE_NAMES:
            return _DTYPE_NAMES[dtype]
        raise ConfigError(f"output dtype must be {_allowed()}, got {dtype}")
    try:
        name = np.dtype(dtype).name
    except TypeError as e:
        raise ConfigError(f"output dtype must be {_allowed()}, got {dtype!r}") from e
    if name not in OUT_DTYPES:
        raise ConfigError(f"output dtype must be {_allowed()}, got {name}")
    return name


def _allowed() -> str:
    return ", ".join(OUT_DTYPES[:-1]) + " or " + OUT_DTYPES[-1]


class FusedNormalization:
    """uint8 NHWC -> (x / 255 - mean) / std as float32, float16 or bfloat16 NHWC, in one native pass.

    Each value is the float64 formula rounded once to float32 (and float16 is rounded from that float32,
    by F16C when the CPU has it; bfloat16 too, to nearest even as tr.core.bf16.bf16_bits, given as uint16 bit
    patterns). ``flip``: one bool per image; ``erase``: one (top, left, height, width) per image (height 0:
    none), set to ``erase_value`` (normalised space).
    """

    def __init__(
        self, normalization: Any = NormMode.NO_NORM, dtype: Any = "float32", pad_channels_to: int | None = None
    ):
        self.mean, self.std = norm_constants(normalization)
        self.dtype = out_dtype(dtype)
        norm_range(self.mean, self.std, self.dtype)
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
        if self.pad_channels_to and self.pad_channels_to < c:
            raise ShapeError(f"pad_channels_to={self.pad_channels_to} is fewer than the images' {c} channels")
        oc = max(c, self.pad_channels_to)
        store = storage_dtype(self.dtype)
        if out is None:
            out = np.empty((n, h, w, oc), dtype=store)
        elif single and out.ndim == 3:
            out = out[None]
        if out.dtype != store:
            what = "bfloat16 (uint16 bit patterns)" if self.dtype == "bfloat16" else self.dtype
            raise ConfigError(f"out must be {what}, got {out.dtype}")
        ev = list(check_erase_value("FusedNormalization", erase_value, self.dtype))
        if flip is not None:
            flip = _flip_flags(flip, n)
        if erase is not None:
            erase = _erase_rects(erase, n)
        _native.fused_normalize(
            np.ascontiguousarray(a), out, list(self.mean), list(self.std), self.pad_channels_to, flip, erase, ev
        )
        return out[0] if single else out


def _flip_flags(flip: Any, n: int) -> np.ndarray:
    """(n,) bool flags: True/False or 0/1 per image (a 2 or 0.5 is a caller's mistake, not a True)."""
    f = np.asarray(flip)
    if f.shape != (n,) or not (f.dtype == np.bool_ or (f.dtype.kind in "iu" and np.isin(f, (0, 1)).all())):
        raise ShapeError(f"flip needs one True/False (or 0/1) flag per image ({n}), got {f.dtype} {f.shape}: "
                         f"{flip!r}"[:300])
    return f.astype(np.bool_)


def _erase_rects(erase: Any, n: int) -> np.ndarray:
    """(n, 4) int32 (top, left, height, width) rows; values that do not fit int32 are refused here, not
    wrapped by a cast (the native side checks each rectangle against the image, in 64 bits)."""
    er = np.asarray(erase)
    if er.shape != (n, 4) or er.dtype.kind not in "iu":
        raise ShapeError(f"erase needs one integer (top, left, height, width) row per image, got {er.dtype} {er.shape}")
    if er.size and (int(er.min()) < -(2**31) or int(er.max()) > 2**31 - 1):
        raise ShapeError(f"erase rectangle values must fit in int32, got min {int(er.min())}, max {int(er.max())}")
    return er.astype(np.int32)
