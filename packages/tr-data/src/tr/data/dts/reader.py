"""Reading a DTS file (tr.data.dts.format): header, blocks and samples, every checksum checked.

``DtsFile`` maps the file read-only. The header is checked when the file is opened (magic, version, CRC,
fields, metadata, the file's size, and its counts and sample shape against that size, before anything is
sized from them); a block's header CRC, index entries and payload CRC when the block is read, so damage is
a DataError naming the file, the block and the sample. ``verify()`` reads every block.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tr.core.errors import DataError
from tr.data.dts.format import BLOCK, KIND_RAW, Header, align, block_magic, crc32, parse_header, raw_shape_problem


@dataclass(frozen=True)
class Block:
    """One block's samples: ``offsets``/``sizes`` into ``data`` (the block's bytes), ``labels``."""

    index: int
    first_sample: int  # the file-wide index of its first sample
    data: memoryview
    offsets: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def sample(self, j: int) -> memoryview:
        o, n = int(self.offsets[j]), int(self.sizes[j])
        return self.data[o:o + n]


@dataclass
class VerifyReport:
    path: Path
    blocks: int = 0
    samples: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _check_counts(h: Header, where: str) -> None:
    """The header's counts and sample shape against its file's size (``total_bytes``, checked) and the
    pipeline's bounds, before anything is sized from them (``arrays()`` allocates num_samples samples)."""
    if h.num_samples < 1 or h.total_blocks < 1:
        raise DataError(f"{where}: the header says {h.num_samples} samples in {h.total_blocks} blocks")
    if h.header_bytes + (h.total_blocks - 1) * h.block_bytes + h.block_header_bytes > h.total_bytes:
        raise DataError(f"{where}: the header says {h.total_blocks} blocks; the file ends inside block "
                        f"{(h.total_bytes - h.header_bytes) // h.block_bytes}")
    sample = 1  # the fewest bytes a sample takes in the file (a JPEG's: at least one)
    if h.kind == KIND_RAW:
        problem = raw_shape_problem(h.height, h.width, h.channels)
        if problem:
            raise DataError(f"{where}: the header's RAW sample {problem}")
        sample = h.sample_bytes
        room = h.block_bytes - h.block_header_bytes
        if sample > room:
            raise DataError(f"{where}: the header's RAW samples of {h.height}x{h.width}x{h.channels} "
                            f"({sample} bytes) do not fit a block ({room} bytes after its header)")
    if h.num_samples > h.total_blocks * h.max_pics_per_block:
        raise DataError(f"{where}: the header's num_samples {h.num_samples} is more than its {h.total_blocks} "
                        f"blocks of at most {h.max_pics_per_block} samples hold")
    room = h.total_bytes - h.header_bytes - h.total_blocks * h.block_header_bytes
    if h.num_samples * sample > room:
        raise DataError(f"{where}: the header's num_samples {h.num_samples} samples of at least {sample} bytes "
                        f"need {h.num_samples * sample}, the file holds {room} besides its headers")


