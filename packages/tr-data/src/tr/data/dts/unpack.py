"""Unpacking a DTS file back into files other tools read (``tr-dts unpack FILE OUT``).

* a JPEG pack: ``OUT/<class>/<split>_<sample>.JPEG``, one folder per class named as the pack's classes (an
  ImageFolder that torchvision or tr.data.ImageFolder reads), each file the sample's bytes as packed;
* a RAW pack (MNIST, CIFAR): ``OUT/<split>.npz`` with ``images`` (N, H, W, C) u8 and ``labels`` (N,) i64.

Every block's checksums are checked as it is read, so a damaged pack stops with the block named. The files
are written under a temporary sibling of OUT and renamed into place at the end: an unpack that fails leaves
no OUT at all. OUT must not exist (or be an empty directory): the user's files are never replaced or deleted,
even when some appear in OUT while the unpack runs. A new OUT gets the mode ``mkdir`` gives (the umask's); an
empty OUT that existed keeps its own.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import numpy as np

from tr.core.errors import DataError
from tr.core.tempfiles import new_dir
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
    if os.path.lexists(out) and (out.is_symlink() or not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out}: exists and is not an empty directory (unpack writes a new one)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_dir(out.parent, f".{out.name}.unpack-")  # not tempfile.mkdtemp: its 0700 would become OUT's mode
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
        if out.is_dir():  # the user's empty folder: the rename replaces it, so it keeps its mode
            os.chmod(tmp, stat.S_IMODE(out.stat().st_mode))
        try:
            os.replace(tmp, out)  # atomic; onto a directory only while it is empty, never over files
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise DataError(f"{out}: something was written there during the unpack; left as it is "
                                f"(unpack writes a new directory)") from None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n
