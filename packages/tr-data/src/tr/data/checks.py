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


def flag(owner: str, name: str, v: Any) -> bool:
    """A real bool: ``shuffle="no"`` or ``1`` would otherwise be taken for True."""
    if not isinstance(v, bool):
        raise ConfigError(f"{owner}: {name} must be True or False, got {v!r}")
    return v


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


def fill_values(owner: str, fill: Any, whole: bool = True) -> tuple[float, ...]:
    """Pixel values in [0, 255]. ``whole``: the fill is written as a pixel (padding), so 1.5 is refused: the
    native core would round it where torchvision truncates. A rotation blends the fill into its bilinear taps,
    where a fraction is honoured (``whole=False``)."""
    vals = tuple(fill) if isinstance(fill, Sequence) and not isinstance(fill, str) else (fill,)
    if not 1 <= len(vals) <= 16:
        raise ConfigError(f"{owner}: fill needs 1 to 16 values, got {fill!r}")
    out = tuple(num(owner, "fill", v) for v in vals)
    for raw, v in zip(vals, out):
        if not 0 <= v <= 255:
            raise ConfigError(f"{owner}: fill values are pixel values in [0, 255], got {raw!r}")
        if whole and v != int(v):
            raise ConfigError(f"{owner}: fill values are whole pixel values (the padding is written as pixels), "
                              f"got {raw!r}")
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


def padding4(owner: str, padding: Any) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of an int, a (left/right, top/bottom) or a 4-tuple."""
    if isinstance(padding, Sequence) and not isinstance(padding, str):
        vals = [integer(owner, "padding", p, 0) for p in padding]
        if len(vals) == 2:
            vals = [vals[0], vals[1], vals[0], vals[1]]
        elif len(vals) == 1:
            vals = vals * 4
        elif len(vals) != 4:
            raise ConfigError(f"{owner}: padding must have 1, 2 or 4 values, got {padding!r}")
        return vals[0], vals[1], vals[2], vals[3]
    v = integer(owner, "padding", padding, 0)
    return v, v, v, v


def jitter_range(name: str, v: Any, center: float = 1.0, lo: float = 0.0,
                 hi: float | None = None) -> tuple[float, float] | None:
    """ColorJitter's factor range of a strength v ([max(lo, center - v), center + v]) or a (min, max) pair;
    None when it leaves the image unchanged."""
    o = "ColorJitter"
    if is_num(v):
        v = num(o, name, v)
        if v < 0:
            raise ConfigError(f"{o}: {name} must be >= 0, got {v}")
        if v == 0:
            return None
        r = (max(center - v, lo), center + v)
    else:
        r = num_range(o, name, v)
    if r[0] < lo or (hi is not None and r[1] > hi):
        raise ConfigError(f"{o}: {name} must lie in [{lo}, {hi if hi is not None else 'inf'}], got {r}")
    return None if r == (center, center) else r


def check_channels(owner: str, allowed: tuple[int, ...] | None, shape: Shape, error: type[Exception] = ConfigError,
                   what: str = "images") -> None:
    """``error`` unless the image's channel count is one ``allowed`` (None: any). The colour transforms know
    grey and RGB only (torchvision's rule): on 2 or 4 channels the native core would leave RandomGrayscale's
    images unchanged and stop ColorJitter at the first sample."""
    if allowed is not None and shape[2] not in allowed:
        names = {1: "1 (grey)", 3: "3 (RGB)"}
        want = " or ".join(names.get(c, str(c)) for c in allowed)
        raise error(f"{owner} needs {want} channels, got {what} of shape {tuple(shape)}")
