"""The seed's DTS version 3 files, read and checked for ``tr-dts convert`` (tr.data.dts.convert).

The layout (the seed's python/scripts/make_dataset.py, SEED_SYSTEM.md §9), all little-endian:

* a 144-byte header (``HEADER``): magic ".DTS", version 3.0.0.0, dataset_type char[8] ("   MNIST",
  " CIFAR10", "CIFAR100", "IMAGENET"), is_training, compress_level (0-3), val_set_prep, num_classes,
  tensor_layout "NHWC", image_width, image_height, num_channels, color_type ("GRAY", " RGB"), num_samples,
  num_volumes (1), volume_id (0), total_blocks, num_blocks, total_bytes u64, header_bytes, block_bytes u64
  (every block's bytes together), block_size (one block's), block_header_size, pic_alignment, max_pic_area,
  max_pic_per_block, compression_ratio f32, normalize_mean f32[3], normalize_std f32[3], crc_code (the
  CRC-32 of every byte after the header region); zero-padded to ``header_bytes``: 256 for MNIST/CIFAR, one
  block (16 MiB) for ImageNet.
* MNIST/CIFAR (RAW, block_header_size 0): N label bytes, then N x H x W x C image bytes (NHWC).
* ImageNet (JPEG): blocks of ``block_size`` bytes, block i at ``header_bytes + i * block_size``, each
  padded to its full size (the last one too): ``BLOCK`` (magic "LV<level>B", block_id, num_pics), then
  offsets[n], sizes[n], labels[n] (u32; offsets from the block's start), zero-padded to block_header_size
  (4 KiB at level 0, 16 KiB at 1-3); then the JPEGs, each starting at a multiple of pic_alignment (64).

Only the body is under a checksum, so the header is checked field by field against the layout, the file's
size and itself, and every block index against its block, before a sample is read (``V3File()``);
``samples()`` then checks ``crc_code`` over the body as it reads it, and raises after the last sample when
it does not match.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tr.core.errors import DataError
from tr.data.dts.format import PAGE, raw_shape_problem

MAGIC = b".DTS"
VERSION = (3, 0, 0, 0)
HEADER = struct.Struct("<4s4B8sIIII4sIII4sIIIIIQIQIIIIIfffffffI")
BLOCK = struct.Struct("<4sII")  # magic, block_id, num_pics; then offsets[n], sizes[n], labels[n]
assert HEADER.size == 144 and BLOCK.size == 12
RAW_HEADER_BYTES = 256  # MNIST/CIFAR: the header region
BLOCK_HEADER_BYTES = {0: 4 << 10, 1: 16 << 10, 2: 16 << 10, 3: 16 << 10}  # the seed's per level
MAX_PICS = 2000  # the seed loader's SlotMeta holds this many samples of a block (MAX_SAMPLES_PER_BLOCK)
COLORS = {"GRAY": 1, " RGB": 3}


@dataclass(frozen=True)
class V3Header:
    """The fields of a seed DTS header that a conversion uses (the rest are checked, then dropped)."""

    dataset: str  # "MNIST", "CIFAR10", "CIFAR100", "IMAGENET"
    split: str  # "train" (is_training 1) | "val"
    level: int  # compress_level
    num_classes: int
    width: int  # RAW: every sample's; JPEG: 0
    height: int
    channels: int
    color: str  # "GRAY" | " RGB"
    num_samples: int
    total_blocks: int
    header_bytes: int
    block_size: int  # JPEG: one block's bytes; RAW: the body's
    block_header_size: int  # 0: RAW (labels then pixels)
    pic_alignment: int
    crc_code: int

    @property
    def raw(self) -> bool:
        return self.block_header_size == 0

    @property
    def sample_bytes(self) -> int:
        return self.width * self.height * self.channels


# each header field's byte offset, for the errors
_NAMES = ("magic", "version", "dataset_type", "is_training", "compress_level", "val_set_prep", "num_classes",
          "tensor_layout", "image_width", "image_height", "num_channels", "color_type", "num_samples",
          "num_volumes", "volume_id", "total_blocks", "num_blocks", "total_bytes", "header_bytes", "block_bytes",
          "block_size", "block_header_size", "pic_alignment", "max_pic_area", "max_pic_per_block")
_SIZES = (4, 4, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 4, 8, 4, 4, 4, 4, 4)
_OFFSETS = {n: sum(_SIZES[:i]) for i, n in enumerate(_NAMES)}
_Bad = Callable[[str, object, str], DataError]


def parse_header(buf: memoryview, size: int, where: str) -> V3Header:
    """The header of a seed DTS file of ``size`` bytes mapped as ``buf``, checked against the layout and
    the size; DataError naming the field and its byte offset otherwise."""
    if size < HEADER.size:
        raise DataError(f"{where}: {size} bytes: too short for a seed DTS header ({HEADER.size} bytes): truncated")
    f = HEADER.unpack_from(buf)
    if f[0] != MAGIC:
        raise DataError(f"{where}: not a DTS file (magic {f[0]!r} at byte 0, expected {MAGIC!r})")
    version = tuple(f[1:5])
    if version[0] == 4:
        raise DataError(f"{where}: already a tr DTS file (version 4): nothing to convert (tr-dts verify checks it)")
    if version != VERSION:
        raise DataError(f"{where}: DTS version {'.'.join(map(str, version))} at byte 4 is not the seed's "
                        f"{'.'.join(map(str, VERSION))}")
    (dataset_b, training, level, val_prep, classes, layout, width, height, channels, color_b, num, volumes,
     volume_id, total_blocks, num_blocks, total_bytes, header_bytes, block_bytes, block_size, bh_size, align,
     _max_area, max_pics, _ratio, *_norm, crc) = f[5:]

    def bad(field: str, value: object, why: str) -> DataError:
        at = _OFFSETS[field]
        return DataError(f"{where}: header field {field} (byte {at}) is {value!r}: {why}")

    dataset = dataset_b.decode("ascii", "replace").strip()
    if not dataset.isascii() or not dataset.isalnum():
        raise bad("dataset_type", dataset_b, "not a dataset name")
    if training not in (0, 1):
        raise bad("is_training", training, "expected 0 or 1")
    if val_prep not in (0, 1):
        raise bad("val_set_prep", val_prep, "expected 0 or 1")
    if not 0 <= level <= 3:
        raise bad("compress_level", level, "expected 0-3")
    if layout != b"NHWC":
        raise bad("tensor_layout", layout, "expected b'NHWC'")
    if classes < 1:
        raise bad("num_classes", classes, "a dataset has at least one class")
    color = color_b.decode("ascii", "replace")
    if color not in COLORS:
        raise bad("color_type", color_b, f"expected one of {sorted(COLORS)}")
    if channels != COLORS[color]:
        raise bad("num_channels", channels, f"color_type {color!r} has {COLORS[color]}")
    if (volumes, volume_id) != (1, 0):
        raise DataError(f"{where}: volume {volume_id} of {volumes} (bytes 56-63): a pack split over several "
                        f"volumes is not converted (the seed writes one volume)")
    if num < 1:
        raise bad("num_samples", num, "no samples")
    if total_blocks < 1 or num_blocks != total_blocks:
        raise bad("num_blocks", num_blocks, f"total_blocks is {total_blocks}: one volume holds every block")
    if header_bytes < HEADER.size:
        raise bad("header_bytes", header_bytes, f"shorter than the {HEADER.size}-byte header")
    h = V3Header(dataset, "train" if training else "val", level, classes, width, height, channels, color, num,
                 total_blocks, header_bytes, block_size, bh_size, align, crc)
    if bh_size == 0:
        _check_raw_sizes(h, block_bytes, total_bytes, max_pics, size, bad, where)
    else:
        _check_jpeg_sizes(h, block_bytes, total_bytes, max_pics, size, bad, where)
    padding = np.frombuffer(buf, np.uint8, header_bytes - HEADER.size, HEADER.size)
    if padding.any():
        raise DataError(f"{where}: the header region's padding is not zero at byte "
                        f"{HEADER.size + int(np.argmax(padding != 0))}: the header is damaged")
    return h


def _check_raw_sizes(h: V3Header, block_bytes: int, total_bytes: int, max_pics: int, size: int, bad: _Bad,
                     where: str) -> None:
    if h.header_bytes != RAW_HEADER_BYTES:
        raise bad("header_bytes", h.header_bytes, f"an MNIST/CIFAR pack's header region is {RAW_HEADER_BYTES}")
    if h.level != 0 or h.pic_alignment != 0 or h.total_blocks != 1:
        raise DataError(f"{where}: an MNIST/CIFAR pack (block_header_size 0) has compress_level 0, pic_alignment "
                        f"0 and one block; the header says {h.level}, {h.pic_alignment} and {h.total_blocks}")
    problem = raw_shape_problem(h.height, h.width, h.channels)
    if problem:
        raise DataError(f"{where}: the header's sample shape (bytes 36-47): {problem}")
    if h.num_classes > 256:
        raise bad("num_classes", h.num_classes, "the labels are single bytes (at most 256 classes)")
    if max_pics != h.num_samples:
        raise bad("max_pic_per_block", max_pics, f"the one block holds all {h.num_samples} samples")
    body = h.num_samples * (1 + h.sample_bytes)
    # The seed's make_dataset.py counted MNIST's pixels three times (block_bytes = N x (28 x 28 x 3 + 1));
    # its files say so, and are whole: the file's size is checked against the body it does hold.
    said = {body} | ({h.num_samples * (h.width * h.height * 3 + 1)} if h.channels == 1 else set())
    if block_bytes not in said or h.block_size != block_bytes:
        raise DataError(f"{where}: the header's block_bytes {block_bytes} (byte 84) and block_size {h.block_size} "
                        f"(byte 92) are not the {body} bytes of {h.num_samples} labels and "
                        f"{h.height}x{h.width}x{h.channels} images")
    if total_bytes != h.header_bytes + block_bytes:
        raise bad("total_bytes", total_bytes, f"header_bytes + block_bytes is {h.header_bytes + block_bytes}")
    if size != h.header_bytes + body:
        raise DataError(f"{where}: {size} bytes; the header's {h.num_samples} labels and "
                        f"{h.height}x{h.width}x{h.channels} images take {h.header_bytes + body}: "
                        f"{'truncated' if size < h.header_bytes + body else 'bytes appended'}")


def _check_jpeg_sizes(h: V3Header, block_bytes: int, total_bytes: int, max_pics: int, size: int, bad: _Bad,
                      where: str) -> None:
    if h.block_header_size != BLOCK_HEADER_BYTES[h.level]:
        raise bad("block_header_size", h.block_header_size,
                  f"a level-{h.level} block index is {BLOCK_HEADER_BYTES[h.level]} bytes")
    if h.block_size % PAGE or h.block_size <= h.block_header_size:
        raise bad("block_size", h.block_size, f"expected a multiple of {PAGE} larger than the block index")
    if h.header_bytes != h.block_size:
        raise bad("header_bytes", h.header_bytes, f"an ImageNet pack's header region is one block ({h.block_size})")
    if h.pic_alignment & (h.pic_alignment - 1):
        raise bad("pic_alignment", h.pic_alignment, "expected 0 or a power of two")
    most = min(MAX_PICS, (h.block_header_size - BLOCK.size) // 12)
    if not 1 <= max_pics <= most:
        raise bad("max_pic_per_block", max_pics, f"expected 1-{most} (the block index's room, the seed's limit)")
    if h.num_samples > h.total_blocks * most:
        raise bad("num_samples", h.num_samples, f"{h.total_blocks} blocks hold at most {h.total_blocks * most}")
    if block_bytes != h.total_blocks * h.block_size:
        raise bad("block_bytes", block_bytes, f"{h.total_blocks} blocks of {h.block_size} bytes")
    if total_bytes != h.header_bytes + block_bytes:
        raise bad("total_bytes", total_bytes, f"header_bytes + block_bytes is {h.header_bytes + block_bytes}")
    if size != total_bytes:
        whole = (size - h.header_bytes) // h.block_size if size > h.header_bytes else 0
        raise DataError(f"{where}: {size} bytes, the header says {total_bytes} ({h.total_blocks} blocks): "
                        + (f"truncated in block {whole} (bytes {h.header_bytes + whole * h.block_size}-)"
                           if size < total_bytes else "bytes appended"))



@dataclass(frozen=True)
class _Index:
    offsets: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray


class V3File:
    """A seed DTS v3 file, mapped read-only and checked when opened: ``header``, ``samples()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        where = str(self.path)
        if not self.path.is_file():
            raise DataError(f"{where}: no such file" if not self.path.exists() else f"{where}: not a file")
        size = self.path.stat().st_size
        if size == 0:
            raise DataError(f"{where}: empty file, not a DTS file")
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self.header = parse_header(memoryview(self._map), size, where)
            self._index = self._check_raw() if self.header.raw else self._check_blocks()
        except BaseException:
            self.close()
            raise

    def _check_raw(self) -> list[_Index]:
        h = self.header
        labels = np.frombuffer(self._map, np.uint8, h.num_samples, h.header_bytes).copy()
        if (labels >= h.num_classes).any():
            j = int(np.argmax(labels >= h.num_classes))
            raise DataError(f"{self.path}: sample {j}'s label {labels[j]} (byte {h.header_bytes + j}) is outside "
                            f"[0, {h.num_classes})")
        step = h.sample_bytes
        first = h.header_bytes + h.num_samples  # the images follow the labels
        offsets = first + step * np.arange(h.num_samples, dtype=np.int64)
        return [_Index(offsets, np.full(h.num_samples, step, np.int64), labels)]

    def _check_blocks(self) -> list[_Index]:
        """Every block's index against its block: magic, id, count, offsets and sizes inside the block's
        samples, aligned, in order and apart, labels inside the classes; the counts against the header's."""
        h = self.header
        out, total = [], 0
        want_magic = f"LV{h.level}B".encode()
        most = min(MAX_PICS, (h.block_header_size - BLOCK.size) // 12)
        for i in range(h.total_blocks):
            start = h.header_bytes + i * h.block_size
            where = f"{self.path}: block {i} (bytes {start}-{start + h.block_size})"
            magic, block_id, n = BLOCK.unpack_from(self._map, start)
            if magic != want_magic:
                raise DataError(f"{where}: magic {magic!r}, expected {want_magic!r} (compress_level {h.level})")
            if block_id != i:
                raise DataError(f"{where}: its header says block_id {block_id}: blocks out of order or damaged")
            if not 1 <= n <= most:
                raise DataError(f"{where}: num_pics {n}, expected 1-{most} (the block index's room, the seed's "
                                f"limit)")
            index = np.frombuffer(self._map, "<u4", 3 * n, start + BLOCK.size).reshape(3, n).astype(np.int64)
            offsets, sizes, labels = index
            ends = offsets + sizes
            prev_end = np.concatenate(([h.block_header_size], ends[:-1]))
            whys = [(sizes == 0, "it is empty (0 bytes)"),
                    ((offsets < h.block_header_size) | (ends > h.block_size),
                     f"it lies outside the block's samples (bytes {h.block_header_size}-{h.block_size} of the block)"),
                    (offsets % h.pic_alignment != 0 if h.pic_alignment else None,
                     f"its offset is not a multiple of pic_alignment {h.pic_alignment}"),
                    (offsets < prev_end, "it overlaps the sample before it"),
                    (labels >= h.num_classes, f"its label is outside [0, {h.num_classes})")]
            bad = [(int(np.argmax(m)), why) for m, why in whys if m is not None and m.any()]
            if bad:
                j, why = min(bad, key=lambda b: b[0])
                raise DataError(f"{where}: sample {j} of the block (sample {total + j} of the file) has offset "
                                f"{offsets[j]}, size {sizes[j]}, label {labels[j]}: {why}")
            out.append(_Index(offsets + start, sizes, labels))
            total += n
        if total != h.num_samples:
            raise DataError(f"{self.path}: the blocks hold {total} samples, the header's num_samples (byte 52) "
                            f"says {h.num_samples}")
        return out

    def samples(self) -> Iterator[tuple[memoryview, int]]:
        """Every (sample bytes, label) in file order (RAW: the u8 HWC pixels; JPEG: the file's bytes). The
        body's CRC-32 is taken as the blocks are read: DataError after the last sample when it is not the
        header's crc_code (a caller writing a copy must not keep it then)."""
        h = self.header
        view = memoryview(self._map)
        crc = 0
        spans = ([(h.header_bytes, len(view))] if h.raw else
                 [(h.header_bytes + i * h.block_size, h.header_bytes + (i + 1) * h.block_size)
                  for i in range(h.total_blocks)])
        for k, ((lo, hi), idx) in enumerate(zip(spans, self._index)):
            crc = zlib.crc32(view[lo:hi], crc)
            if k == len(spans) - 1 and crc & 0xFFFFFFFF != h.crc_code:  # before the last block's samples
                raise DataError(f"{self.path}: the body's checksum does not match the header's crc_code (byte "
                                f"140: stored {h.crc_code:#010x}, computed {crc & 0xFFFFFFFF:#010x}): the file is "
                                f"damaged after byte {h.header_bytes}")
            for o, n, label in zip(idx.offsets.tolist(), idx.sizes.tolist(), idx.labels.tolist()):
                yield view[o:o + n], label

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a sample view is still alive: the map goes with the last of them
            pass

    def __enter__(self) -> V3File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
