"""What predict() feeds the plan: the user's samples checked, or raw images run through the validation chain.

Two kinds of input (predict's ``input=``):

- ``"normalized"``: NHWC float samples of the compiled shape holding what validation feeds the model (the
  val transforms, then (x/255 - mean)/std, then channel padding). Refused: uint8 (pixels: say ``input="raw"``),
  and, where the task knows its normalisation, values more than ``_SLACK`` range-widths outside the range it
  gives pixels 0..255 (pixel values cast to float). A batch with no negative value where the normalisation
  maps pixel 0 below zero (``x / 255`` passed as normalised, say) cannot be told apart from a bright image
  for certain, so it is logged as a warning, once per task.
- ``"raw"``: uint8 images as the data set stores them, through the task's own validation chain (the
  Preprocessor's ``Compose`` of the val transforms and FusedNormalization at the plan's dtype), so each sample
  is, byte for byte, the one validation computes from that image.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tr.core.bf16 import round_bf16
from tr.core.dtype import DType
from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.core.log import get_logger

log = get_logger(__name__)

INPUTS = ("normalized", "raw")
_SLACK = 10.0  # range-widths beyond the normalised range that no normalised sample reaches
_warned: weakref.WeakSet = weakref.WeakSet()  # tasks already warned about a batch without negative values


@dataclass
class Samples:
    """The user's samples, checked: ``fill(x, start, m)`` writes samples [start, start + m) into x[:m];
    ``nonfinite`` lists the samples whose input holds NaN or Inf (they are written as zeros)."""

    n: int
    fill: Callable[[np.ndarray, int, int], None]
    nonfinite: np.ndarray


def validation_chain(task: Any, dtype: str = "float32") -> Any:
    """The task's validation chain (tr.data Compose: val transforms + FusedNormalization) producing ``dtype``,
    or None for a feeder that does not come from tr.data's preprocessor settings (an ArrayFeeder)."""
    feeder = task.feeder
    pre = getattr(feeder, "pre", None)
    chain = getattr(pre, "chains", {}).get("val")
    if chain is not None and chain.dtype == dtype:
        return chain  # the very chain validation runs
    s = getattr(pre, "settings", None) or getattr(feeder, "pre_settings", None)
    return None if s is None else s.chain(False, dtype)


def _chain_dtype(data: Any) -> str:
    name = np.dtype(data.dtype.np_dtype).name
    return name if name in ("float32", "float16") else "float32"


def samples(task: Any, batch: Any, input: str, data: Any) -> Samples:
    """``batch`` checked against the plan's input tensor ``data`` ([B, H, W, C])."""
    if input not in INPUTS:
        raise ConfigError(f"predict(input={input!r}): expected one of {INPUTS}")
    if input == "raw":
        return _raw(task, batch, data)
    return _normalized(task, batch, data)


def which(idx: np.ndarray) -> str:
    """Sample indices for a message: one, or the first ten and the count."""
    shown = ", ".join(str(int(i)) for i in idx[:10])
    return f"[{shown}{', ...' if len(idx) > 10 else ''}] ({len(idx)} of them)" if len(idx) > 1 else f"{int(idx[0])}"


# --- normalised samples ---------------------------------------------------------------------------------------

def _shape_error(shape: tuple[int, ...], hwc: tuple[int, ...], what: str) -> ShapeError:
    h, w, c = hwc
    hint = ""
    if len(shape) == 3 and tuple(shape) == tuple(hwc):
        hint = "; a single sample needs a batch axis: batch[None]"
    elif len(shape) == 4 and tuple(shape[1:]) == (c, h, w):
        hint = "; this looks like NCHW: the plan takes NHWC (batch.transpose(0, 2, 3, 1))"
    elif len(shape) == 4 and shape[0] == 0:
        hint = "; predict needs at least one sample"
    return ShapeError(f"predict(): {what} of shape {tuple(shape)}; the plan takes [n, {h}, {w}, {c}] (NHWC) with "
                      f"n >= 1{hint}")


