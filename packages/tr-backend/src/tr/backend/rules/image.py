"""The rule of image_resample, written once for both backends: the per-sample geometry table it reads (GEOM), its
attributes, and the shapes and dtypes of its arguments; and the resize weights, which both backends compute
the same way (tr.data's build_axis, csrc/resample.cpp: the CPU module computes them in numpy float64, the CUDA
kernel in double, both IEEE operations in the same order, so both have tr.data's int16 weights to the bit).
The CPU module (cpu/ops/image.py) and the CUDA one (cuda/ops/image.py, csrc/ops/image.cu) keep only execution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ShapeError
from tr.core.ops import IMAGE_GEOM, IMAGE_GEOM_COLS

# geom's columns, one row of GEOM_COLS INT32 a sample (tr.data.jpeg_plan writes them). The decoded region (RGB u8
# HWC, roi_h x roi_w, rows packed) starts at byte ``slot`` of src; the crop box (top, left, crop_h, crop_w) lies
# inside it and is resized to out_h x out_w (0: y's height and width), of which the sample is the window at
# (out_y, out_x) of y's size (a CenterCrop after a Resize; 0, 0 otherwise); the erase box is in the sample's
# coordinates (after the flip), erase_h = 0: none; (roi_y, roi_x) is where the region lies in the whole image (for
# the decoder; the resample does not read it).
GEOM, GEOM_COLS = IMAGE_GEOM, IMAGE_GEOM_COLS
COL = {name: k for k, name in enumerate(GEOM)}
CHANNELS = 3  # decoded images are RGB (a gray JPEG decodes as RGB, as torchvision's ImageFolder reads it)
MAX_OUT_CHANNELS = 8  # C_out: 3, or padded (4 for an AMP input) up to 8
PREC = 14  # fixed-point bits of the weights (tr.data's kPrec)
MAX_SCALE = 64  # crop side / output side: the weights of one output (2 * ceil(scale) + 1 taps) fit the kernel
MAX_TMP_BYTES = 40 * 1024  # the kernel's per-block u8 intermediate: one row of the crop (vertical pass first)


@dataclass(frozen=True)
class ImageShapes:
    batch: int
    h: int  # output height and width
    w: int
    c_out: int
    src_bytes: int


@dataclass(frozen=True)
class ImageSpec:
    mean: tuple[float, ...]
    std: tuple[float, ...]
    erase_value: tuple[float, ...]


def spec_of(b: CallBinder) -> ImageSpec:
    def values(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
        v = tuple(float(x) for x in b.attr(name, default))
        if len(v) not in (1, CHANNELS):
            b.fail(f"attribute {name!r} needs 1 or {CHANNELS} values, got {len(v)}")
        return v

    s = ImageSpec(values("mean", (0.0,)), values("std", (1.0,)), values("erase_value", (0.0,)))
    if any(not v > 0 for v in s.std):
        b.fail(f"std must be > 0, got {s.std}")
    return s


def shapes_of(b: CallBinder, src: str = "src") -> ImageShapes:
    """image_resample's (src: the decode buffer) and image_jitter's (src "x": the resized u8 batch) shapes; a
    UINT8 y (image_resample only) is the resized pixels, 3 channels."""
    b.expect_dtype(src, DType.UINT8)
    b.expect_dtype("geom", DType.INT32)
    y = b.tensor("y").shape.dims
    if b.dtype("y") == DType.UINT8 and src == "src":
        if len(y) != 4 or y[3] != CHANNELS:
            b.fail(f"a UINT8 y {y} must be (batch, height, width, {CHANNELS})", ShapeError)
    else:
        b.expect_float("y")
        if len(y) != 4 or not CHANNELS <= y[3] <= MAX_OUT_CHANNELS:
            b.fail(f"y {y} must be (batch, height, width, {CHANNELS}..{MAX_OUT_CHANNELS} channels)", ShapeError)
    b.expect_numel("geom", y[0] * GEOM_COLS)
    if src == "x":
        x = b.tensor("x").shape.dims
        if tuple(x) != (y[0], y[1], y[2], CHANNELS):
            b.fail(f"x {x} must be (batch, height, width, {CHANNELS}) of y {y}", ShapeError)
    return ImageShapes(y[0], y[1], y[2], y[3], b.tensor(src).numel)


@dataclass(frozen=True)
class Jitter:
    """One sample's ColorJitter (geom's jit_ columns): the ops in order, the enabled ones only, and the float32
    values color.cpp computes with."""

    ops: tuple[int, ...]  # 0 brightness, 1 contrast, 2 saturation, 3 hue
    f: tuple[np.float32, np.float32, np.float32, np.float32]  # float(factor) of each
    c1: np.float32  # float(1 - contrast factor)
    s1: np.float32  # float(1 - saturation factor)


def jitter_of(row: np.ndarray) -> Jitter:
    bits = np.ascontiguousarray(row[[COL[c] for c in ("jit_b", "jit_c", "jit_s", "jit_h", "jit_c1", "jit_s1")]],
                                np.int32).view(np.float32)
    code = int(row[COL["jit_order"]])
    order = [(code >> (2 * k)) & 3 for k in range(4)]
    ops = tuple(op for op in order if (code >> (8 + op)) & 1)
    return Jitter(ops, (bits[0], bits[1], bits[2], bits[3]), bits[4], bits[5])


def per_channel(values: tuple[float, ...]) -> list[float]:
    return [values[0] if len(values) == 1 else values[k] for k in range(CHANNELS)]


def coefficients(spec: ImageSpec) -> tuple[np.ndarray, np.ndarray]:
    """a_c = float32(1 / (255 std_c)), b_c = float32(-mean_c / std_c): tr.data's FusedSpec.coefficients."""
    mean, std = per_channel(spec.mean), per_channel(spec.std)
    a = np.array([1.0 / (255.0 * s) for s in std], np.float32)
    b = np.array([-m / s for m, s in zip(mean, std, strict=True)], np.float32)
    return a, b


