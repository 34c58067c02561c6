"""The rule of augment_affine, written once for both backends: its attributes with their defaults and ranges,
and the shapes and dtypes of its arguments. The CPU module (cpu/ops/augment.py) and the CUDA one
(cuda/ops/augment.py, csrc/ops/augment.cu) keep only execution."""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ShapeError

MAX_CHANNELS = 4  # the CUDA kernel keeps the per-channel constants in registers


@dataclass(frozen=True)
class AugmentSpec:
    pad: int = 0  # Pad(pad) + RandomCrop(input size): a shift of -pad..pad
    degrees: float = 0.0  # RandomRotation(-degrees, degrees)
    scale: tuple[float, float] = (1.0, 1.0)  # RandomScale(lo, hi)
    erase_p: float = 0.0
    erase_scale: tuple[float, float] = (0.02, 0.33)
    erase_ratio: tuple[float, float] = (0.3, 3.3)
    erase_value: float = 0.0  # in normalised space
    flip_p: float = 0.0
    mean: tuple[float, ...] = (0.0,)  # on x / 255; one value or one per channel
    std: tuple[float, ...] = (1.0,)
    crop_slot: int = 0  # the transforms' chain slots: the Philox streams tr.data's workers draw them from
    rotation_slot: int = 0
    scale_slot: int = 0


@dataclass(frozen=True)
class AugmentShapes:
    n: int  # samples in the resident data set
    h: int
    w: int
    c: int
    batch: int
    c_out: int


def spec_of(b: CallBinder) -> AugmentSpec:
    def pair(name: str, default: tuple[float, float], lo: float) -> tuple[float, float]:
        v = tuple(float(x) for x in b.attr(name, default))
        if len(v) != 2 or not lo <= v[0] <= v[1]:
            b.fail(f"{name} must be a (low, high) pair with {lo} <= low <= high, got {v}")
        return v  # type: ignore[return-value]

    s = AugmentSpec(
        pad=b.int_attr("pad", 0, lo=0), degrees=b.float_attr("degrees", 0.0, lo=0.0),
        scale=pair("scale", (1.0, 1.0), 1e-3), erase_p=b.float_attr("erase_p", 0.0, lo=0.0),
        erase_scale=pair("erase_scale", (0.02, 0.33), 0.0), erase_ratio=pair("erase_ratio", (0.3, 3.3), 1e-6),
        erase_value=b.float_attr("erase_value", 0.0), flip_p=b.float_attr("flip_p", 0.0, lo=0.0),
        mean=tuple(float(x) for x in b.attr("mean", (0.0,))), std=tuple(float(x) for x in b.attr("std", (1.0,))),
        crop_slot=b.int_attr("crop_slot", 0, lo=0), rotation_slot=b.int_attr("rotation_slot", 0, lo=0),
        scale_slot=b.int_attr("scale_slot", 0, lo=0))
    if s.erase_p > 1 or s.flip_p > 1:
        b.fail(f"erase_p and flip_p are probabilities, got {s.erase_p} and {s.flip_p}")
    if any(v <= 0 for v in s.std):
        b.fail(f"std must be > 0, got {s.std}")
    return s


def shapes_of(b: CallBinder, spec: AugmentSpec) -> AugmentShapes:
    b.expect_dtype("src", DType.UINT8)
    b.expect_dtype("index", DType.INT32)
    b.expect_dtype("key", DType.INT32)
    b.expect_numel("key", 2)
    b.expect_float("y")
    src, y = b.tensor("src").shape.dims, b.tensor("y").shape.dims
    if len(src) != 4 or len(y) != 4:
        b.fail(f"src {src} and y {y} must be (n, height, width, channels)", ShapeError)
    n, h, w, c = src
    batch, ho, wo, co = y
    if (ho, wo) != (h, w) or co < c:
        b.fail(f"y {y} must be (batch, {h}, {w}, >= {c}) for src {src}", ShapeError)
    if c > MAX_CHANNELS or co > MAX_CHANNELS:
        b.fail(f"augment_affine takes up to {MAX_CHANNELS} channels, got {c} (out {co})", ShapeError)
    if len(spec.mean) not in (1, c) or len(spec.std) not in (1, c):
        b.fail(f"mean and std need 1 or {c} values, got {len(spec.mean)} and {len(spec.std)}")
    b.expect_numel("index", batch)
    for name, on, slot in (("crop", spec.pad > 0, spec.crop_slot), ("rotation", spec.degrees > 0, spec.rotation_slot),
                           ("scale", spec.scale != (1.0, 1.0), spec.scale_slot)):
        if on and slot < 1:  # slot 0 is the flip's and the erasing's stream
            b.fail(f"the {name}'s chain slot must be >= 1, got {slot}")
    return AugmentShapes(n, h, w, c, batch, co)


def per_channel(values: tuple[float, ...], c: int) -> list[float]:
    return [values[0] if len(values) == 1 else values[k] for k in range(c)]
