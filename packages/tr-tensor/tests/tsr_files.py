"""TSR-V4.20 files built from the seed's layout (python/scripts/tsr_v4.py's writer), for the tests of
tr.tensor.tsr and the parser fuzzer."""

from __future__ import annotations

import struct
import zlib

import numpy as np

HEADER = struct.Struct("<4sHHIIIIQQII80s")
ENTRY = struct.Struct("<B3xiiiiqqQQQI")
CODES = {np.float32: 0, np.float16: 1, np.int8: 2, np.int32: 3}
ROW_ALIGN = {0: 256, 1: 128, 2: 128, 3: 256}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def tsr_bytes(arrays: list[np.ndarray], compress: bool, version: tuple[int, int] = (4, 20)) -> bytearray:
    """A TSR4 file as the seed writes it: header (CRC over itself), 64-byte entries, payloads (RAW: each at
    a multiple of 256; ZLIB: packed)."""
    count = len(arrays)
    dir_end = 128 + 64 * count
    pos = dir_end if compress else _align(dir_end, 256)
    data_offset = pos
    entries, payloads = [], []
    for i, a in enumerate(arrays):
        code = CODES[a.dtype.type]
        n, h, w, c = a.shape
        clean = a.astype(a.dtype.newbyteorder("<")).tobytes()
        payload = zlib.compress(clean) if compress else clean
        row = _align(w * c * a.itemsize, ROW_ALIGN[code])
        entries.append(ENTRY.pack(code, n, h, w, c, a.size, row, len(clean), pos, len(payload), zlib.crc32(clean)))
        payloads.append((pos, payload))
        pos += len(payload)
        if not compress and i < count - 1:
            pos = _align(pos, 256)
    head = bytearray(HEADER.pack(b"TSR4", *version, 128, int(compress), count, 64, 128, data_offset, 0, 0,
                                 bytes(80)))
    struct.pack_into("<I", head, 40, zlib.crc32(head))
    out = bytearray(pos)
    out[:128] = head
    out[128:dir_end] = b"".join(entries)
    for at, p in payloads:
        out[at:at + len(p)] = p
    return out
