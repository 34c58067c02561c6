"""Progressive resizing on the data side: the training chain at another side, and stations over the same zones.

The side of a training sample is set by the chain's last size-setting transform. Progressive resizing rescales
the samples, so that transform must rescale: a RandomResizedCrop (FFCV's decoder, whose crop box is drawn
relative to the image, so an epoch's boxes do not depend on its side) or a Resize to a square (an exact (s, s)
or the seed's square_crop). A RandomCrop or CenterCrop as the last one would cut a smaller window of the same
pixels instead (another field of view, not another resolution) and is refused, naming it.

The samples of a smaller side are written packed at the start of each zone's data (batch x side x side x C
elements), by a TransferStation over those elements of the same memory: the host-to-device copy of a smaller
side reads exactly them (h2d_copy's ``packed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.errors import ConfigError
from tr.data.station import TransferStation
from tr.data.transforms import CenterCrop, RandomCrop, RandomResizedCrop, Resize, Transform

_SETS_SIZE = (RandomResizedCrop, Resize, RandomCrop, CenterCrop)


def resized_transforms(transforms: Sequence[Transform], side: int) -> list[Transform]:
    """``transforms`` with their last size-setting transform making ``side`` x ``side`` samples; ConfigError
    when there is none or it crops without rescaling."""
    out = list(transforms)
    at = next((i for i in range(len(out) - 1, -1, -1) if isinstance(out[i], _SETS_SIZE)), None)
    if at is None:
        raise ConfigError("progressive resizing changes the training samples' side each epoch, but the train "
                          "transforms set no size: end them in a RandomResizedCrop or a square Resize")
    t = out[at]
    if isinstance(t, RandomResizedCrop):  # (FastRandomResizedCrop stays itself)
        out[at] = type(t)(side, scale=t.scale, ratio=t.ratio)
    elif isinstance(t, Resize) and (t.square_crop or isinstance(t.size, tuple)):
        out[at] = Resize((side, side)) if isinstance(t.size, tuple) else Resize(side, square_crop=True)
    else:
        raise ConfigError(f"progressive resizing rescales the training samples each epoch, but the train "
                          f"transforms' last size is set by {t!r}, which does not make a square sample by "
                          f"rescaling (a crop keeps the pixels' scale and cuts another field of view): end them in "
                          f"a RandomResizedCrop or Resize((s, s))")
    return out


def packed_station(base: TransferStation, side: int) -> TransferStation:
    """A station of ``side`` x ``side`` samples over the first batch x side x side x C elements of ``base``'s
    zones (the same memory: use one of them at a time, between epochs)."""
    h, w, c = base.sample_shape
    if side > min(h, w):
        raise ConfigError(f"progressive resizing: side {side} is past the {h}x{w} samples the staging buffers hold "
                          f"(the compiled maximum)")
    n = base.batch_size * side * side * c
    zones = []
    for z in range(2):
        labels, data = base.zone(z)
        zones.append((labels, data.reshape(-1)[:n].reshape(base.batch_size, side, side, c)))
    return TransferStation(base.batch_size, (side, side, c), base.sample_dtype, buffers=zones)
