"""A checkpoint on disk: one directory, written atomically, verified completely before anything is used.

Layout (format ``tr.checkpoint``, version 2)::

    <path>/state.safetensors   every state tensor of the arena, by name (the safetensors package's format)
    <path>/manifest.json       {"format", "version", "files": {name: {"sha256", "bytes"}}, ..., "sha256"}

The manifest's own ``sha256`` is the SHA-256 of its canonical JSON (sorted keys, no spaces) without that
key, so a flipped bit in the manifest is caught like one in a tensor file. What else the manifest holds
(epoch, tensor list, the configuration description, metrics) is the caller's (tr.task.checkpoint). Version 2
names a tensor's region by its memory role and group ("moment1/fc_w") and lays the arena out by them; a
version 1 checkpoint (the seed's fixed region enum: "M_FC_WEIGHT") is refused, saying so.

Writing: everything goes to ``.<name>.tmp-<pid>-<random>`` beside ``path`` (same file system), every file
and that directory are fsynced, then the directory takes ``path``'s place: renameat2(RENAME_EXCHANGE) swaps
it with an existing checkpoint in one step (Linux), else the old one is first moved to ``.<name>.old``
(and ``read`` falls back to it while ``path`` is missing, the one moment a crash can leave). The parent is
fsynced after the rename. A directory whose name starts with ``.`` is never read as a checkpoint, so a crash
at any moment leaves the previous checkpoint whole and no partial one is taken for complete.

A save never deletes what it did not write (:func:`check_target`): ``path`` may be missing (its missing
parent directories are made), an empty directory, or a tr checkpoint (a directory whose manifest.json is a
tr checkpoint manifest and which holds nothing but a checkpoint's files); anything else (a file, a symbolic
link, a user's folder such as a ``log_to`` directory) is refused with a DataError naming the path and what is
there. The leftovers it tidies up (``.<name>.tmp-*`` of a writer that died, ``.<name>.old``) are removed only
when they hold nothing but a checkpoint's files (and a temporary only when its writer process is gone).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError
from tr.core.log import get_logger
from tr.tensor import safetensors_io
from tr.tensor.atomic import fsync_dir

log = get_logger(__name__)

FORMAT, VERSION = "tr.checkpoint", 2
# versions this tr refuses with an explanation rather than only the number
_OLDER = {1: "it was written by an older tr with the seed-region memory layout (regions such as W_FC_WEIGHT), "
             "which this tr cannot read: resume it with the tr that wrote it, or start the run again"}
MANIFEST, STATE = "manifest.json", "state.safetensors"


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux renameat2); False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    return False  # e.g. EINVAL on a file system without exchange: the two-rename path follows


def _old(path: Path) -> Path:
    return path.parent / f".{path.name}.old"


def _only_checkpoint_files(path: Path) -> list[str] | None:
    """The names in directory ``path`` that no checkpoint writes (empty: only a checkpoint's files), or None
    when ``path`` is not a directory that can be listed."""
    try:
        if path.is_symlink() or not path.is_dir():
            return None
        return sorted(p.name for p in path.iterdir() if p.name not in (MANIFEST, STATE))
    except OSError:
        return None


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a directory a checkpoint save wrote: its manifest.json is a tr checkpoint manifest
    (damaged tensors or a stale checksum still count) and it holds nothing else but the state file."""
    path = Path(path)
    if _only_checkpoint_files(path) != []:
        return False
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def check_target(path: str | Path) -> Path:
    """``path`` if a checkpoint may be saved there (missing, an empty directory, or a tr checkpoint), else a
    DataError naming it and what is there: a save never replaces what it did not write."""
    path = Path(path)
    if not os.path.lexists(path):
        return path
    if path.is_symlink():
        why = "it is a symbolic link (save to the directory it points to, or remove the link)"
    elif not path.is_dir():
        why = "it is a file, not a checkpoint directory"
    else:
        extra = _only_checkpoint_files(path)
        if extra == [] and (is_checkpoint(path) or not any(path.iterdir())):
            return path  # a checkpoint (a damaged one is replaced too), or an empty directory: nothing to lose
        if extra is None:
            why = "its contents cannot be listed"
        elif extra:
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
            why = f"it is a directory that holds {shown}, which a checkpoint does not"
        elif not (path / MANIFEST).exists():
            why = f"it holds {STATE} but no {MANIFEST}: not a tr checkpoint"
        else:
            why = f"its {MANIFEST} is not a tr checkpoint manifest"
    raise DataError(f"{path}: cannot save a checkpoint there: {why}; a save replaces only a tr checkpoint "
                    f"(choose a new path, or remove what is there)")


def _writer_alive(name: str, prefix: str) -> bool:
    """Whether the process whose id the temporary directory ``name`` (``<prefix><pid>-<hex>``) carries still
    runs (then it may still be writing)."""
    pid = name[len(prefix):].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def _leftovers(path: Path) -> None:
    """Remove what earlier saves of ``path`` left: temporaries of writers that died, and ``.<name>.old``
    when ``path`` is whole; only directories that hold nothing but a checkpoint's files."""
    prefix = f".{path.name}.tmp-"
    for stale in path.parent.glob(f"{glob.escape(prefix)}*"):
        if _only_checkpoint_files(stale) == [] and not _writer_alive(stale.name, prefix):
            shutil.rmtree(stale, ignore_errors=True)
    if path.exists() and _only_checkpoint_files(_old(path)) == []:
        shutil.rmtree(_old(path), ignore_errors=True)


def write(path: str | Path, tensors: dict[str, tuple[np.ndarray, DType]], body: dict[str, Any]) -> Path:
    """Write a checkpoint directory at ``path`` (replacing a checkpoint that is there; see :func:`check_target`
    for what is refused) holding ``tensors`` and a manifest with ``body``'s keys; missing parent directories
    are made. OSError becomes a DataError naming ``path``; ``path`` is untouched then."""
    path = check_target(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{path}: cannot save the checkpoint: cannot make {parent} ({e.strerror or e})") from e
    _leftovers(path)
    tmp = parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        tmp.mkdir()
        raw = safetensors_io.to_bytes(path / STATE, tensors)
        _write_file(tmp / STATE, raw)
        manifest = {**body, "format": FORMAT, "version": VERSION,
                    "files": {STATE: {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}}}
        manifest["sha256"] = hashlib.sha256(_canonical(manifest)).hexdigest()
        _write_file(tmp / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
        fsync_dir(tmp)
        if path.exists():
            if _exchange(tmp, path):
                fsync_dir(parent)
                shutil.rmtree(tmp)  # now what was at path: a checkpoint or an empty directory (check_target)
                return path
            os.replace(path, _old(path))
        os.replace(tmp, path)
        fsync_dir(parent)
    except BaseException as e:  # KeyboardInterrupt too: leave no temporary directory behind
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise DataError(f"{path}: cannot save the checkpoint ({e.strerror or e})") from e
        raise
    if _only_checkpoint_files(_old(path)) == []:  # the previous checkpoint, moved aside (by this save or one cut)
        shutil.rmtree(_old(path), ignore_errors=True)
    return path


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, DType]]]:
    """(manifest, tensors) of the checkpoint at ``path``, every checksum verified: any damage, a missing or
    extra file, or a manifest that does not describe the files is a DataError naming the file."""
    path, manifest = _manifest(path)
    want = manifest["files"][STATE]
    fpath = path / STATE
    try:
        raw = fpath.read_bytes()
    except OSError as e:
        raise DataError(f"{fpath}: cannot read ({e.strerror or e})") from None
    if len(raw) != want["bytes"]:
        raise DataError(f"{fpath}: {len(raw)} bytes, the manifest says {want.get('bytes')} (truncated or replaced)")
    if hashlib.sha256(raw).hexdigest() != want.get("sha256"):
        raise DataError(f"{fpath}: SHA-256 {hashlib.sha256(raw).hexdigest()[:16]}... differs from the "
                        f"manifest's {str(want.get('sha256'))[:16]}... (the file is damaged)")
    return manifest, safetensors_io.from_bytes(fpath, raw)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The verified manifest of the checkpoint at ``path`` without reading its tensors (what to compile with
    before a resume reads them all); the same DataErrors as :func:`read` for the manifest."""
    return _manifest(path)[1]


def _manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(the directory read, its manifest), the manifest's own checksum and its file entry verified."""
    path = Path(path)
    if not path.exists() and (_old(path) / MANIFEST).exists():
        log.warning("%s is missing: a save was interrupted; reading the previous checkpoint %s", path, _old(path))
        path = _old(path)
    mpath = path / MANIFEST
    try:
        text = mpath.read_bytes()
    except OSError as e:
        raise DataError(f"{mpath}: cannot read the checkpoint manifest ({e.strerror or e})") from None
    try:
        manifest = json.loads(text)
    except ValueError as e:
        raise DataError(f"{mpath}: not a checkpoint manifest (invalid JSON: {e})") from None
    except RecursionError:
        raise DataError(f"{mpath}: not a checkpoint manifest (JSON nested too deep)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{mpath}: not a tr checkpoint manifest (format {FORMAT!r} expected)")
    version = manifest.get("version")
    if type(version) is int and version in _OLDER:  # (a JSON true or 1.0 is no version this tr wrote)
        raise DataError(f"{mpath}: checkpoint format version {version}: {_OLDER[version]} (this tr reads "
                        f"version {VERSION})")
    if version != VERSION:
        raise DataError(f"{mpath}: checkpoint format version {version!r}, this tr reads {VERSION}")
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    if hashlib.sha256(_canonical(body)).hexdigest() != manifest.get("sha256"):
        raise DataError(f"{mpath}: the manifest's checksum does not match its content (the manifest is damaged)")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {STATE}:
        listed = sorted(files) if isinstance(files, dict) else repr(files)[:60]
        raise DataError(f"{mpath}: the manifest lists files {listed}, expected [{STATE!r}]")
    want = files[STATE]
    if not isinstance(want, dict) or not isinstance(want.get("bytes"), int) or not isinstance(want.get("sha256"), str):
        raise DataError(f"{mpath}: the manifest's entry of {STATE} is {repr(want)[:80]}, expected its bytes and "
                        f"sha256")
    return path, manifest
