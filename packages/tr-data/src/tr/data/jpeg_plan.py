"""The host's half of decoding JPEGs on the device (issue [13]): what a batch of encoded samples needs from the CPU
before the GPU decodes and augments it, and the CPU decode that stands in for the device where it cannot.

The CPU reads no pixels here. For each sample of a batch it has the JPEG bytes (an encoded Split: a folder read
into memory or a mapped DTS pack), their header's size (parsed once per split), and the chain's draws for that
sample, seed and epoch, drawn by tr.data's own code (the native Pipeline's ``plan_first_resample``): the box
the first RandomResizedCrop (or Resize) resizes and the size it makes, the window a CenterCrop after a Resize
keeps, the flip and the erasing box. From them it writes one INT32 row a sample, the geometry
table that the device op ``image_resample`` reads (columns: tr.core.ops.IMAGE_GEOM; their meaning:
tr/backend/rules/image.py): where the sample's decoded
region lies in the decode buffer, its size, the crop box inside it, the flip and the erase box. The decoded
region is the crop box itself (the decoder's region of interest), so the buffer holds only the pixels the
resize reads; its capacity for any batch of B samples is the sum of the B largest decoded images.

``decode_regions`` / ``decode_regions_at`` are the CPU's decode of those regions with libjpeg-turbo (on native
threads; the window around each box, the whole decode's pixels): the CPU's share of a batch decoded on the
device, the fallback for an image the device decoder refuses, and the source the CPU backend's image_resample
reads. With it, the CPU backend's op gives the bytes of the CPU pipeline (tests-integration/
test_jpeg_device_chain.py).

Chains: RandomResizedCrop (training) or Resize + CenterCrop, or a Resize to a fixed (h, w) (validation) first,
then optionally ColorJitter, RandomHorizontalFlip and RandomErasing, normalised to RGB; anything else is refused
naming the transform (the CPU pipeline runs those chains).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.ops import IMAGE_GEOM, IMAGE_GEOM_COLS
from tr.core.philox import splitmix64_array
from tr.data import _native
from tr.data.dataset import Split
from tr.data.seeds import seed_prefix
from tr.data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)
from tr.data.transforms_fast_crop import FastRandomResizedCrop

GEOM, GEOM_COLS = IMAGE_GEOM, IMAGE_GEOM_COLS
COL = {name: k for k, name in enumerate(GEOM)}
CHANNELS = 3
SLOT_ALIGN = 256  # each region starts at a multiple (the decoders' and the resample's loads)
MAX_CROP_WIDTH = 13_653  # the resample kernel keeps one row of the crop in a block's 40 KiB (rules/image.py)
MAX_SCALE = 64  # a crop side at most 64 output sides (the kernel's taps per output)


@dataclass(frozen=True)
class JpegBatch:
    """One batch's plan: the samples, where their JPEG bytes are, and the geometry table."""

    indices: np.ndarray  # int64 [B]: dataset indices
    offsets: np.ndarray  # int64 [B]: byte offsets of their JPEGs in the split's buffer
    sizes: np.ndarray  # int64 [B]: their byte counts
    shapes: np.ndarray  # int32 [B, 3]: decoded (h, w, c) of the whole images
    geom: np.ndarray  # int32 [B, GEOM_COLS]
    decode_bytes: int  # bytes of the decode buffer this batch fills

    def __len__(self) -> int:
        return len(self.indices)


def _check_chain(compose: Compose) -> tuple[int, int, bool]:
    """The (height, width) of the chain's samples and whether a ColorJitter follows the resize; ConfigError naming
    what decoding on the device cannot run."""
    ts = list(compose.transforms)
    if ts and isinstance(ts[0], FastRandomResizedCrop):
        raise ConfigError("decoding on the device has no DCT-scaled decode: FastRandomResizedCrop needs the CPU "
                          "pipeline (RandomResizedCrop draws the same boxes on the device)")
    if not ts or not isinstance(ts[0], (RandomResizedCrop, Resize)):
        first = type(ts[0]).__name__ if ts else "nothing"
        raise ConfigError(f"decoding on the device takes a chain that starts with RandomResizedCrop or Resize, "
                          f"got {first}")
    rest = ts[1:]
    if isinstance(ts[0], RandomResizedCrop):
        size = ts[0].size
    elif rest and isinstance(rest[0], CenterCrop):
        size, rest = rest[0].size, rest[1:]
    elif isinstance(ts[0].size, tuple):
        size = ts[0].size
    else:
        raise ConfigError("decoding on the device needs samples of one size: Resize(int) keeps each image's aspect, "
                          "so follow it with CenterCrop (or resize to a (height, width))")
    # the flip and the erasing run after every other transform (FusedNormalization), wherever they are listed
    ops = [t for t in rest if not isinstance(t, (RandomHorizontalFlip, RandomErasing))]
    jitter = bool(ops) and isinstance(ops[0], ColorJitter)
    for t in ops[1:] if jitter else ops:
        raise ConfigError(f"decoding on the device runs RandomResizedCrop or Resize (+ CenterCrop), ColorJitter, "
                          f"RandomHorizontalFlip and RandomErasing; {type(t).__name__} needs the CPU pipeline")
    if compose.pad_channels_to is not None and not CHANNELS <= compose.pad_channels_to <= 8:
        raise ConfigError(f"decoding on the device writes 3 to 8 channels, got pad_channels_to="
                          f"{compose.pad_channels_to}")
    h, w = size
    return int(h), int(w), jitter


