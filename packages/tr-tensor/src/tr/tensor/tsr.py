"""The seed's TSR-V4.20 tensor files, read (the seed's python/scripts/tsr_v4.py writes them; its C++ tests
compare against them): ``tr.tensor.load_tsr(path)`` or ``Tensor.load(path)`` for a file of one tensor.

Layout (little-endian):

    offset size  header (128 bytes)
    0      4     magic b"TSR4"
    4      4     u16 version major (4), u16 minor (20)
    8      4     u32 header_size (128)
    12     4     u32 file_mode: 0 RAW, 1 ZLIB
    16     4     u32 tensor_count (>= 1)
    20     4     u32 entry_size (64)
    24     8     u64 dir_offset (128)
    32     8     u64 data_offset: RAW: the directory's end rounded up to 256; ZLIB: the directory's end
    40     4     u32 header CRC-32 (zlib) of the 128 bytes with this field zero
    44     84    reserved, zero

    directory: tensor_count entries of 64 bytes from byte 128
    0      1     u8 dtype code: 0 FP32, 1 FP16, 2 INT8, 3 INT32
    1      3     reserved, zero
    4      16    i32[4] shape N, H, W, C (each >= 1)
    20     8     i64 numel (= N*H*W*C)
    28     8     i64 row_stride: W*C*itemsize rounded up to 256 (FP32, INT32) or 128 (FP16, INT8); unused
    36     8     u64 nbytes (= numel * itemsize: the elements are compact NHWC)
    44     8     u64 data_offset
    52     8     u64 payload_size: RAW nbytes; ZLIB the compressed size
    60     4     u32 CRC-32 of the nbytes of elements (after decompression)

    data: each tensor's payload in directory order, from the header's data_offset; RAW: each payload
    starts at a multiple of 256 (zero padding between, checked); ZLIB: one after the other. The file ends
    with the last payload.

The directory is under no checksum, so every entry is checked against the layout (its offset where the
writer puts it, its sizes against its shape and the file), every payload against its CRC: anything else is
a DataError naming the file, the tensor and the field.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError, ShapeError
from tr.core.shape import Shape

MAGIC = b"TSR4"
VERSION = (4, 20)
HEADER = struct.Struct("<4sHHIIIIQQII80s")
ENTRY = struct.Struct("<B3siiiiqqQQQI")
assert HEADER.size == 128 and ENTRY.size == 64
_CRC_AT = 40
MODES = {0: "RAW", 1: "ZLIB"}
RAW_ALIGN = 256
FROM_CODE = {0: DType.FP32, 1: DType.FP16, 2: DType.INT8, 3: DType.INT32}
ROW_ALIGN = {DType.FP32: 256, DType.FP16: 128, DType.INT8: 128, DType.INT32: 256}


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _check_header(raw: bytes, path: Path) -> tuple[int, int, int]:
    """(file_mode, tensor_count, data_offset) of a checked header."""
    if len(raw) < HEADER.size:
        raise DataError(f"{path}: {len(raw)} bytes is shorter than the 128-byte TSR4 header (truncated)")
    (magic, major, minor, header_size, mode, count, entry_size, dir_offset, data_offset, crc, reserved0,
     reserved1) = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise DataError(f"{path}: bad magic {magic!r}, expected {MAGIC!r} (not a TSR4 tensor file)")
    if (major, minor) != VERSION:
        raise DataError(f"{path}: TSR version {major}.{minor} (bytes 4-7) is not supported (this reader reads "
                        f"{VERSION[0]}.{VERSION[1]})")
    zeroed = raw[:_CRC_AT] + b"\0\0\0\0" + raw[_CRC_AT + 4:HEADER.size]
    got = zlib.crc32(zeroed) & 0xFFFFFFFF
    if got != crc:
        raise DataError(f"{path}: header CRC mismatch (stored {crc:#010x}, computed {got:#010x}): the header is "
                        f"corrupt")
    for name, at, value, want in (("header_size", 8, header_size, 128), ("entry_size", 20, entry_size, 64),
                                  ("dir_offset", 24, dir_offset, 128)):
        if value != want:
            raise DataError(f"{path}: header field {name} (byte {at}) is {value}, expected {want}")
    if mode not in MODES:
        raise DataError(f"{path}: header field file_mode (byte 12) is {mode}, expected 0 (RAW) or 1 (ZLIB)")
    if count < 1:
        raise DataError(f"{path}: header field tensor_count (byte 16) is 0: the file holds no tensor")
    if reserved0 or reserved1.strip(b"\0"):
        raise DataError(f"{path}: the header's reserved bytes (44-127) are not zero")
    dir_end = HEADER.size + count * ENTRY.size
    if dir_end > len(raw):
        k = (len(raw) - HEADER.size) // ENTRY.size
        raise DataError(f"{path}: directory entry {k} (bytes {HEADER.size + k * ENTRY.size}-"
                        f"{HEADER.size + (k + 1) * ENTRY.size}) of {count} runs past the end of the {len(raw)}-byte "
                        f"file (truncated, or tensor_count is wrong)")
    want = _align(dir_end, RAW_ALIGN) if mode == 0 else dir_end
    if data_offset != want:
        raise DataError(f"{path}: header field data_offset (byte 32) is {data_offset}, expected {want} "
                        f"({count} tensors, {MODES[mode]})")
    return mode, count, data_offset


def _zero(raw: bytes, path: Path, lo: int, hi: int, what: str) -> None:
    """DataError unless raw[lo:hi] (RAW padding, under no checksum) is zero."""
    if raw[lo:hi].strip(b"\0"):
        at = lo + len(raw[lo:hi]) - len(raw[lo:hi].lstrip(b"\0"))
        raise DataError(f"{path}: {what} (bytes {lo}-{hi}) is not zero at byte {at}: the file is damaged")


def _payload(raw: bytes, path: Path, i: int, at: int, mode: int, nbytes: int, offset: int, size: int) -> bytes:
    """Tensor ``i``'s nbytes of elements (a ZLIB payload decompressed, never past nbytes)."""
    data = raw[offset:offset + size]
    if mode == 0:
        return data
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, nbytes)  # bounded: a damaged stream cannot make it allocate more
        if len(out) == nbytes and not d.eof:
            out += d.decompress(d.unconsumed_tail, 1)  # the stream's end (a whole stream ends here)
    except zlib.error as e:
        raise DataError(f"{path}: tensor {i} (entry at byte {at}): zlib error in its compressed data "
                        f"(bytes {offset}-{offset + size}): {e}") from None
    if len(out) != nbytes or not d.eof or d.unused_data or d.unconsumed_tail:
        what = (f"decompresses to more than {nbytes} bytes" if len(out) > nbytes or d.unconsumed_tail
                else "has bytes after the end of its stream" if d.unused_data
                else f"decompresses to {len(out)} bytes, expected {nbytes}")
        raise DataError(f"{path}: tensor {i} (entry at byte {at}): its zlib stream {what}")
    return out


