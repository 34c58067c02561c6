"""Writing a DTS file (tr.data.dts.format): samples in, blocks out, atomically.

The file is written under a hidden temporary name in the target's folder, fsynced, then renamed over the
target (and the folder fsynced): a crash or an error leaves no partial file under the target's name, and a
file that was there stays whole until the new one replaces it.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.data.checks import MAX_SIDE
from tr.data.dts.format import (
    BLOCK,
    DEFAULT_ALIGNMENT,
    DEFAULT_BLOCK_BYTES,
    KIND_JPEG,
    KIND_RAW,
    MAX_CHANNELS,
    MAX_PICS_PER_BLOCK,
    PAGE,
    Header,
    align,
    block_bytes_problem,
    block_header_bytes,
    block_magic,
    crc32,
    meta_problem,
    raw_shape_problem,
)


class DtsWriter:
    """``with DtsWriter(path, header) as w: w.add(sample_bytes, label)`` ... packs samples into blocks in the
    order given. ``header`` gives the dataset's description; the counts, sizes and CRCs are filled in here."""

    def __init__(self, path: str | Path, header: Header) -> None:
        self.path = Path(path)
        if header.kind not in (KIND_RAW, KIND_JPEG):
            raise ConfigError(f"DTS kind {header.kind} is not RAW ({KIND_RAW}) or JPEG ({KIND_JPEG})")
        if block_bytes_problem(header.block_bytes):
            raise ConfigError(f"DTS block size {header.block_bytes} must be a multiple of {PAGE} and >= {2 * PAGE}")
        if header.alignment < 1 or header.alignment & (header.alignment - 1):
            raise ConfigError(f"DTS sample alignment {header.alignment} must be a power of two")
        if isinstance(header.num_classes, bool) or not isinstance(header.num_classes, int) or header.num_classes < 1:
            raise ConfigError(f"a DTS needs a class count >= 1 (its labels are checked against it), got "
                              f"{header.num_classes!r}")
        # the metadata as a reader will decode it (tuples become lists), checked as it will check it
        try:
            meta = json.loads(json.dumps(header.meta))
        except (TypeError, ValueError) as e:  # a value JSON has no form for, or a circular reference
            raise ConfigError(f"a DTS header's metadata is not JSON: {e}") from None
        problem = meta_problem(meta, header.num_classes)
        if problem:
            raise ConfigError(f"a DTS header's metadata {problem}")
        self.h = header
        h = header
        if h.kind == KIND_RAW:
            if raw_shape_problem(h.height, h.width, h.channels):
                raise ConfigError(f"a RAW DTS needs the sample shape (sides in [1, {MAX_SIDE}], channels in [1, "
                                  f"{MAX_CHANNELS}]), got {h.height}x{h.width}x{h.channels}")
            # as many samples as fit beside an index sized for them (12 bytes of index a sample)
            step = align(h.sample_bytes, h.alignment)
            per = max(0, (h.block_bytes - BLOCK.size - PAGE) // (step + 12))
            while per > 0 and block_header_bytes(per) + per * step > h.block_bytes:
                per -= 1
            if per < 1:
                raise ConfigError(f"a {h.sample_bytes}-byte sample does not fit a {h.block_bytes}-byte block")
            h.max_pics_per_block = per
        else:
            h.max_pics_per_block = MAX_PICS_PER_BLOCK
        h.block_header_bytes = block_header_bytes(h.max_pics_per_block)
        h.header_bytes = Header.needed_bytes(h.meta)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._f = None
        self._blocks = 0
        self._samples = 0
        self._reset_block()

    # --- the current block -----------------------------------------------------------------------------
    def _reset_block(self) -> None:
        self._buf = bytearray(self.h.block_bytes)
        self._end = self.h.block_header_bytes  # where the next sample goes
        self._offsets: list[int] = []
        self._sizes: list[int] = []
        self._labels: list[int] = []

    def _flush_block(self) -> None:
        if not self._offsets:
            return
        h, n = self.h, len(self._offsets)
        used = self._end  # the block ends after its last sample (its padding is not written for the last block)
        payload = memoryview(self._buf)[h.block_header_bytes:used]
        head = bytearray(h.block_header_bytes)
        index = np.array([self._offsets, self._sizes, self._labels], dtype="<u4").tobytes()
        BLOCK.pack_into(head, 0, block_magic(h.level), self._blocks, n, used - h.block_header_bytes, crc32(payload),
                        0)
        head[BLOCK.size:BLOCK.size + len(index)] = index
        struct.pack_into("<I", head, BLOCK.size - 4, crc32(head))
        self._buf[:h.block_header_bytes] = head
        assert self._f is not None
        self._f.seek(h.header_bytes + self._blocks * h.block_bytes)
        self._f.write(memoryview(self._buf)[:used])
        self._blocks += 1
        self._reset_block()

    # --- the file --------------------------------------------------------------------------------------
    def __enter__(self) -> DtsWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and not self.path.is_file():
            raise DataError(f"{self.path}: cannot write a DTS file there: it is a directory")
        self._f = open(self._tmp, "wb")  # noqa: SIM115 (closed in __exit__)
        self._f.write(bytes(self.h.header_bytes))  # the header is written last, when the counts are known
        return self

    def add(self, sample: bytes | memoryview | np.ndarray, label: int, where: str = "") -> None:
        """Append one sample (RAW: its u8 pixels, JPEG: the file's bytes) with its class label."""
        h = self.h
        if isinstance(sample, np.ndarray) and sample.dtype != np.uint8:  # its bytes are not pixels
            raise DataError(f"{self._named(where)}: a sample array must be uint8, got {sample.dtype}")
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)):  # 2.7 is not class 2
            raise DataError(f"{self._named(where)}: a label is an integer class index, got {label!r}")
        data = memoryview(np.ascontiguousarray(sample).reshape(-1)) if isinstance(
            sample, np.ndarray) else memoryview(sample)
        n = data.nbytes
        if h.kind == KIND_RAW and n != h.sample_bytes:
            raise DataError(f"{self._named(where)}: {n} bytes, the RAW DTS holds samples of {h.sample_bytes} "
                            f"({h.height}x{h.width}x{h.channels})")
        if not 0 <= int(label) < h.num_classes:
            raise DataError(f"{self._named(where)}: label {label} is outside [0, {h.num_classes})")
        if h.block_header_bytes + n > h.block_bytes:
            size = f"{h.block_bytes >> 20} MiB" if h.block_bytes >= 1 << 20 else f"{h.block_bytes >> 10} KiB"
            raise DataError(f"{where or f'sample {self._samples}'}: {n} bytes do not fit a {size} block with its "
                            f"{h.block_header_bytes >> 10} KiB index (pack with a larger --block-mib)")
        start = align(self._end, h.alignment)
        if start + n > h.block_bytes or len(self._offsets) == h.max_pics_per_block:
            self._flush_block()
            start = self._end
        self._buf[start:start + n] = data
        self._offsets.append(start)
        self._sizes.append(n)
        self._labels.append(int(label))
        self._end = start + n
        self._samples += 1

    def _named(self, where: str) -> str:
        """The next sample in an error message: its index in the file, then the caller's ``where`` (a file)."""
        return f"sample {self._samples}{' (' + where + ')' if where else ''}"

    def add_all(self, samples: Iterable[tuple[Any, int]]) -> None:
        for s, label in samples:
            self.add(s, label)

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._f is not None
        try:
            if exc_type is None:
                self._flush_block()
                if self._samples == 0:
                    raise DataError(f"{self.path}: no samples to pack")
                h = self.h
                h.num_samples, h.total_blocks = self._samples, self._blocks
                h.total_bytes = self._f.seek(0, os.SEEK_END)
                self._f.seek(0)
                self._f.write(h.pack())
                self._f.flush()
                os.fsync(self._f.fileno())
        except BaseException:
            self._f.close()
            self._tmp.unlink(missing_ok=True)
            raise
        self._f.close()
        if exc_type is not None:
            self._tmp.unlink(missing_ok=True)
            return
        os.replace(self._tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def raw_header(dataset: str, split: str, shape: tuple[int, int, int], num_classes: int,
               meta: dict[str, Any] | None = None, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Header:
    """The header of a RAW DTS (fixed-size u8 HWC samples, level 0)."""
    h, w, c = shape
    return Header(dataset=dataset, split=split, kind=KIND_RAW, level=0, num_classes=num_classes, width=w, height=h,
                  channels=c, color="GRAY" if c == 1 else " RGB", num_samples=0, total_blocks=0, header_bytes=0,
                  block_bytes=block_bytes, block_header_bytes=0, alignment=16, max_pics_per_block=0,
                  total_bytes=0, meta=dict(meta or {}))


def jpeg_header(dataset: str, split: str, level: int, num_classes: int, color: str,
                meta: dict[str, Any] | None = None, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Header:
    """The header of a JPEG DTS (level 0-3)."""
    if not 0 <= level <= 3:
        raise ConfigError(f"DTS level must be 0-3, got {level}")
    return Header(dataset=dataset, split=split, kind=KIND_JPEG, level=level, num_classes=num_classes, width=0,
                  height=0, channels=0, color=color, num_samples=0, total_blocks=0, header_bytes=0,
                  block_bytes=block_bytes, block_header_bytes=0, alignment=DEFAULT_ALIGNMENT, max_pics_per_block=0,
                  total_bytes=0, meta=dict(meta or {}))
