"""Converting a seed DTS v3 file (tr.data.dts.v3) into a tr DTS v4 file: ``tr-dts convert OLD NEW``.

The seed's file is checked before anything is written (header, sizes, every block index: V3File); its
samples are then copied in file order into tr's writer (tr.data.dts.writer: tr's own blocks, index and
checksums), while the seed's body CRC is taken: a mismatch stops the copy and discards it. NEW is written
aside and appears only whole: the v4 file is written under a temporary name of its own in NEW's folder
and linked to NEW, which fails, leaving NEW as it is, if NEW appeared meanwhile (NEW must not exist; the
user's files are never replaced or deleted).

The seed's files name no classes; the converted pack names them "0", "1", ... (as tr-dts pack does MNIST's
and CIFAR's), by label. The seed's level (ImageNet) is kept: the samples are its JPEG bytes as packed.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tr.core.errors import ConfigError, DataError
from tr.core.tempfiles import new_file
from tr.data.dts.format import DEFAULT_BLOCK_BYTES, MAX_BLOCK_BYTES, PAGE, block_bytes_problem
from tr.data.dts.reader import DtsFile
from tr.data.dts.v3 import V3File
from tr.data.dts.writer import DtsWriter, jpeg_header, raw_header

Progress = Callable[[int, int, int], None]  # (samples done, of, bytes copied)


@dataclass(frozen=True)
class Converted:
    path: Path
    split: str
    kind: str  # "raw" | "jpeg"
    samples: int
    bytes: int  # NEW's size
    seconds: float


def _publish(staged: Path, new: Path) -> None:
    """``staged`` (whole, fsynced) becomes ``new`` without replacing a file that appeared there meanwhile."""
    try:
        os.link(staged, new)
    except FileExistsError:
        raise DataError(f"{new}: something was written there during the conversion; left as it is "
                        f"(convert writes a new file)") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        # a file system without hard links: the rename is still atomic, the check just before it is not
        if os.path.lexists(new):
            raise DataError(f"{new}: something was written there during the conversion; left as it is") from None
        os.replace(staged, new)
    fd = os.open(new.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def convert(old: str | Path, new: str | Path, block_bytes: int = DEFAULT_BLOCK_BYTES,
            progress: Progress | None = None) -> Converted:
    """Write the seed DTS v3 file ``old`` as the tr DTS v4 file ``new`` (which must not exist)."""
    old, new = Path(old), Path(new)
    if (isinstance(block_bytes, bool) or not isinstance(block_bytes, int)
            or block_bytes_problem(block_bytes, MAX_BLOCK_BYTES)):
        raise ConfigError(f"DTS block size must be a multiple of {PAGE} in [{2 * PAGE}, {MAX_BLOCK_BYTES}] bytes, "
                          f"got {block_bytes!r}")
    if os.path.lexists(new):
        raise DataError(f"{new}: exists (convert writes a new file; remove it or name another)")
    t0 = time.perf_counter()
    with V3File(old) as src:
        h = src.header
        meta = {"classes": [str(i) for i in range(h.num_classes)], "source": str(old), "dataset": h.dataset.lower(),
                "converted_from": "seed DTS 3.0.0"}
        if h.raw:
            head = raw_header(h.dataset, h.split, (h.height, h.width, h.channels), h.num_classes, meta, block_bytes)
        else:
            meta["level"] = h.level
            head = jpeg_header(h.dataset, h.split, h.level, h.num_classes, h.color, meta, block_bytes)
        new.parent.mkdir(parents=True, exist_ok=True)
        fd, staged = new_file(new.parent, f".{new.name}.convert-")  # ours: the writer renames onto it
        os.close(fd)
        try:
            copied = 0
            with DtsWriter(staged, head) as w:
                for i, (data, label) in enumerate(src.samples()):
                    w.add(data, label, f"{old}: sample {i}")
                    copied += len(data)
                    if progress is not None and (i % 1024 == 0 or i == h.num_samples - 1):
                        progress(i + 1, h.num_samples, copied)
            with DtsFile(staged) as check:  # what the writer wrote, read back as a reader will
                check.check_count(h.num_samples)
            _publish(staged, new)
        finally:
            staged.unlink(missing_ok=True)
    return Converted(new, h.split, "raw" if h.raw else "jpeg", h.num_samples, new.stat().st_size,
                     time.perf_counter() - t0)
