"""Atomic file writes: a save either leaves the complete new file or the previous one, never a torn file.

The bytes go to a unique temporary file in the destination's directory (same file system, so the rename
is atomic), which is flushed and fsynced before it replaces the destination; the directory is fsynced
after the rename so the new name survives a power loss too. A failed save removes its temporary file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tr.core.errors import DataError
from tr.core.tempfiles import new_file

TMP_SUFFIX = ".tmp"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory handles: the rename itself is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


fsync_dir = _fsync_dir  # public: tr.task.checkpoint_files fsyncs the directories it writes


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Run ``write(f)`` on a temporary file next to ``path``, then fsync and rename it onto ``path``.

    OSError (disk full, no permission, missing directory) becomes a DataError naming ``path``; any other
    exception propagates. Either way the temporary file is gone and an existing ``path`` is untouched.
    """
    path = Path(path)
    try:
        fd, tmp = new_file(path.parent, f".{path.name}.", TMP_SUFFIX)  # the umask's mode (mkstemp's 0600 would stay)
    except OSError as e:
        raise DataError(f"{path}: cannot save ({e.strerror or e})") from e
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:  # also KeyboardInterrupt: never leave the temporary file behind
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise DataError(f"{path}: cannot save ({e.strerror or e})") from e
        raise
    _fsync_dir(path.parent)
    return path


def write_bytes(path: str | Path, data: bytes | bytearray | memoryview) -> Path:
    """``atomic_write`` of a byte string."""
    return atomic_write(path, lambda f: f.write(data))
