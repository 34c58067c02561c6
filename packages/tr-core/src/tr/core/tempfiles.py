"""Temporary files and folders for atomic writes (written aside, then renamed into place).

``tempfile.mkstemp`` and ``mkdtemp`` create 0600 files and 0700 folders, and a rename keeps that mode: a
downloaded dataset file or an unpacked folder would end up readable by its owner alone. These create them
as ``open()`` and ``mkdir`` do (0666 and 0777 less the umask), under a name no other process can take.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_TRIES = 100


def new_dir(parent: Path, prefix: str) -> Path:
    """A new, empty folder ``parent/<prefix><random>`` with the umask's mode."""
    for _ in range(_TRIES):
        path = parent / f"{prefix}{secrets.token_hex(6)}"
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent}: no free temporary name {prefix}* after {_TRIES} tries")


def new_file(parent: Path, prefix: str, suffix: str = "") -> tuple[int, Path]:
    """(descriptor open for writing, path) of a new, empty file ``parent/<prefix><random><suffix>`` with the
    umask's mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TRIES):
        path = parent / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free temporary name {prefix}*{suffix} after {_TRIES} tries")
