"""Progressive resizing: the side of the training samples epoch by epoch (FFCV's rule).

FFCV's ImageNet recipe (ffcv-imagenet train_imagenet.py, ``get_resolution``) trains at ``min_res`` up to epoch
``start_ramp``, at ``max_res`` from epoch ``end_ramp`` on, and in between at the linear interpolation rounded to
the nearest multiple of 32 (numpy's round: half to even); epochs are counted from 0 there and here. tr takes the
multiple as a parameter (32 by default: the total stride of the example CNNs) and requires both ends to be
multiples of it, so every epoch's side is one; compile checks the multiple against the network's real total
stride (tr.graph.resolution). The schedule grows only: its last epoch trains at ``max_res``, the side the plan
is compiled for (the arena and the host buffers are sized for it) and the one validation runs at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tr.core.errors import ConfigError

DEFAULT_MULTIPLE = 32


def _int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    if v < lo:
        raise ConfigError(f"{name} must be >= {lo}, got {v}")
    return int(v)


@dataclass(frozen=True)
class ResolutionRamp:
    """min_res up to epoch start_ramp, max_res from end_ramp (None: the run's last epoch), linear in between."""

    min_res: int
    max_res: int
    start_ramp: int = 0
    end_ramp: int | None = None
    multiple: int = DEFAULT_MULTIPLE

    def __post_init__(self) -> None:
        what = self.describe()
        m = _int(f"{what}: multiple", self.multiple, 1)
        lo = _int(f"{what}: min_res", self.min_res, 1)
        hi = _int(f"{what}: max_res", self.max_res, 1)
        for name, side in (("min_res", lo), ("max_res", hi)):
            if side % m:
                below, above = side // m * m, side // m * m + m
                raise ConfigError(f"{what}: {name} {side} is not a multiple of {m} (the network's total stride the "
                                  f"schedule rounds to; {below or above} or {above}, or give multiple=)")
        if hi < lo:
            raise ConfigError(f"{what}: the schedule must grow to its final side (the one compiled and validated "
                              f"at), but max_res {hi} < min_res {lo}")
        start = _int(f"{what}: start_ramp", self.start_ramp, 0)
        if self.end_ramp is not None and _int(f"{what}: end_ramp", self.end_ramp, 0) < start:
            raise ConfigError(f"{what}: end_ramp {self.end_ramp} is before start_ramp {start}")

    def describe(self) -> str:
        if self.end_ramp is None:  # (train_resolution(begin, end): the ramp over the whole run)
            return f"train_resolution({self.min_res}, {self.max_res})"
        return (f"progressive_resizing({self.min_res}, {self.max_res}, start_ramp={self.start_ramp}, "
                f"end_ramp={self.end_ramp}, multiple={self.multiple})")

    def side(self, epoch: int, epochs: int) -> int:
        """The side of epoch ``epoch`` (0-based) of a run of ``epochs``: FFCV's get_resolution."""
        end = epochs - 1 if self.end_ramp is None else self.end_ramp
        if self.end_ramp is None and epoch == end:  # the whole run's ramp ends at its last epoch (one: the final side)
            return self.max_res
        if epoch <= self.start_ramp:
            return self.min_res
        if epoch >= end:
            return self.max_res
        interp = float(np.interp(epoch, [self.start_ramp, end], [self.min_res, self.max_res]))
        return int(np.round(interp / self.multiple)) * self.multiple

    def schedule(self, epochs: int) -> tuple[int, ...]:
        """Every epoch's side; ConfigError when the run ends before the ramp reaches max_res (the last epoch must
        train at the side the plan is compiled and validated at)."""
        sides = tuple(self.side(e, epochs) for e in range(_int("total_epochs", epochs, 1)))
        if sides[-1] != self.max_res:
            raise ConfigError(f"{self.describe()}: with total_epochs {epochs} the last epoch trains at {sides[-1]}, "
                              f"not the final side {self.max_res} (end_ramp {self.end_ramp} is past the last epoch "
                              f"{epochs - 1}, counted from 0): end the ramp by epoch {epochs - 1}")
        return sides
