"""A checkpoint on disk: one directory, written atomically, verified completely before anything is used.

Layout (format ``tr.checkpoint``, version 1)::

    <path>/state.safetensors   every state tensor of the arena, by name (the safetensors package's format)
    <path>/manifest.json       {"format", "version", "files": {name: {"sha256", "bytes"}}, ..., "sha256"}

The manifest's own ``sha256`` is the SHA-256 of its canonical JSON (sorted keys, no spaces) without that
key, so a flipped bit in the manifest is caught like one in a tensor file. What else the manifest holds
(epoch, tensor list, the configuration description, metrics) is the caller's (tr.task.checkpoint).

Writing: everything goes to ``.<name>.tmp-<pid>-<random>`` beside ``path`` (same file system), every file
and that directory are fsynced, then the directory takes ``path``'s place: renameat2(RENAME_EXCHANGE) swaps
it with an existing checkpoint in one step (Linux), else the old one is first moved to ``.<name>.old``
(and ``read`` falls back to it while ``path`` is missing, the one moment a crash can leave). The parent is
fsynced after the rename. A directory whose name starts with ``.`` is never read as a checkpoint, so a crash
at any moment leaves the previous checkpoint whole and no partial one is taken for complete.
"""

from __future__ import annotations

import ctypes
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

FORMAT, VERSION = "tr.checkpoint", 1
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


def write(path: str | Path, tensors: dict[str, tuple[np.ndarray, DType]], body: dict[str, Any]) -> Path:
    """Write a checkpoint directory at ``path`` (replacing one that is there) holding ``tensors`` and a
    manifest with ``body``'s keys. OSError becomes a DataError naming ``path``; ``path`` is untouched then."""
    path = Path(path)
    parent = path.parent
    if path.exists() and not path.is_dir():
        raise DataError(f"{path}: cannot save a checkpoint there: it is a file, not a checkpoint directory")
    for stale in parent.glob(f".{path.name}.tmp-*"):  # a writer killed earlier; never a checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    if path.exists() and _old(path).exists():
        shutil.rmtree(_old(path), ignore_errors=True)
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
                shutil.rmtree(tmp)  # now the previous checkpoint
                return path
            os.replace(path, _old(path))
        os.replace(tmp, path)
        fsync_dir(parent)
    except BaseException as e:  # KeyboardInterrupt too: leave no temporary directory behind
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise DataError(f"{path}: cannot save the checkpoint ({e.strerror or e})") from e
        raise
    shutil.rmtree(_old(path), ignore_errors=True)
    return path


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, DType]]]:
    """(manifest, tensors) of the checkpoint at ``path``, every checksum verified: any damage, a missing or
    extra file, or a manifest that does not describe the files is a DataError naming the file."""
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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{mpath}: not a tr checkpoint manifest (format {FORMAT!r} expected)")
    if manifest.get("version") != VERSION:
        raise DataError(f"{mpath}: checkpoint format version {manifest.get('version')!r}, this tr reads {VERSION}")
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    if hashlib.sha256(_canonical(body)).hexdigest() != manifest.get("sha256"):
        raise DataError(f"{mpath}: the manifest's checksum does not match its content (the manifest is damaged)")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {STATE}:
        raise DataError(f"{mpath}: the manifest lists files {sorted(files or {})}, expected [{STATE!r}]")
    fpath = path / STATE
    try:
        raw = fpath.read_bytes()
    except OSError as e:
        raise DataError(f"{fpath}: cannot read ({e.strerror or e})") from None
    want = files[STATE]
    if len(raw) != want.get("bytes"):
        raise DataError(f"{fpath}: {len(raw)} bytes, the manifest says {want.get('bytes')} (truncated or replaced)")
    if hashlib.sha256(raw).hexdigest() != want.get("sha256"):
        raise DataError(f"{fpath}: SHA-256 {hashlib.sha256(raw).hexdigest()[:16]}... differs from the "
                        f"manifest's {str(want.get('sha256'))[:16]}... (the file is damaged)")
    return manifest, safetensors_io.from_bytes(fpath, raw)
