"""Fetching dataset files from public mirrors, only when they are missing.

Nothing here runs unless a dataset was created with ``download=True`` and a file is absent. Every
mirror is tried in turn; the caller turns the collected failures into one DataError that names the
directory and the files it expected. ``TR_DATA_OFFLINE=1`` forbids network access altogether.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tr.core import env as tr_env
from tr.core.log import get_logger
from tr.core.tempfiles import new_file

log = get_logger(__name__)

TIMEOUT_S = 30.0


class DownloadFailed(Exception):
    """All mirrors failed; ``errors`` holds one line per attempt."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def offline() -> bool:
    return tr_env.get("TR_DATA_OFFLINE")


def md5sum(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(urls: Sequence[str], dest: Path, md5: str | None = None, timeout: float = TIMEOUT_S) -> Path:
    """Download the first of ``urls`` that works to ``dest`` (atomically); raises DownloadFailed."""
    if offline():
        raise DownloadFailed(["network access is disabled (TR_DATA_OFFLINE is set)"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for url in urls:
        fd, tmp = new_file(dest.parent, dest.name + ".", ".part")  # the umask's mode, kept by the rename
        try:
            log.info("downloading %s", url)
            with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=timeout) as r:
                while chunk := r.read(1 << 20):
                    f.write(chunk)
            if md5 is not None and (got := md5sum(tmp)) != md5:
                errors.append(f"{url}: md5 {got}, expected {md5}")
                continue
            os.replace(tmp, dest)
            return dest
        except (OSError, urllib.error.URLError, ValueError) as e:
            errors.append(f"{url}: {e}")
        finally:
            if tmp.exists():
                tmp.unlink()
    raise DownloadFailed(errors)
