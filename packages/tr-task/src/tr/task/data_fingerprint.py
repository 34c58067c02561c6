"""Fingerprints of a task's training and validation data, recorded in a checkpoint and checked at resume.

A fingerprint is ``"<method>:<sha256 hex>"`` of a whole split (the data set, never a rank's shard, so every
rank of a data-parallel run computes the same), or None where the feeder's data cannot be fingerprinted:

- ``dts-crc``: a DTS pack (tr.data.dts; RAW ``DtsDataset`` or JPEG ``DtsImages``): the pack's shape fields
  and every block's header and payload CRC-32 (what the packer wrote; the reader verifies the bytes against
  them), so only the block headers and sample indexes are read, a few pages per 16 MiB block; they are checked
  as the reader checks them (a damaged block header is a DataError). The metadata (the source folder's
  path) is left out: packing the same samples elsewhere gives the same fingerprint.
- ``folder-files``: an image folder (tr.data.ImageFolder): every file's path below the split's folder, its
  label and its size in bytes. Not the contents: hashing them would read the whole folder again at every
  first save and resume; names, labels and sizes catch another folder and added, removed, renamed,
  relabelled or re-encoded files. Not the mtimes either: copying a data set to another disk or machine
  changes them without changing a byte, and a resume there must pass.
- ``arrays-sha256``: data held in memory (ArrayFeeder, MNIST, CIFAR, ArrayDataset, device_augment's resident
  sets): the SHA-256 of the arrays' bytes with their dtypes and shapes, images and labels (64 MiB chunks
  hashed in threads, their digests hashed in order: the same value for any thread count).
- ``feeder``: a user's feeder that defines ``data_fingerprint(train: bool) -> str | None`` (the value is
  recorded as it returns it).

A feeder none of these fit gets None, and :func:`fingerprints` logs a warning saying that its data cannot be
checked. Each value is computed once per feeder object and cached (a feeder's data is not expected to change
under it while it feeds a task).
"""

from __future__ import annotations

import hashlib
import struct
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.log import get_logger

log = get_logger(__name__)

_CHUNK = 64 << 20
_SPLITS = {True: "train", False: "val"}
_CACHE: weakref.WeakKeyDictionary[Any, dict[bool, str | None]] = weakref.WeakKeyDictionary()
_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()  # feeders whose missing fingerprint was reported


def _sha(parts: list[tuple[str, np.ndarray]]) -> str:
    """SHA-256 over named arrays: each one's name, dtype and shape, then the digests of its 64 MiB chunks."""
    top = hashlib.sha256()
    chunks: list[memoryview] = []
    heads: list[tuple[bytes, int]] = []
    for name, a in parts:
        a = np.ascontiguousarray(a)
        raw = memoryview(a.reshape(-1).view(np.uint8))
        heads.append((f"{name}|{a.dtype.str}|{a.shape}".encode(), len(chunks)))
        chunks.extend(raw[i:i + _CHUNK] for i in range(0, max(len(raw), 1), _CHUNK))
    if len(chunks) > 1:  # hashlib releases the GIL on large buffers: the chunks hash in parallel
        with ThreadPoolExecutor(min(8, len(chunks))) as pool:
            digests = list(pool.map(lambda c: hashlib.sha256(c).digest(), chunks))
    else:
        digests = [hashlib.sha256(c).digest() for c in chunks]
    ends = [h[1] for h in heads[1:]] + [len(chunks)]
    for (head, start), end in zip(heads, ends):
        top.update(struct.pack("<I", len(head)) + head)
        for d in digests[start:end]:
            top.update(d)
    return "arrays-sha256:" + top.hexdigest()


def _dts(path: Path) -> str:
    """The ``dts-crc`` fingerprint of the DTS file at ``path`` (its block headers only)."""
    from tr.data.dts.format import BLOCK
    from tr.data.dts.reader import DtsFile

    h = hashlib.sha256()
    with DtsFile(path) as f:
        hd = f.header
        h.update(repr((hd.kind, hd.level, hd.num_classes, hd.width, hd.height, hd.channels, hd.num_samples,
                       hd.total_blocks, hd.classes)).encode())
        for i in range(f.num_blocks):  # block() checks each header's magic, CRC and index (not the payload)
            _magic, _id, n, payload, payload_crc, head_crc = BLOCK.unpack_from(f.block(i, check=False).data)
            h.update(struct.pack("<IIII", n, payload, payload_crc, head_crc))
    return "dts-crc:" + h.hexdigest()