@dataclass(frozen=True)
class Axis:
    """One axis of the resize: output k reads ``ntaps[k]`` source samples from ``start[k]`` with ``w[k]``."""

    start: np.ndarray  # int64 [count]
    ntaps: np.ndarray  # int64 [count]
    w: np.ndarray  # int32 [count, taps], zero beyond ntaps


def axis(in0: int, in_len: int, out: int) -> Axis:
    """tr.data's build_axis(in0, in_len, out, 0, out): PIL's triangle filter widened by the downscale factor,
    the weights normalised in float64 and rounded to 14 bits (int(w * 2^14 + 0.5)). Every output is inside."""
    k = np.arange(out, dtype=np.float64)
    if in_len == out:  # a pure shift: one tap of weight 1
        return Axis(in0 + np.arange(out, dtype=np.int64), np.ones(out, np.int64),
                    np.full((out, 1), 1 << PREC, np.int32))
    scale = float(in_len) / float(out)
    support = max(scale, 1.0)
    inv = 1.0 / support
    ksize = int(np.ceil(support)) * 2 + 1
    center = (k + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0.0).astype(np.int64)  # C's int(): toward zero
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_len)
    n = np.minimum(xmax - xmin, ksize)
    tmp = np.zeros((out, ksize), np.float64)
    total = np.zeros(out, np.float64)
    for j in range(ksize):  # in tap order, as the C loop sums them
        t = (j + xmin - center + 0.5) * inv
        wj = np.where(j < n, np.maximum(0.0, 1.0 - np.abs(t)), 0.0)
        tmp[:, j] = wj
        total = total + wj
    w = np.where(total[:, None] > 0, tmp / np.where(total > 0, total, 1.0)[:, None], 0.0)
    w16 = np.trunc(w * float(1 << PREC) + 0.5).astype(np.int32)
    w16[np.arange(ksize)[None, :] >= n[:, None]] = 0
    return Axis(in0 + xmin, n, w16)


def window(ax: Axis, k0: int, count: int) -> Axis:
    """Outputs k0 .. k0 + count - 1 of an axis."""
    return Axis(ax.start[k0:k0 + count], ax.ntaps[k0:k0 + count], ax.w[k0:k0 + count])


def vertical_first(ay: Axis, out_h: int) -> bool:
    """tr.data's pass order (a function of the sizes only): the vertical pass first when the output has fewer rows
    than the source rows it reads."""
    rlo = int(ay.start.min())
    rhi = int((ay.start + ay.ntaps).max())
    return out_h < rhi - rlo
