"""Unpacking a DTS file back into files other tools read (``tr-dts unpack FILE OUT``).

* a JPEG pack: ``OUT/<class>/<split>_<sample>.JPEG``, one folder per class named as the pack's classes (an
  ImageFolder that torchvision or tr.data.ImageFolder reads), each file the sample's bytes as packed;
* a RAW pack (MNIST, CIFAR): ``OUT/<split>.npz`` with ``images`` (N, H, W, C) u8 and ``labels`` (N,) i64.

Every block's checksums are checked as it is read, so a damaged pack stops with the block named. The files
are written under a temporary sibling of OUT and renamed into place at the end: an unpack that fails leaves
no OUT at all. OUT must not exist (or be an empty directory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from tr.core.errors import DataError
from tr.data.dts.format import KIND_RAW
from tr.data.dts.reader import DtsFile


def _class_dirs(classes: list[str], num_classes: int, where: Path) -> list[str]:
    names = classes or [str(i) for i in range(num_classes)]
    for n in names:  # folder names from the header: never a path that leaves OUT
        if not n or n in (".", "..") or "/" in n or "\\" in n or "\0" in n:
            raise DataError(f"{where}: class name {n!r} cannot be a folder name")
    return names


def unpack(path: str | Path, out: str | Path) -> int:
    """Write the samples of the DTS file ``path`` under ``out``; returns the number of samples written."""
    path, out = Path(path), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out}: exists and is not an empty directory (unpack writes a new one)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.unpack-", dir=out.parent))
    try:
        with DtsFile(path) as f:
            h = f.header
            if h.kind == KIND_RAW:
                images, labels = f.arrays()
                np.savez(tmp / f"{h.split}.npz", images=images, labels=labels.astype(np.int64))
                n = len(labels)
            else:
                names = _class_dirs(h.classes, h.num_classes, path)
                for name in names:
                    (tmp / name).mkdir()
                n = 0
                for data, label in f.samples():
                    if not 0 <= label < len(names):
                        raise DataError(f"{path}: sample {n} has label {label}, the pack has {len(names)} classes")
                    (tmp / names[label] / f"{h.split}_{n:08d}.JPEG").write_bytes(data)
                    n += 1
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n
