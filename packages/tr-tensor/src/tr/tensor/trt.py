"""The TRT tensor file format (``.trt`` or any suffix other than ``.npy`` / ``.safetensors``).

TRT format, version 2 (all integers little-endian):

    offset size  field
    0      8     magic b"TRTENSOR"
    8      4     u32 format version (2)
    12     4     u32 dtype code: 0 FP32, 1 FP16, 2 INT8, 3 INT32, 4 BF16 (stored as raw 16-bit patterns)
    16     16    u32[4] shape N, H, W, C
    32     8     u64 payload bytes (= N*H*W*C*itemsize)
    40     4     u32 CRC-32 (zlib) of the payload
    44     4     u32 name length L (bytes of UTF-8)
    48     4     u32 header CRC-32 (zlib): of bytes 0..63 with this field read as zero, then the name and
                 its padding (new in version 2)
    52     12    reserved, zero
    64     L     name, UTF-8
    64+L   ...   zero padding up to the next multiple of 64
    ...          payload: the elements in compact NHWC order

Version 2 puts the header under a checksum: in version 1 a corrupted shape, dtype or name field (a
permuted shape, say) loaded silently, since only the payload was checked. Now every byte of the file
is under one of the two CRCs. Version 1 files (bytes 48..63
zero, no header checksum) are still read, with every consistency check but that one; files are always
written as version 2. Load checks the magic, version, header CRC, dtype code, sizes and payload CRC and
raises DataError naming the file and the problem.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError, ShapeError
from tr.core.shape import Shape

MAGIC = b"TRTENSOR"
VERSION = 2
READABLE_VERSIONS = (1, 2)
HEADER = struct.Struct("<8sII4IQIII12s")
_CRC_AT = 48  # offset of the header CRC field
assert HEADER.size == 64
CODES = {DType.FP32: 0, DType.FP16: 1, DType.INT8: 2, DType.INT32: 3, DType.BF16: 4, DType.UINT8: 5}
FROM_CODE = {v: k for k, v in CODES.items()}


def _crc(*parts: bytes) -> int:
    c = 0
    for p in parts:
        c = zlib.crc32(p, c)
    return c & 0xFFFFFFFF


def encode(data: np.ndarray, dtype: DType, name: str) -> bytes:
    """The version-2 file bytes of a C-contiguous (N, H, W, C) array."""
    payload = data.tobytes()
    nm = name.encode("utf-8")
    n, h, w, c = data.shape
    fields = (MAGIC, VERSION, CODES[dtype], n, h, w, c, len(payload), _crc(payload), len(nm), 0, b"")
    head = bytearray(HEADER.pack(*fields))
    meta = nm + b"\0" * ((-(HEADER.size + len(nm))) % 64)
    struct.pack_into("<I", head, _CRC_AT, _crc(bytes(head), meta))  # computed with the field still zero
    return bytes(head) + meta + payload


def decode(raw: bytes, path: Path) -> tuple[np.ndarray, DType, str]:
    """(array, dtype, name) of a TRT file's bytes; DataError naming ``path`` for anything corrupt."""
    if len(raw) < HEADER.size:
        raise DataError(f"{path}: {len(raw)} bytes is shorter than the 64-byte TRT header (truncated)")
    magic, ver, code, n, h, w, c, nbytes, crc, nlen, head_crc, reserved = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise DataError(f"{path}: bad magic {magic!r}, expected {MAGIC!r} (not a TRT tensor file)")
    if ver not in READABLE_VERSIONS:
        raise DataError(f"{path}: TRT version {ver} is not supported (this build reads versions 1 and 2)")
    if HEADER.size + nlen > len(raw):
        raise DataError(f"{path}: name length {nlen} runs past the end of the {len(raw)}-byte file (corrupt header)")
    name_raw = raw[HEADER.size : HEADER.size + nlen]
    start = HEADER.size + nlen + (-(HEADER.size + nlen)) % 64
    if ver >= 2:
        zeroed = raw[:_CRC_AT] + b"\0\0\0\0" + raw[_CRC_AT + 4 : HEADER.size]
        if start > len(raw) or head_crc != _crc(zeroed, raw[HEADER.size : start]):
            raise DataError(f"{path}: header CRC mismatch, the header (shape, dtype, sizes or name) is corrupt")
    elif head_crc or reserved.strip(b"\0"):
        raise DataError(f"{path}: version-1 header has non-zero reserved bytes (corrupt header)")
    if code not in FROM_CODE:
        raise DataError(f"{path}: unknown dtype code {code} (expected one of {sorted(FROM_CODE)})")
    dt = FROM_CODE[code]
    try:
        shape = Shape(n, h, w, c)
    except ShapeError as e:
        raise DataError(f"{path}: corrupt shape: {e}") from None
    if nbytes != shape.numel() * dt.itemsize:
        raise DataError(f"{path}: payload size {nbytes} disagrees with shape {shape} of {dt.name}")
    if len(raw) != start + nbytes:
        what = "truncated" if len(raw) < start + nbytes else "trailing bytes"
        raise DataError(f"{path}: file has {len(raw)} bytes, expected {start + nbytes} ({what})")
    payload = raw[start:]
    if _crc(payload) != crc:
        raise DataError(f"{path}: CRC mismatch, the payload is corrupt")
    try:
        name = name_raw.decode("utf-8")
    except UnicodeDecodeError as e:  # only reachable in version 1 (version 2 checks the name's CRC)
        raise DataError(f"{path}: the tensor name is not UTF-8 ({e})") from None
    arr = np.frombuffer(payload, dtype=dt.np_dtype).reshape(shape.dims).copy()
    return arr, dt, name
