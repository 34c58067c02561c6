"""Value checks shared by every config class: each raises a ConfigError that names the value and the range."""

from __future__ import annotations

import math
from typing import Any

from tr.core.errors import ConfigError


def real(name: str, v: Any) -> float:
    """A finite real number (bools and strings are refused: ``True`` is never a meaningful learning rate)."""
    if isinstance(v, (bool, str, bytes)):
        raise ConfigError(f"{name} must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise ConfigError(f"{name} must be finite, got {v!r}")
    return f


def non_negative(name: str, v: Any) -> float:
    f = real(name, v)
    if f < 0.0:
        raise ConfigError(f"{name} must be >= 0, got {v!r}")
    return f


def positive(name: str, v: Any) -> float:
    f = real(name, v)
    if f <= 0.0:
        raise ConfigError(f"{name} must be > 0, got {v!r}")
    return f


def unit_open(name: str, v: Any) -> float:
    """A value in [0, 1): momentum, Adam betas, label smoothing."""
    f = real(name, v)
    if not 0.0 <= f < 1.0:
        raise ConfigError(f"{name} must be in [0, 1), got {v!r}")
    return f


def unit_closed(name: str, v: Any) -> float:
    f = real(name, v)
    if not 0.0 <= f <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {v!r}")
    return f


def integer(name: str, v: Any, minimum: int) -> int:
    """An integer >= minimum; integral floats (3.0) are accepted, 3.5, bools and strings are not."""
    if isinstance(v, (bool, str, bytes)):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    if isinstance(v, int):
        i = int(v)
    else:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be an integer, got {v!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise ConfigError(f"{name} must be an integer, got {v!r}")
        i = int(f)
    if i < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {v!r}")
    return i


def boolean(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name} must be True or False, got {v!r}")
    return v
