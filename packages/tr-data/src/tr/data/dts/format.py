"""The DTS file format (version 4): a dataset packed into blocks, with a checksum for every part.

Our version of the seed's DTS v3 (SEED_SYSTEM.md §9), kept where it is sound (16 MiB blocks, a per-block
index as the only index, 64-byte sample alignment, levels 0-3) and strengthened where it is weak: the header
and every block header carry a CRC-32 of themselves, every block a CRC-32 of its samples, so damage is found
and named at the block (and the sample whose bytes it covers), and a reader refuses a newer major version.

Layout (little-endian):

* header region, ``header_bytes`` (a multiple of 4 KiB): the 256-byte fixed header (``HEADER``), then the
  metadata as UTF-8 JSON (class names, source, packing parameters), zero-padded. ``header_crc`` (the last
  field) is the CRC-32 of the whole region with that field zeroed. The metadata is an object whose keys in
  META_TYPES have those types; its "classes", where given, are the header's ``num_classes`` distinct names.
* blocks: block i starts at ``header_bytes + i * block_bytes``; the last block is cut after its last
  sample. A block is its header (``block_header_bytes``: ``BLOCK`` then offsets[n], sizes[n], labels[n] as
  u32, zero-padded), then the samples, each starting at a multiple of ``alignment`` from the block start.
  ``payload_crc`` covers the bytes from the end of the block header to the end of its last sample,
  ``header_crc`` the block header with that field zeroed.

Samples are ``kind`` RAW (u8 HWC pixels, all ``height x width x channels``: MNIST, CIFAR) or JPEG (the file's
bytes, any size; ``level`` 0 keeps the source's bytes, 1-3 re-encode: tr.data.dts.levels).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tr.core.errors import DataError
from tr.data.checks import MAX_SIDE

MAGIC = b".DTS"
VERSION = (4, 0, 0, 0)  # major, minor, patch, reserved: a reader refuses a newer major
KIND_RAW, KIND_JPEG = 0, 1
KINDS = {KIND_RAW: "raw", KIND_JPEG: "jpeg"}
SPLITS = ("train", "val")
PAGE = 4096
DEFAULT_BLOCK_BYTES = 16 << 20
MAX_BLOCK_BYTES = 1 << 30  # tr-dts pack --block-mib 1024: the u32 offsets of a block index stay in range
DEFAULT_ALIGNMENT = 64
MAX_CHANNELS = 64  # a RAW sample's channels: the native pipeline's limit (csrc/common.hpp kMaxChannels)
MAX_PICS_PER_BLOCK = 2000  # JPEG blocks: the index is sized for this many samples (the seed's safe limit: 1000)

# the fixed header: 256 bytes, header_crc last
HEADER = struct.Struct("<4s4B8sIIII4sIII4sQIIQIIIQI152xI")
BLOCK = struct.Struct("<4sIIIII")  # magic "LV<level>B", block_id, num_pics, payload_bytes, payload_crc, header_crc
assert HEADER.size == 256 and BLOCK.size == 24


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def crc32(*parts: bytes | memoryview) -> int:
    c = 0
    for p in parts:
        c = zlib.crc32(p, c)
    return c & 0xFFFFFFFF


@dataclass
class Header:
    """Everything the fixed header and the metadata say about a DTS file."""

    dataset: str  # up to 8 ASCII characters: "MNIST", "CIFAR10", "IMAGENET", a folder's name...
    split: str  # "train" | "val"
    kind: int  # KIND_RAW | KIND_JPEG
    level: int  # 0-3 (RAW: 0)
    num_classes: int
    width: int  # RAW: every sample's; JPEG: 0 (any)
    height: int
    channels: int
    color: str  # "GRAY", " RGB", "MIXD"
    num_samples: int
    total_blocks: int
    header_bytes: int
    block_bytes: int
    block_header_bytes: int
    alignment: int
    max_pics_per_block: int
    total_bytes: int  # the file's size
    meta: dict[str, Any] = field(default_factory=dict)
    version: tuple[int, int, int, int] = VERSION

    @property
    def classes(self) -> list[str]:
        return list(self.meta.get("classes", []))

    @property
    def sample_bytes(self) -> int:
        """RAW: the bytes of one sample."""
        return self.width * self.height * self.channels

    def pack(self) -> bytes:
        """The header region (header_bytes long) with its CRC."""
        meta = json.dumps(self.meta, sort_keys=True).encode()
        if HEADER.size + len(meta) > self.header_bytes:
            raise ValueError("header_bytes too small for the metadata")
        fixed = HEADER.pack(MAGIC, *self.version, self.dataset.encode("ascii")[:8].rjust(8), SPLITS.index(self.split),
                            self.level, self.kind, self.num_classes, b"NHWC", self.width, self.height, self.channels,
                            self.color.encode("ascii")[:4].rjust(4), self.num_samples, self.total_blocks,
                            self.header_bytes, self.block_bytes, self.block_header_bytes, self.alignment,
                            self.max_pics_per_block, self.total_bytes, len(meta), 0)
        region = bytearray(self.header_bytes)
        region[:HEADER.size] = fixed
        region[HEADER.size:HEADER.size + len(meta)] = meta
        struct.pack_into("<I", region, HEADER.size - 4, crc32(region))
        return bytes(region)

    @staticmethod
    def needed_bytes(meta: dict[str, Any]) -> int:
        return align(HEADER.size + len(json.dumps(meta, sort_keys=True).encode()), PAGE)


def parse_header(region: bytes, where: str) -> Header:
    """The Header of a DTS file from its first bytes (at least the fixed header; the whole header region for
    the CRC and the metadata: read again when ``header_bytes`` is larger than what was passed)."""
    if len(region) < HEADER.size:
        raise DataError(f"{where}: {len(region)} bytes: too short for a DTS header ({HEADER.size} bytes): truncated")
    f = HEADER.unpack_from(region)
    if f[0] != MAGIC:
        raise DataError(f"{where}: not a DTS file (magic {f[0]!r}, expected {MAGIC!r})")
    version = tuple(f[1:5])
    if version[0] > VERSION[0]:
        raise DataError(f"{where}: DTS version {'.'.join(map(str, version[:3]))} is newer than this reader's "
                        f"{VERSION[0]}.x: update tr-data")
    if version[0] < VERSION[0]:
        raise DataError(f"{where}: DTS version {'.'.join(map(str, version[:3]))} (the seed's format) is not read: "
                        f"pack the dataset again with tr-dts")
    (dataset, split, level, kind, classes, layout, width, height, channels, color, num, blocks, header_bytes,
     block_bytes, bh_bytes, alignment, max_pics, total, meta_len, crc) = f[5:]
    if header_bytes < HEADER.size or header_bytes % PAGE:
        raise DataError(f"{where}: a header region of {header_bytes} bytes is not a multiple of {PAGE}: the header "
                        f"is damaged")
    if len(region) < header_bytes:
        raise DataError(f"{where}: the header region is {header_bytes} bytes, the file has {len(region)}: truncated")
    body = bytearray(region[:header_bytes])
    struct.pack_into("<I", body, HEADER.size - 4, 0)
    if crc32(body) != crc:
        raise DataError(f"{where}: the header's checksum does not match (stored {crc:#010x}, computed "
                        f"{crc32(body):#010x}): the header is damaged")
    if split >= len(SPLITS) or kind not in KINDS or layout != b"NHWC" or not 0 <= level <= 3:
        raise DataError(f"{where}: header fields out of range (split {split}, kind {kind}, layout {layout!r}, "
                        f"level {level})")
    if meta_len > header_bytes - HEADER.size:
        raise DataError(f"{where}: the header's meta_len {meta_len} is more than its region's {header_bytes} bytes "
                        f"hold after the fixed {HEADER.size}")
    if max_pics < 1:
        raise DataError(f"{where}: the header's max_pics_per_block is {max_pics}: a block holds at least one sample")
    # a block header holds the fixed fields and an index of up to max_pics_per_block samples (12 bytes each)
    if bh_bytes < BLOCK.size + 12 * max_pics:
        raise DataError(f"{where}: the header's block_header_bytes {bh_bytes} cannot hold a block's fields and the "
                        f"index of max_pics_per_block {max_pics} samples ({BLOCK.size} + 12 x {max_pics} bytes)")
    if block_bytes <= bh_bytes:
        raise DataError(f"{where}: the header's block_bytes {block_bytes} leave no room for samples after the "
                        f"block_header_bytes {bh_bytes}")
    if alignment < 1 or alignment & (alignment - 1):
        raise DataError(f"{where}: the header's sample alignment {alignment} is not a power of two")
    if classes < 1:  # no label bound: every label would pass the block check
        raise DataError(f"{where}: the header says {classes} classes")
    try:
        meta = json.loads(bytes(region[HEADER.size:HEADER.size + meta_len]).decode())
    except ValueError as e:  # not UTF-8, not JSON, or an integer past Python's digit limit
        raise DataError(f"{where}: the header's metadata is not JSON: {e}") from None
    except RecursionError:
        raise DataError(f"{where}: the header's metadata is nested too deeply to read") from None
    problem = meta_problem(meta, classes)
    if problem:
        raise DataError(f"{where}: the header's metadata {problem}")
    return Header(dataset.decode("ascii", "replace").strip(), SPLITS[split], kind, level, classes, width, height,
                  channels, color.decode("ascii", "replace"), num, blocks, header_bytes, block_bytes, bh_bytes,
                  alignment, max_pics, total, meta, version)  # type: ignore[arg-type]


# the metadata's keys that tr reads, and the JSON type each must have
META_TYPES: dict[str, type] = {"classes": list, "dataset": str, "source": str, "level": int, "baseline": bool,
                               "skipped": list}
_JSON_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"), (list, "an array"),
               (dict, "an object"), (type(None), "null"))


def _json_type(v: Any) -> str:
    return next((name for t, name in _JSON_NAMES if isinstance(v, t)), type(v).__name__)


def meta_problem(meta: Any, num_classes: int) -> str | None:
    """What is wrong with a header's (decoded) metadata, or None: it is a JSON object, its keys in META_TYPES
    have their types, and "classes", where given, names the header's ``num_classes`` classes, each once by a
    non-empty string (readers index the names by label, tr-dts unpack makes a folder of each)."""
    if not isinstance(meta, dict):
        return f"is {_json_type(meta)}, expected an object"
    for key, want in META_TYPES.items():
        if key in meta and _json_type(meta[key]) != _json_type(want()):  # exact: True is no level, 1.5 neither
            return f"{key!r} is {_json_type(meta[key])} ({str(meta[key])[:40]}), expected {_json_type(want())}"
    classes = meta.get("classes")
    if classes is None:
        return None
    bad = [i for i, c in enumerate(classes) if not isinstance(c, str) or not c]
    if bad:
        return f"'classes' item {bad[0]} is {classes[bad[0]]!r}, expected a class name (a non-empty string)"
    if len(classes) != num_classes:
        return f"'classes' names {len(classes)} classes, the header says {num_classes}"
    twice = [c for c, k in Counter(classes).items() if k > 1]
    if twice:
        return f"'classes' names {twice[0]!r} more than once"
    return None


def block_header_bytes(max_pics: int) -> int:
    return align(BLOCK.size + 12 * max_pics, PAGE)


def block_magic(level: int) -> bytes:
    return f"LV{level}B".encode()


def block_bytes_problem(block_bytes: int, most: int | None = None) -> str | None:
    """What breaks the block-size rule, or None: a whole number of pages, at least two (the index's and the
    samples'), and at most ``most`` where the caller bounds it (tr-dts pack: MAX_BLOCK_BYTES)."""
    if block_bytes % PAGE:
        return f"{block_bytes} is not a multiple of {PAGE}"
    if block_bytes < 2 * PAGE:
        return f"{block_bytes} is under {2 * PAGE}"
    if most is not None and block_bytes > most:
        return f"{block_bytes} is over {most}"
    return None


def raw_shape_problem(height: int, width: int, channels: int) -> str | None:
    """What breaks the RAW sample-shape rule, or None: sides in [1, MAX_SIDE] (the transforms' limit),
    channels in [1, MAX_CHANNELS] (the native pipeline's)."""
    for name, v, top in (("height", height, MAX_SIDE), ("width", width, MAX_SIDE),
                         ("channels", channels, MAX_CHANNELS)):
        if not 1 <= v <= top:
            return f"{name} {v} is outside [1, {top}]"
    return None
