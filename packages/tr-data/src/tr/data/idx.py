"""Reader of the idx format (MNIST): big-endian header, then the raw array.

Header: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
0x0E float64), the number of dimensions, then one big-endian uint32 per dimension. Files may be gzipped.
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np

from tr.core.errors import DataError

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is a gzip file (by its magic, not its name)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated gzip data ({e})") from e
    return raw


def read_idx(path: str | Path, ndim: int | None = None) -> np.ndarray:
    """The array stored in an idx file; ``ndim`` checks the magic (3 for images, 1 for labels)."""
    path = Path(path)
    data = read_bytes(path)
    if len(data) < 4:
        raise DataError(f"{path}: truncated idx file: {len(data)} bytes, shorter than the 4-byte magic")
    magic = int.from_bytes(data[:4], "big")
    code, nd = data[2], data[3]
    if data[0] != 0 or data[1] != 0 or code not in IDX_TYPES or nd == 0:
        want = f" (expected 0x{0x0800 | ndim:08x})" if ndim else ""
        raise DataError(f"{path}: not an idx file: magic number 0x{magic:08x}{want}")
    if ndim is not None and nd != ndim:
        raise DataError(
            f"{path}: idx file has {nd} dimensions (magic 0x{magic:08x}), expected {ndim} (magic 0x{0x0800 | ndim:08x})"
        )
    if nd > 32:  # numpy arrays have at most 64 dimensions; real idx files 1 to 4
        raise DataError(f"{path}: idx header claims {nd} dimensions (magic 0x{magic:08x}); at most 32 are read")
    head = 4 + 4 * nd
    if len(data) < head:
        raise DataError(f"{path}: truncated idx header: expected {head} bytes, got {len(data)}")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(nd))
    dt = np.dtype(IDX_TYPES[code])
    expected = head + math.prod(dims) * dt.itemsize  # exact: a corrupt header must not wrap around int64
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "oversized"
        raise DataError(
            f"{path}: {what} idx file: header says shape {dims} so {expected} bytes are expected, got {len(data)}"
        )
    return np.frombuffer(data, dtype=dt, offset=head).reshape(dims).astype(dt.newbyteorder("="), copy=False)