class DtsFile:
    """A DTS file opened for reading: ``header``, ``num_blocks``, ``block(i)``, ``samples()``, ``arrays()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        where = str(self.path)
        if not self.path.exists():
            raise DataError(f"{where}: no such DTS file")
        if not self.path.is_file():
            raise DataError(f"{where}: not a file")
        size = self.path.stat().st_size
        if size == 0:
            raise DataError(f"{where}: empty file, not a DTS file")
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.header: Header = parse_header(memoryview(self._map), where)
        h = self.header
        if size != h.total_bytes:
            raise DataError(f"{where}: {size} bytes, the header says {h.total_bytes}: "
                            f"{'truncated' if size < h.total_bytes else 'bytes appended'}")
        _check_counts(h, where)
        self._starts: list[int] | None = None  # file-wide index of each block's first sample (from a scan)

    # --- blocks ----------------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.header.total_blocks

    def _block_span(self, i: int) -> tuple[int, int]:
        h = self.header
        start = h.header_bytes + i * h.block_bytes
        end = min(start + h.block_bytes, h.total_bytes)
        return start, end

    def block(self, i: int, check: bool = True, first_sample: int = -1) -> Block:
        """Block ``i`` with its header CRC, index and (``check``) payload CRC verified."""
        h = self.header
        if not 0 <= i < h.total_blocks:
            raise IndexError(f"{self.path}: block {i} of {h.total_blocks}")
        start, end = self._block_span(i)
        where = f"{self.path}: block {i} (bytes {start}-{end})"
        data = memoryview(self._map)[start:end]
        if len(data) < h.block_header_bytes:
            raise DataError(f"{where}: {len(data)} bytes, shorter than its header ({h.block_header_bytes}): truncated")
        magic, block_id, n, payload, payload_crc, head_crc = BLOCK.unpack_from(data)
        head = bytearray(data[:h.block_header_bytes])
        struct.pack_into("<I", head, BLOCK.size - 4, 0)
        if magic != block_magic(h.level) or crc32(head) != head_crc:
            why = (f"magic {magic!r}, expected {block_magic(h.level)!r}" if magic != block_magic(h.level)
                   else f"its header's checksum does not match (stored {head_crc:#010x}, computed {crc32(head):#010x})")
            raise DataError(f"{where}: damaged block header: {why}")
        if block_id != i or not 0 < n <= h.max_pics_per_block or h.block_header_bytes + payload > len(data):
            raise DataError(f"{where}: inconsistent block header (id {block_id}, {n} samples, {payload} payload "
                            f"bytes in {len(data)})")
        index = np.frombuffer(data, "<u4", 3 * n, BLOCK.size).reshape(3, n)
        offsets, sizes, labels = index[0], index[1], index[2]
        lo, hi = h.block_header_bytes, h.block_header_bytes + payload
        self._check_index(where, offsets, sizes, labels, lo, hi, first_sample)
        if check:
            got = crc32(data[lo:hi])
            if got != payload_crc:
                raise DataError(f"{where}: the samples' checksum does not match (stored {payload_crc:#010x}, "
                                f"computed {got:#010x}): one of its {n} samples"
                                f"{f' ({first_sample}-{first_sample + n - 1})' if first_sample >= 0 else ''} is "
                                f"damaged")
        return Block(i, first_sample, data, offsets, sizes, labels.astype(np.int32))

    def _check_index(self, where: str, offsets: np.ndarray, sizes: np.ndarray, labels: np.ndarray, lo: int, hi: int,
                     first_sample: int) -> None:
        """DataError naming the first sample of the block whose index entry is not a sample of it: empty (a
        JPEG of 0 bytes would reach the decoder), not of the RAW size, outside the samples' bytes [lo, hi),
        off the alignment, or with a label outside the classes."""
        h = self.header
        ends = offsets.astype(np.int64) + sizes
        whys = [(sizes == 0, "it is empty (0 bytes)"),
                (sizes != h.sample_bytes if h.kind == KIND_RAW else None, f"a RAW sample is {h.sample_bytes} bytes"),
                ((offsets < lo) | (ends > hi), f"it lies outside the block's samples (bytes {lo}-{hi})"),
                (offsets % h.alignment != 0, f"its offset is not a multiple of the alignment {h.alignment}"),
                (labels >= h.num_classes, f"its label is outside [0, {h.num_classes})")]
        bad = [(int(np.argmax(m)), why) for m, why in whys if m is not None and m.any()]
        if bad:
            j, why = min(bad, key=lambda b: b[0])  # the first bad sample; its first reason
            file_wide = f" (sample {first_sample + j} of the file)" if first_sample >= 0 else ""
            raise DataError(f"{where}: sample {j} of the block{file_wide} has offset {offsets[j]}, size {sizes[j]}, "
                            f"label {labels[j]}: {why}")

    def blocks(self, check: bool = True) -> Iterator[Block]:
        first = 0
        for i in range(self.num_blocks):
            b = self.block(i, check, first)
            first += len(b)
            yield b

    def check_split(self, split: str) -> None:
        """DataError unless the header names ``split``: a renamed pack holds the other split's samples."""
        if self.header.split != split:
            raise DataError(f"{self.path}: the header says it holds the {self.header.split} split")

    def check_count(self, n: int) -> None:
        """DataError unless the blocks' ``n`` samples are the header's count (a pack whose index lost or
        gained samples is damaged, whatever its checksums say)."""
        if n != self.header.num_samples:
            raise DataError(f"{self.path}: the blocks hold {n} samples, the header says {self.header.num_samples}")

    # --- samples ---------------------------------------------------------------------------------------
    def samples(self, check: bool = True) -> Iterator[tuple[memoryview, int]]:
        """Every (sample bytes, label) in file order; DataError after the last block when the blocks' count
        is not the header's."""
        n = 0
        for b in self.blocks(check):
            for j in range(len(b)):
                yield b.sample(j), int(b.labels[j])
            n += len(b)
        self.check_count(n)

    def labels(self) -> np.ndarray:
        """Every label in file order (from the block indexes; payloads not read)."""
        out = [b.labels for b in self.blocks(check=False)]
        self.check_count(sum(len(x) for x in out))
        return np.concatenate(out) if out else np.zeros(0, np.int32)

    def arrays(self, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """A RAW file as (images u8 (n, H, W, C), labels int32), copied out of the file."""
        h = self.header
        if h.kind != KIND_RAW:
            raise DataError(f"{self.path}: a JPEG DTS has no fixed-size arrays (decode its samples)")
        images = np.empty((h.num_samples, h.height, h.width, h.channels), np.uint8)
        labels = np.empty(h.num_samples, np.int32)
        k = 0
        step = align(h.sample_bytes, h.alignment)
        for b in self.blocks(check):
            n = len(b)
            if k + n > h.num_samples:
                raise DataError(f"{self.path}: the blocks hold more samples than the header's {h.num_samples}")
            o = int(b.offsets[0])
            if step == h.sample_bytes and np.all(np.diff(b.offsets) == step):  # contiguous: one copy
                flat = np.frombuffer(b.data, np.uint8, n * step, o)
                images[k:k + n] = flat.reshape(n, h.height, h.width, h.channels)
            else:
                for j in range(n):
                    images[k + j] = np.frombuffer(b.sample(j), np.uint8).reshape(h.height, h.width, h.channels)
            labels[k:k + n] = b.labels
            k += n
        self.check_count(k)
        return images, labels

    def verify(self) -> VerifyReport:
        """Every block read and checked; the errors collected (one per damaged block), not raised."""
        rep = VerifyReport(self.path)
        first = 0
        for i in range(self.num_blocks):
            try:
                b = self.block(i, True, first)
            except DataError as e:
                rep.errors.append(str(e))
                first = -1  # sample numbers after a damaged index are unknown
                continue
            rep.blocks += 1
            rep.samples += len(b)
            rep.bytes += int(b.sizes.sum())
            first = first + len(b) if first >= 0 else -1
        if not rep.errors and rep.samples != self.header.num_samples:
            rep.errors.append(f"{self.path}: the blocks hold {rep.samples} samples, the header says "
                              f"{self.header.num_samples}")
        return rep

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a Block's view of the file is still alive: the map goes with the last of them
            pass

    def __enter__(self) -> DtsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.header.num_samples

    def __repr__(self) -> str:
        h = self.header
        return f"DtsFile({self.path}, {h.dataset} {h.split}, {h.num_samples} samples, {h.total_blocks} blocks)"