class JpegPlanner:
    """Plans batches of one encoded split for a chain (see the module docstring)."""

    def __init__(self, split: Split, compose: Compose) -> None:
        if not split.encoded:
            raise ConfigError("decoding on the device needs an encoded (JPEG) split; this one holds pixels")
        self.split = split
        self.compose = compose
        *hw, self.jitter = _check_chain(compose)  # jitter: a ColorJitter right after the resize
        self.out_hw = (hw[0], hw[1])
        try:
            self.shapes = _native.jpeg_shapes(split.images, split.offsets, split.sizes)
        except DataError as e:  # name the sample by its dataset index (the message says its position)
            raise DataError(f"reading the JPEG headers of the split: {e}") from None
        self.image_bytes = self.shapes[:, 0].astype(np.int64) * self.shapes[:, 1] * CHANNELS
        self._largest = np.sort(self.image_bytes)[::-1]
        # progressive or arithmetic-coded files: what a hardware JPEG engine does not take
        self.progressive = _native.jpeg_progressive(split.images, split.offsets, split.sizes).astype(bool)
        oh, ow = self.out_hw
        too_wide = np.flatnonzero(self.shapes[:, 1] > MAX_CROP_WIDTH)
        too_big = np.flatnonzero((self.shapes[:, 0] > MAX_SCALE * oh) | (self.shapes[:, 1] > MAX_SCALE * ow))
        for bad, why in ((too_wide, f"wider than {MAX_CROP_WIDTH} pixels"),
                         (too_big, f"more than {MAX_SCALE} times the {oh}x{ow} output on a side")):
            if bad.size:  # its crop could exceed what the resample kernel holds: the CPU pipeline must run it
                i = int(bad[0])
                raise DataError(f"sample {i} is a {self.shapes[i, 0]}x{self.shapes[i, 1]} JPEG, {why}: "
                                f"decoding on the device cannot resample it ({bad.size} such samples)")

    def capacity(self, batch: int) -> int:
        """Decode-buffer bytes that any batch of ``batch`` samples fits in: the ``batch`` largest images, each
        rounded up to SLOT_ALIGN."""
        top = self._largest[:batch]
        return int(np.sum(-(-top // SLOT_ALIGN) * SLOT_ALIGN))

    def plan(self, indices: Sequence[int] | np.ndarray, seed: int, epoch: int, train: bool = True) -> JpegBatch:
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        n = len(self.split)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= n)):
            raise DataError(f"batch indices must be a list of dataset indices in [0, {n}), got {idx!r}")
        shapes = self.shapes[idx]
        seeds = splitmix64_array(np.uint64(seed_prefix(seed, epoch, train)) ^ idx.astype(np.uint64))
        draws = self.compose._native.plan_first_resample(shapes, seeds)
        top, left, ch, cw = (draws[:, k] for k in range(4))
        oh, ow = self.out_hw
        wy, wx, wh, ww = (draws[:, k] for k in range(6, 10))
        outside = np.flatnonzero((wy < 0) | (wx < 0) | (wy + wh > draws[:, 4]) | (wx + ww > draws[:, 5]))
        if outside.size:  # a CenterCrop larger than the resized image pads it: not a resample
            k = int(outside[0])
            raise DataError(f"sample {int(idx[k])}: its {shapes[k, 0]}x{shapes[k, 1]} image resizes to "
                            f"{draws[k, 4]}x{draws[k, 5]}, smaller than the {oh}x{ow} CenterCrop, which would pad it: "
                            "decoding on the device does not pad (the CPU pipeline does)")
        if np.any(wh != oh) or np.any(ww != ow):
            raise ConfigError(f"the chain does not make {oh}x{ow} samples")
        g = np.zeros((idx.size, GEOM_COLS), np.int32)
        region = ch.astype(np.int64) * cw * CHANNELS
        aligned = -(-region // SLOT_ALIGN) * SLOT_ALIGN
        slots = np.concatenate([[0], np.cumsum(aligned)[:-1]]).astype(np.int64)
        if idx.size and slots[-1] + region[-1] > np.iinfo(np.int32).max:
            raise DataError(f"a batch of {idx.size} regions needs {int(slots[-1] + region[-1])} bytes, more than "
                            "the geometry table's INT32 offsets address")
        g[:, COL["slot"]] = slots
        g[:, COL["roi_h"]], g[:, COL["roi_w"]] = ch, cw  # the region is the crop box
        g[:, COL["crop_h"]], g[:, COL["crop_w"]] = ch, cw
        g[:, COL["roi_y"]], g[:, COL["roi_x"]] = top, left
        g[:, COL["out_h"]], g[:, COL["out_w"]] = draws[:, 4], draws[:, 5]
        g[:, COL["out_y"]], g[:, COL["out_x"]] = wy, wx
        g[:, COL["flip"]] = draws[:, 10]
        for k, name in enumerate(("erase_y", "erase_x", "erase_h", "erase_w")):
            g[:, COL[name]] = draws[:, 11 + k]
        for k, name in enumerate(("jit_b", "jit_c", "jit_s", "jit_h", "jit_c1", "jit_s1", "jit_order")):
            g[:, COL[name]] = draws[:, 15 + k]
        return JpegBatch(idx, self.split.offsets[idx], self.split.sizes[idx], shapes, g,
                         int(slots[-1] + aligned[-1]) if idx.size else 0)


def decode_regions(split: Split, batch: JpegBatch, out: np.ndarray | None = None,
                   names: Sequence[str] | None = None, threads: int = 1,
                   interpolate_chroma: bool = True) -> np.ndarray:
    """The batch's decoded regions on the CPU (libjpeg-turbo, RGB), each at its slot of a flat u8 buffer of
    ``batch.decode_bytes`` bytes (``out`` when given: at least that size), with ``threads`` native threads. A
    damaged JPEG is a DataError naming its dataset index (and its file, from ``names`` by dataset index when
    given). ``interpolate_chroma``: see decode_regions_at."""
    buf = np.zeros(batch.decode_bytes, np.uint8) if out is None else out
    if buf.dtype != np.uint8 or buf.ndim != 1 or buf.size < batch.decode_bytes:
        raise DataError(f"the decode buffer must be flat uint8 of at least {batch.decode_bytes} bytes, got "
                        f"{buf.dtype} {buf.shape}")
    rows = np.arange(len(batch.indices))
    decode_regions_at(split, batch, rows, buf, batch.geom[:, COL["slot"]], threads, names, interpolate_chroma)
    return buf


def region_bytes(batch: JpegBatch, rows: np.ndarray) -> np.ndarray:
    """int64 bytes of the decoded regions of ``rows``."""
    g = batch.geom[rows]
    return g[:, COL["roi_h"]].astype(np.int64) * g[:, COL["roi_w"]] * CHANNELS


def decode_regions_at(split: Split, batch: JpegBatch, rows: np.ndarray, out: np.ndarray, at: np.ndarray,
                      threads: int = 1, names: Sequence[str] | None = None, interpolate_chroma: bool = True) -> None:
    """Decode the regions of the batch's ``rows`` on the CPU (libjpeg-turbo; only the window around each region
    while tr.data's window decode is on: the same pixels) into the flat u8 ``out``, row ``rows[j]``'s at
    ``at[j]`` (roi_h * roi_w * 3 bytes), with ``threads`` native threads, the GIL released. A damaged JPEG is a
    DataError naming its dataset index (and its file, from ``names`` by dataset index when given), raised once
    every other region is written. ``interpolate_chroma``: libjpeg's interpolated ("fancy") chroma upsampling, the
    CPU pipeline's; False: each chroma sample replicated, as nvJPEG's hardware engine decodes by default."""
    rows = np.asarray(rows, np.int64)
    if not rows.size:
        return
    g = batch.geom[rows]
    regions = np.stack([g[:, COL["roi_y"]], g[:, COL["roi_x"]], g[:, COL["roi_h"]], g[:, COL["roi_w"]]], 1)
    failed = _native.decode_jpeg_regions(split.images, batch.offsets[rows], batch.sizes[rows],
                                         regions.astype(np.int32), out, np.asarray(at, np.int64), int(threads),
                                         bool(interpolate_chroma))
    if failed:
        j, why = failed[0]
        i = int(batch.indices[rows[j]])
        where = f" ({names[i]})" if names is not None else ""
        more = f" ({len(failed)} such in the batch)" if len(failed) > 1 else ""
        raise DataError(f"sample {i}{where}: {why}{more}")


def decode_region(split: Split, batch: JpegBatch, k: int, names: Sequence[str] | None = None,
                  interpolate_chroma: bool = True) -> np.ndarray:
    """Row ``k``'s decoded region on the CPU (libjpeg-turbo, RGB), flat u8 of roi_h * roi_w * 3 bytes; a damaged
    JPEG is a DataError naming its dataset index (and its file, from ``names`` by dataset index when given);
    ``interpolate_chroma``: see decode_regions_at."""
    i, g = int(batch.indices[k]), batch.geom[k]
    try:
        img = _native.decode_jpeg(split.encoded_bytes(i), False, 8, bool(interpolate_chroma))
    except DataError as e:
        where = f" ({names[i]})" if names is not None else ""
        raise DataError(f"sample {i}{where}: {e}") from None
    y0, x0 = int(g[COL["roi_y"]]), int(g[COL["roi_x"]])
    h, w = int(g[COL["roi_h"]]), int(g[COL["roi_w"]])
    return np.ascontiguousarray(img[y0:y0 + h, x0:x0 + w, :CHANNELS]).ravel()
