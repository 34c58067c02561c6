"""RandAugment and TrivialAugmentWide: torchvision.transforms.v2's, on uint8 HWC images, run by the native core.

The op list, the magnitude tables and each op's uint8 arithmetic are torchvision's (csrc/autoaugment*.cpp; the
package README says where a kernel differs). The random choices (which ops, the sign, TrivialAugmentWide's bin)
come from the transform's own Philox stream of the sample, like every tr.data transform's, so they do not depend
on the worker count. Geometric ops use nearest interpolation (torchvision's default; the only one offered) and
``fill`` outside the image.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, ShapeError
from tr.data import _native
from tr.data.checks import MAX_SIDE, Shape, fill_fits, fill_values, integer, num
from tr.data.transforms import Transform

# torchvision's _AUGMENTATION_SPACE order: Compose.params' "op{k}" indexes it
AUGMENT_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
               "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
MAX_AUGMENT_OPS = 16  # RandAugment's num_ops (csrc/autoaugment.hpp kMaxAugSteps); each op is a pass over the image


def _bins(owner: str, num_magnitude_bins: object) -> int:
    # one bin would make torchvision's Posterize table divide by zero
    return integer(owner, "num_magnitude_bins", num_magnitude_bins, 2, MAX_SIDE)


class _AutoAugment(Transform):
    channels = (1, 3)  # torchvision's colour ops take grey or RGB only

    def out_shape(self, shape: Shape) -> Shape:
        s = super().out_shape(shape)
        fill_fits(type(self).__name__, self.fill, s[2])
        return s


class RandAugment(_AutoAugment):
    """torchvision's RandAugment: ``num_ops`` ops, each drawn uniformly from the fourteen of ``AUGMENT_OPS`` and
    applied at bin ``magnitude`` of its ``num_magnitude_bins``-bin range, the sign of a signed op at random."""

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 fill: float | Sequence[float] = 0):
        o = "RandAugment"
        self.num_ops = integer(o, "num_ops", num_ops, 0, MAX_AUGMENT_OPS)
        bins = _bins(o, num_magnitude_bins)
        if isinstance(magnitude, bool) or not isinstance(magnitude, numbers.Integral):
            raise ConfigError(f"{o}: magnitude must be an integer bin, got {magnitude!r}")
        if not 0 <= magnitude <= bins - 1:
            raise ConfigError(f"{o}: magnitude must be in [0, num_magnitude_bins - 1] = [0, {bins - 1}], "
                              f"got {magnitude}")
        self.magnitude = int(magnitude)
        self.num_magnitude_bins = bins
        self.fill = fill_values(o, fill)

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.RandAugmentParams(
            num_ops=self.num_ops, magnitude=self.magnitude, num_magnitude_bins=self.num_magnitude_bins,
            fill=self.fill))


class TrivialAugmentWide(_AutoAugment):
    """torchvision's TrivialAugmentWide: one op drawn uniformly from ``AUGMENT_OPS``, its magnitude bin uniform
    in [0, num_magnitude_bins - 1] of the wide ranges, the sign of a signed op at random."""

    def __init__(self, num_magnitude_bins: int = 31, fill: float | Sequence[float] = 0):
        o = "TrivialAugmentWide"
        self.num_magnitude_bins = _bins(o, num_magnitude_bins)
        self.fill = fill_values(o, fill)

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.TrivialAugmentWideParams(num_magnitude_bins=self.num_magnitude_bins,
                                                               fill=self.fill))


def apply_augment_op(image: Any, op: str, magnitude: float, fill: float | Sequence[float] = 0) -> np.ndarray:
    """One op of ``AUGMENT_OPS`` at the signed ``magnitude`` torchvision's op takes (what Compose.params records
    as ``magnitude{k}``: Shear a tangent, Translate pixels, Rotate degrees, the colour ops 1 + magnitude as the
    factor, Posterize bits, Solarize a fraction of 255), on a uint8 (h, w) or (h, w, 1 or 3) image."""
    if op not in AUGMENT_OPS:
        raise ConfigError(f"apply_augment_op: op must be one of {AUGMENT_OPS}, got {op!r}")
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.dtype != np.uint8:
        raise ShapeError(f"an image must be a uint8 (height, width, channels) array, got {a.dtype} {a.shape}")
    m = num(op, "magnitude", magnitude)
    return _native.augment_op(np.ascontiguousarray(a), AUGMENT_OPS.index(op), m, list(fill_values(op, fill)))
