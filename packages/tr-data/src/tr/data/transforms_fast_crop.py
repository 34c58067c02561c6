"""The seed's FastRandomResizedCrop: RandomResizedCrop's boxes, a JPEG decoded at a reduced DCT scale first.

The crop box is drawn exactly as RandomResizedCrop draws it (the same per-sample stream: the same boxes for the
same seed, epoch and sample). What changes is the decode of a JPEG sample: libjpeg-turbo decodes it at the smallest
eighth of its size that keeps the box at least as large as the output (PreprocessorSettings.jpeg_dct_scaling,
turned on for this chain alone), and the antialiased bilinear resample runs from there. The trade: less IDCT,
upsampling and colour-conversion work where the box is well over the output (large photographs), for pixels that
are no longer Pillow's and torchvision's (the DCT-domain reduction is a different low-pass than the triangle
filter; the tests hold the difference). Samples that are already pixels (MNIST, CIFAR, ArrayDataset) are
RandomResizedCrop's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.errors import ConfigError
from tr.data.transforms import RandomResizedCrop, Transform


class FastRandomResizedCrop(RandomResizedCrop):
    """RandomResizedCrop(size, scale, ratio) whose JPEG samples are decoded at a reduced DCT scale (module
    docstring): the first transform of its chain, on the CPU pipeline only."""


def check_fast_crop_first(owner: str, transforms: Sequence[Transform]) -> None:
    """The decoder scales for the chain's first transform only: a FastRandomResizedCrop elsewhere is refused."""
    for i, t in enumerate(transforms):
        if isinstance(t, FastRandomResizedCrop) and i > 0:
            raise ConfigError(f"{owner}: FastRandomResizedCrop must be the chain's first transform (the JPEG "
                              f"decoder scales for the first crop only), got it at position {i + 1}")


def decodes_scaled(transforms: Sequence[Transform]) -> bool:
    """Whether a chain asks the JPEG decoder for DCT scaling (it starts with a FastRandomResizedCrop)."""
    return bool(transforms) and isinstance(transforms[0], FastRandomResizedCrop)
