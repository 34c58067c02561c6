"""Argument checks of the transforms and the size limits they share with the native core.

Every transform checks its arguments when constructed, so a bad value is a ConfigError naming the
transform, the parameter and the value before anything runs; csrc/ops.cpp checks the same limits
again on the spec it receives (``_native.limits()`` returns them; a test holds the two equal).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from tr.core.errors import ConfigError, ShapeError

Shape = tuple[int, int, int]

MAX_SIDE = 1 << 20  # any size, padding or output side, in pixels
MAX_IMAGE_BYTES = 1 << 30  # an image a transform produces (h * w * c)
MAX_KERNEL = 1023  # GaussianBlur kernel side
MAX_SCALE = 1e4  # RandomScale factors, RandomResizedCrop area fractions and aspect ratios
MAX_MAGNITUDE = 1e6  # other float parameters (pixel-unit noise, jitter strengths, blur sigma, erase value)
MAX_WORKERS = 4096  # Preprocessor worker threads (and dataset load threads)


def is_num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def num(owner: str, name: str, v: Any, limit: float = MAX_MAGNITUDE) -> float:
    if not is_num(v) or not math.isfinite(float(v)):
        raise ConfigError(f"{owner}: {name} must be a finite number, got {v!r}")
    if abs(float(v)) > limit:
        raise ConfigError(f"{owner}: {name} must lie in [-{limit:g}, {limit:g}], got {v!r}")
    return float(v)


def prob(owner: str, p: Any) -> float:
    p = num(owner, "p", p)
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"{owner}: probability p must be in [0, 1], got {p}")
    return p


def integer(owner: str, name: str, v: Any, lo: int = 1, hi: int = MAX_SIDE) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ConfigError(f"{owner}: {name} must be an integer, got {v!r}")
    if int(v) < lo:
        raise ConfigError(f"{owner}: {name} must be >= {lo}, got {v}")
    if int(v) > hi:
        raise ConfigError(f"{owner}: {name} must be <= {hi}, got {v}")
    return int(v)


def size2(owner: str, size: Any) -> tuple[int, int]:
    """An int (square) or a (height, width) pair."""
    if isinstance(size, Sequence) and not isinstance(size, str):
        if len(size) == 1:
            size = size[0]
        elif len(size) == 2:
            return integer(owner, "height", size[0]), integer(owner, "width", size[1])
        else:
            raise ConfigError(f"{owner}: size must be an int or (height, width), got {size!r}")
    s = integer(owner, "size", size)
    return s, s


def num_range(
    owner: str, name: str, v: Any, lo: float | None = None, hi: float | None = None, limit: float = MAX_MAGNITUDE
) -> tuple[float, float]:
    if not (isinstance(v, Sequence) and len(v) == 2):
        raise ConfigError(f"{owner}: {name} must be a (min, max) pair, got {v!r}")
    a, b = num(owner, name, v[0], limit), num(owner, name, v[1], limit)
    if a > b:
        raise ConfigError(f"{owner}: {name} must have min <= max, got {tuple(v)}")
    if lo is not None and a < lo:
        raise ConfigError(f"{owner}: {name} must be >= {lo}, got {tuple(v)}")
    if hi is not None and b > hi:
        raise ConfigError(f"{owner}: {name} must be <= {hi}, got {tuple(v)}")
    return a, b


def fill_values(owner: str, fill: Any) -> tuple[float, ...]:
    vals = tuple(fill) if isinstance(fill, Sequence) and not isinstance(fill, str) else (fill,)
    if not 1 <= len(vals) <= 16:
        raise ConfigError(f"{owner}: fill needs 1 to 16 values, got {fill!r}")
    out = tuple(num(owner, "fill", v) for v in vals)
    for v in out:
        if not 0 <= v <= 255:
            raise ConfigError(f"{owner}: fill values are pixel values in [0, 255], got {v}")
    return out


def check_shape(shape: Any) -> Shape:
    if not (isinstance(shape, Sequence) and len(shape) == 3):
        raise ShapeError(f"an image shape is (height, width, channels), got {shape!r}")
    h, w, c = (int(x) for x in shape)
    if h < 1 or w < 1 or c < 1:
        raise ShapeError(f"image shape must be positive, got {tuple(shape)}")
    return h, w, c


def fill_fits(owner: str, fill: tuple[float, ...], c: int) -> None:
    if len(fill) not in (1, c):
        raise ConfigError(f"{owner}: fill has {len(fill)} values but the image has {c} channels")


def out_size(owner: str, h: int, w: int, c: int, shape: Shape) -> Shape:
    """(h, w, c) when an image of that size is allowed, else a ConfigError naming both shapes."""
    if h > MAX_SIDE or w > MAX_SIDE or h * w * c > MAX_IMAGE_BYTES:
        raise ConfigError(
            f"{owner}: a {shape[0]}x{shape[1]}x{shape[2]} image would become {h}x{w}x{c}, over the limit "
            f"(sides <= {MAX_SIDE}, at most {MAX_IMAGE_BYTES} bytes)"
        )
    return h, w, c