def _normalized(task: Any, batch: Any, data: Any) -> Samples:
    full = tuple(data.shape.dims)
    if not isinstance(batch, np.ndarray):
        raise DTypeError(f"predict() takes a numpy array, got {type(batch).__name__}")
    if batch.dtype == np.uint8:
        raise DTypeError("predict(): the batch is uint8 (pixels?), but input='normalized' takes the normalised "
                         "float samples validation feeds the model; pass input='raw' to have predict apply the "
                         "task's validation transforms and normalisation, or normalise them yourself")
    # a BF16 plan takes float32 samples (rounded on the way in): a uint16 array does not say it holds bfloat16 bits
    allowed = {np.dtype(np.float32)} | ({np.dtype(data.dtype.np_dtype)} if data.dtype is not DType.BF16 else set())
    if batch.dtype not in allowed:
        raise DTypeError(f"predict(): batch dtype {batch.dtype}; expected {' or '.join(sorted(map(str, allowed)))}")
    if batch.ndim != 4 or tuple(batch.shape[1:]) != full[1:] or batch.shape[0] < 1:
        raise _shape_error(batch.shape, full[1:], "batch")
    n = batch.shape[0]
    flat = batch.reshape(n, -1)
    finite = np.isfinite(flat).all(axis=1)
    if finite.any():
        _check_range(task, flat, finite, _chain_dtype(data))
    bad = np.flatnonzero(~finite)

    def fill(x: np.ndarray, start: int, m: int) -> None:
        x[:m] = batch[start:start + m]
        x[:m][~finite[start:start + m]] = 0  # non-finite samples run as zeros (predict flags or refuses them)

    return Samples(n, fill, bad)


def _norm_range(chain: Any) -> tuple[float, float]:
    """[lo, hi]: what the chain's normalisation gives pixel values 0..255 (and padded channels: 0)."""
    mean, std = np.asarray(chain.mean, np.float64), np.asarray(chain.std, np.float64)
    lo, hi = float(np.min(-mean / std)), float(np.max((1.0 - mean) / std))
    if chain.pad_channels_to:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    return lo, hi


def _check_range(task: Any, flat: np.ndarray, finite: np.ndarray, dtype: str) -> None:
    chain = validation_chain(task, dtype)
    if chain is None:  # normalised arrays of the user's own (ArrayFeeder): no range to hold them to
        return
    lo, hi = _norm_range(chain)
    rows = np.flatnonzero(finite)
    mins, maxs = flat[rows].min(axis=1).astype(np.float64), flat[rows].max(axis=1).astype(np.float64)
    slack = _SLACK * (hi - lo)
    out = rows[(mins < lo - slack) | (maxs > hi + slack)]
    norm = f"mean {tuple(chain.mean)}, std {tuple(chain.std)}"
    if len(out):
        k = int(out[0])
        raise DataError(f"predict(): sample {k} holds values in [{flat[k].min():g}, {flat[k].max():g}], but the task's "
                        f"normalisation ({norm}, on x / 255) gives pixels 0..255 values in [{lo:.4g}, {hi:.4g}]: the "
                        f"batch looks un-normalised (samples {which(out)}). Pass the uint8 images with input='raw', "
                        "or normalise them as validation does: (x / 255 - mean) / std")
    if lo < 0 and mins.min() >= 0 and task not in _warned:
        _warned.add(task)
        log.warning("predict(): no value of the batch is negative, but the task's normalisation (%s) maps pixel 0 "
                    "to %.4g and every pixel below the mean to a negative value: is it x / 255 rather than the "
                    "normalised samples? input='raw' takes the uint8 images and normalises them as validation does",
                    norm, lo)


# --- raw images ---------------------------------------------------------------------------------------------

