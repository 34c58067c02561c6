"""Atomic, verified extraction of a dataset archive (.tar / .tar.gz).

An interrupted extraction (kill -9, a full disk) must never leave a truncated file that later runs take
for a complete one. So every member is written into a staging directory inside ``dest`` (same file
system), checked against the size the archive records, fsynced, and only then renamed into place (one
atomic rename per file). Last, a manifest ``.tr-extracted-<archive>.json`` in ``dest`` records each file's
size and md5: the dataset checks its files' sizes against it on every load (cheap), and a file that
disagrees is extracted again. Staging directories left by a killed process are removed on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from tr.core.errors import DataError
from tr.core.log import get_logger
from tr.core.tempfiles import new_file

log = get_logger(__name__)

STAGING_PREFIX = ".tr-extract-"
_CHUNK = 1 << 20


def manifest_path(dest: Path, archive_name: str) -> Path:
    return dest / f".tr-extracted-{archive_name}.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove_stale_staging(dest: Path) -> None:
    """Staging directories of dead processes (``.tr-extract-<pid>.*``); live ones may still be working."""
    for d in dest.glob(STAGING_PREFIX + "*"):
        pid = d.name[len(STAGING_PREFIX) :].split(".", 1)[0]
        if d.is_dir() and pid.isdigit() and not _pid_alive(int(pid)):
            log.info("removing %s, left by an interrupted extraction", d)
            shutil.rmtree(d, ignore_errors=True)


def _relative(name: str) -> str:
    """A member's path relative to ``dest``, normalised ("a/../b" -> "b"), the key of the manifest."""
    return os.path.normpath(name).replace(os.sep, "/").lstrip("/")


def _checked_members(tf: tarfile.TarFile, archive: Path, root: Path) -> list[tarfile.TarInfo]:
    members = tf.getmembers()
    for m in members:
        target = (root / m.name).resolve()
        if root != target and root not in target.parents:
            raise DataError(f"{archive}: member {m.name!r} would be extracted outside {root}")
        if not (m.isfile() or m.isdir()):
            raise DataError(f"{archive}: member {m.name!r} is not a regular file or directory")
    return [m for m in members if m.isfile()]


def _write_member(tf: tarfile.TarFile, m: tarfile.TarInfo, out: Path, archive: Path) -> dict:
    src = tf.extractfile(m)
    if src is None:  # pragma: no cover - isfile() members always have data
        raise DataError(f"{archive}: member {m.name!r} has no data")
    out.parent.mkdir(parents=True, exist_ok=True)
    h, n = hashlib.md5(), 0
    with src, open(out, "wb") as f:
        while chunk := src.read(_CHUNK):
            h.update(chunk)
            f.write(chunk)
            n += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    if n != m.size:
        raise DataError(f"{archive}: member {m.name!r} gave {n} bytes, the archive says {m.size} (truncated archive)")
    return {"size": n, "md5": h.hexdigest()}


def extract_tar(archive: Path, dest: Path) -> dict[str, dict]:
    """Extract ``archive`` into ``dest`` atomically (see the module docstring); returns the manifest's
    files: {relative path: {"size", "md5"}}. DataError for unsafe members or a corrupt archive."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    _remove_stale_staging(dest)
    # mkdtemp's 0700 is right here: the folder is never renamed into view, only the files written in it with
    # open() (the umask's mode), and it is removed at the end
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}.", dir=dest))
    try:
        files: dict[str, dict] = {}
        try:
            with tarfile.open(archive, "r:*") as tf:
                for m in _checked_members(tf, archive, root):
                    rel = _relative(m.name)
                    if rel == ".." or rel.startswith("../"):  # resolves inside dest only through its own name
                        raise DataError(f"{archive}: member {m.name!r} climbs out of the extraction directory")
                    files[rel] = _write_member(tf, m, staging / rel, archive)
        except DataError:
            raise
        except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as e:
            raise DataError(f"{archive}: cannot extract ({e})") from e
        # Every file is complete on disk: move them into place, then record them.
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, target)
        write_manifest(dest, archive.name, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files


def write_manifest(dest: Path, archive_name: str, files: dict[str, dict]) -> None:
    path = manifest_path(dest, archive_name)
    fd, tmp = new_file(dest, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"archive": archive_name, "files": files}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_manifest(dest: Path, archive_name: str) -> dict[str, int] | None:
    """{relative path: size} that a previous extraction recorded, or None (none here, or unreadable)."""
    path = manifest_path(dest, archive_name)
    try:
        return {str(k): int(v["size"]) for k, v in json.loads(path.read_text())["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def archive_sizes(archive: Path) -> dict[str, int]:
    """{relative path: size} of the regular files in an archive (reads the whole archive)."""
    try:
        with tarfile.open(archive, "r:*") as tf:
            return {_relative(m.name): m.size for m in tf.getmembers() if m.isfile()}
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(f"{archive}: cannot read ({e})") from e


def size_problems(dest: Path, paths: list[Path], sizes: dict[str, int]) -> list[str]:
    """One line per file of ``paths`` whose size differs from ``sizes`` (keys relative to ``dest``)."""
    out = []
    for p in paths:
        try:
            rel = p.resolve().relative_to(dest.resolve()).as_posix()
        except ValueError:
            continue  # not extracted here
        want = sizes.get(rel)
        if want is None:
            continue
        try:
            got = p.stat().st_size
        except OSError:
            got = -1
        if got != want:
            out.append(f"{p} has {got} bytes, the archive holds {want} (truncated or incomplete extraction)")
    return out
