"""Alignment helpers: every DTensor base address in an arena is 256-byte aligned."""

from __future__ import annotations

ALIGNMENT = 256


def align_up(x: int, a: int) -> int:
    """Round ``x`` up to a multiple of ``a`` (a > 0)."""
    if a <= 0:
        raise ValueError(f"alignment must be positive, got {a}")
    return (int(x) + a - 1) // a * a


def align_up_256(x: int) -> int:
    """``(x + 255) & ~255``: the seed's slot alignment."""
    return (int(x) + 255) & ~255