def decode(raw: bytes, path: Path) -> list[tuple[np.ndarray, DType]]:
    """Every (array (N, H, W, C), dtype) of a TSR4 file's bytes, in directory order; DataError naming
    ``path`` for anything damaged."""
    mode, count, pos = _check_header(raw, path)
    _zero(raw, path, HEADER.size + count * ENTRY.size, pos, "the padding after the directory")
    entries = []
    for i in range(count):
        at = HEADER.size + i * ENTRY.size
        code, reserved, n, h, w, c, numel, row_stride, nbytes, offset, size, crc = ENTRY.unpack_from(raw, at)
        where = f"{path}: tensor {i} (entry at byte {at})"
        if reserved.strip(b"\0"):
            raise DataError(f"{where}: reserved bytes {at + 1}-{at + 3} are not zero")
        if code not in FROM_CODE:
            raise DataError(f"{where}: unknown dtype code {code} (byte {at}; expected one of "
                            f"{', '.join(f'{k} {v.name}' for k, v in FROM_CODE.items())})")
        dt = FROM_CODE[code]
        try:
            shape = Shape(n, h, w, c)
        except ShapeError as e:
            raise DataError(f"{where}: corrupt shape (bytes {at + 4}-{at + 19}): {e}") from None
        if numel != shape.numel():
            raise DataError(f"{where}: numel {numel} (byte {at + 20}) is not that of shape {shape.dims}")
        if nbytes != numel * dt.itemsize:
            raise DataError(f"{where}: nbytes {nbytes} (byte {at + 36}) is not {numel} {dt.name} elements")
        if row_stride != _align(w * c * dt.itemsize, ROW_ALIGN[dt]):
            raise DataError(f"{where}: row_stride {row_stride} (byte {at + 28}) is not the seed's for W={w}, C={c} "
                            f"of {dt.name} ({_align(w * c * dt.itemsize, ROW_ALIGN[dt])})")
        if mode == 0 and size != nbytes:
            raise DataError(f"{where}: payload_size {size} (byte {at + 52}) is not nbytes {nbytes} (RAW)")
        if offset != pos:
            raise DataError(f"{where}: data_offset {offset} (byte {at + 44}) is not {pos}, where its payload "
                            f"follows the previous one's")
        if offset + size > len(raw):
            raise DataError(f"{where}: its data (bytes {offset}-{offset + size}) runs past the end of the "
                            f"{len(raw)}-byte file (truncated)")
        entries.append((i, at, dt, shape, nbytes, offset, size, crc))
        pos = offset + size
        if mode == 0 and i < count - 1:
            pos = _align(pos, RAW_ALIGN)
            _zero(raw, path, offset + size, pos, f"the padding after tensor {i}'s data")
    if len(raw) != pos:
        raise DataError(f"{path}: {len(raw)} bytes, the last tensor's payload ends at byte {pos} (trailing bytes)")
    out = []
    for i, at, dt, shape, nbytes, offset, size, crc in entries:
        data = _payload(raw, path, i, at, mode, nbytes, offset, size)
        got = zlib.crc32(data) & 0xFFFFFFFF
        if got != crc:
            raise DataError(f"{path}: tensor {i} (entry at byte {at}): data CRC mismatch (stored {crc:#010x}, "
                            f"computed {got:#010x}): its payload is corrupt")
        arr = np.frombuffer(data, dtype=dt.np_dtype.newbyteorder("<")).astype(dt.np_dtype).reshape(shape.dims)
        out.append((arr, dt))
    return out


def load(path: Path) -> list[tuple[np.ndarray, DType]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    return decode(raw, path)