def _folder(index: Any, split: Any) -> str:
    """The ``folder-files`` fingerprint of an image folder's split (``index``: its ImageFolderIndex)."""
    sizes = split.sizes if split is not None and split.sizes is not None else None
    h = hashlib.sha256(repr(tuple(index.classes)).encode())
    for j, (path, label) in enumerate(index.samples):
        size = int(sizes[j]) if sizes is not None else Path(path).stat().st_size
        h.update(f"{Path(path).relative_to(index.root).as_posix()}\t{label}\t{size}\n".encode())
    return "folder-files:" + h.hexdigest()


def _of_dataset(dataset: Any, split: Any, train: bool) -> str | None:
    """The fingerprint of one split of a tr.data data set (``split``: the Split the feeder loaded, or None)."""
    from tr.data.dts.dataset import DtsDataset
    from tr.data.image_dataset import DtsImages, ImageFolder

    name = _SPLITS[train]
    if isinstance(dataset, (DtsDataset, DtsImages)):
        return _dts(Path(dataset.root) / f"{name}.dts")
    if isinstance(dataset, ImageFolder):
        return _folder(dataset.index(name), split)
    if split is None:
        return None
    parts = [("images", split.images), ("labels", split.labels)]
    parts += [(k, getattr(split, k)) for k in ("offsets", "shapes", "sizes") if getattr(split, k) is not None]
    return _sha(parts)


def _compute(feeder: Any, train: bool) -> str | None:
    from tr.task.feeder import ArrayFeeder
    from tr.task.jpeg_feeder import DeviceJpegFeeder
    from tr.task.pipeline import PipelineFeeder
    from tr.task.resident import ResidentFeeder

    own = getattr(feeder, "data_fingerprint", None)
    if callable(own):
        got = own(train)
        return None if got is None else f"feeder:{got}"
    if isinstance(feeder, ArrayFeeder):
        s = feeder._sets[train]
        return _sha([("images", s[0]), ("labels", s[1])])
    if isinstance(feeder, PipelineFeeder):
        return _of_dataset(feeder.pre.dataset, feeder.pre.split(train), train)
    if isinstance(feeder, DeviceJpegFeeder):
        return _of_dataset(feeder.pre_settings.dataset_object, feeder._splits[train], train)
    if isinstance(feeder, ResidentFeeder):
        ds = feeder.pre_settings.dataset_object
        from tr.data.dts.dataset import DtsDataset

        if isinstance(ds, DtsDataset):
            return _dts(Path(ds.root) / f"{_SPLITS[train]}.dts")
        return _sha([("images", feeder._images[train]), ("labels", feeder._labels[train])])
    return None


def fingerprint(feeder: Any, train: bool) -> str | None:
    """The fingerprint of ``feeder``'s training (``train``) or validation data, or None where it cannot be
    made; computed once per feeder."""
    try:
        cache = _CACHE.setdefault(feeder, {})
    except TypeError:  # an object that takes no weak reference: computed each time
        cache = {}
    if train not in cache:
        cache[train] = _compute(feeder, train)
    return cache[train]


def fingerprints(feeder: Any) -> dict[str, str | None]:
    """{"train": ..., "val": ...} of ``feeder`` (``val`` only when it has validation data); a warning (once per
    feeder) names the splits that cannot be fingerprinted."""
    out = {_SPLITS[t]: fingerprint(feeder, t) for t in (True, False) if t or feeder.num_samples(False) > 0}
    unknown = [k for k, v in out.items() if v is None]
    try:
        first = feeder not in _WARNED
        _WARNED.add(feeder)
    except TypeError:  # no weak reference: said every time
        first = True
    if unknown and first:
        log.warning("%s cannot fingerprint its %s data: a checkpoint records none, and a resume cannot check "
                    "that it trains on the same data (define data_fingerprint(train) on the feeder to record one)",
                    type(feeder).__name__, " and ".join(unknown))
    return out