def _raw_images(images: Any) -> Sequence[np.ndarray] | np.ndarray:
    if isinstance(images, np.ndarray):
        if images.dtype != np.uint8:
            raise DTypeError(f"predict(input='raw') takes uint8 images as the data set stores them, got "
                             f"{images.dtype} (normalised float samples go with input='normalized')")
        if images.ndim != 4 or images.shape[0] < 1:
            raise ShapeError(f"predict(input='raw'): images of shape {images.shape}; expected [n, h, w, c] uint8 "
                             "with n >= 1 (or a sequence of [h, w, c] images)")
        return images
    if isinstance(images, (list, tuple)) and images:
        out = []
        for i, im in enumerate(images):
            a = np.asarray(im)
            if a.dtype != np.uint8 or a.ndim not in (2, 3):
                raise DTypeError(f"predict(input='raw'): image {i} is {a.dtype} of shape {a.shape}; expected uint8 "
                                 "[h, w, c] (or [h, w])")
            out.append(a)
        return out
    raise DTypeError(f"predict(input='raw') takes a uint8 array [n, h, w, c] or a non-empty sequence of uint8 "
                     f"[h, w, c] images, got {type(images).__name__}")


def raw_chain(task: Any, data: Any) -> Any:
    """The validation chain for predict(input='raw'), refused where it cannot reproduce validation."""
    chain = validation_chain(task, _chain_dtype(data))
    if chain is None:
        raise ConfigError(f"predict(input='raw') applies the task's validation transforms and normalisation, but "
                          f"its feeder ({type(task.feeder).__name__}) has none: it feeds arrays that are already "
                          "normalised; pass samples like them with input='normalized'")
    if not chain.deterministic:
        raise ConfigError(f"predict(input='raw'): the val transforms {list(chain.transforms)} are random; "
                          "validation draws them per epoch and sample, which predict cannot reproduce")
    return chain


def _check_raw_shape(chain: Any, shape: tuple[int, ...], full: tuple[int, ...]) -> None:
    """ShapeError unless the validation chain makes (h, w, c) images ``shape`` into the plan's samples."""
    def out(s: tuple[int, ...]) -> tuple[int, ...] | str:
        try:
            return tuple(chain.out_shape(s))
        except ConfigError as e:
            return str(e)

    got = out(shape)
    if got == full[1:]:
        return
    chw = "; this looks like CHW: pass HWC images" if out(shape[1:] + shape[:1]) == full[1:] else ""
    why = f"the validation chain refuses them ({got})" if isinstance(got, str) else f"they become {got} samples"
    raise ShapeError(f"predict(input='raw'): images of shape {shape} (h, w, c): {why}, but the plan takes "
                     f"{full[1:]} (H, W, C){chw}")


def _raw(task: Any, images: Any, data: Any) -> Samples:
    full = tuple(data.shape.dims)
    chain = raw_chain(task, data)
    imgs = _raw_images(images)
    shapes = {tuple(im.shape if im.ndim == 3 else (*im.shape, 1)) for im in imgs} if not isinstance(
        imgs, np.ndarray) else {tuple(imgs.shape[1:])}
    for shape in shapes:
        _check_raw_shape(chain, shape, full)

    def fill(x: np.ndarray, start: int, m: int) -> None:
        for j in range(m):
            x[j] = chain(imgs[start + j], index=start + j, train=False)

    return Samples(len(imgs), fill, np.zeros(0, np.int64))


def normalize_raw(task: Any, images: Any) -> np.ndarray:
    """The samples predict(images, input='raw') feeds the plan: each uint8 image through the task's validation
    chain (val transforms, FusedNormalization with its mean/std, channel padding, the plan's dtype), as
    validation computes them; for a BF16 plan float32 values rounded to BF16 (numpy has no bfloat16)."""
    from tr.task.predict import input_tensor

    data = input_tensor(task)
    s = _raw(task, images, data)
    bf16 = data.dtype is DType.BF16
    x = np.zeros((s.n, *data.shape.dims[1:]), np.float32 if bf16 else data.dtype.np_dtype)
    s.fill(x, 0, s.n)
    return round_bf16(x) if bf16 else x
