"""Packing datasets into DTS files: MNIST and CIFAR (RAW u8 samples) and ImageNet-style JPEG folders.

``pack(src, out)`` finds what ``src`` is (MNIST idx files, CIFAR batches, or a folder of class folders, with
or without train/ and val/), writes ``out``/train.dts and ``out``/val.dts (what the source has) and returns
their paths. JPEG levels (tr.data.dts.levels) 1-3 re-encode in a thread pool (Pillow releases the GIL while it
decodes, resamples and encodes); results do not depend on the number of workers. JPEG samples are packed in
an order shuffled with a fixed seed (as the seed's L1-3 packing), so that every block holds a mix of classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.data.dts.format import DEFAULT_BLOCK_BYTES, MAX_BLOCK_BYTES, PAGE, block_bytes_problem
from tr.data.dts.writer import DtsWriter, jpeg_header, raw_header

PACK_SEED = 42  # the order JPEG samples are packed in
Progress = Callable[[int, int, int], None]  # (samples done, of, bytes written)


@dataclass(frozen=True)
class Packed:
    path: Path
    samples: int
    bytes: int
    seconds: float
    recoded: int = 0  # progressive files re-coded as baseline (pack(baseline=True))


def detect(src: Path) -> str:
    """'mnist', 'cifar10', 'cifar100' or 'folder' for a source directory."""
    if not src.exists():
        raise DataError(f"{src}: no such file or directory")
    if not src.is_dir():
        raise DataError(f"{src}: a dataset source must be a directory (MNIST idx files, CIFAR batches or class "
                        f"folders)")
    names = {p.name for p in src.iterdir()} | {p.name for p in (src / "MNIST" / "raw").glob("*")}
    if any(n.startswith("train-images-idx3-ubyte") for n in names):
        return "mnist"
    if (src / "cifar-10-batches-py").is_dir() or "data_batch_1" in names:
        return "cifar10"
    if (src / "cifar-100-python").is_dir() or {"train", "test", "meta"} <= names and (src / "meta").is_file():
        return "cifar100"
    return "folder"


def _raw(name: str, src: Path, out: Path, block_bytes: int, progress: Progress | None) -> list[Packed]:
    from tr.data.dataset import open_dataset

    ds = open_dataset(name, src)
    done = []
    for split in ("train", "val"):
        t0 = time.perf_counter()
        s = ds.load(split)
        classes = [str(i) for i in range(ds.num_classes)]
        h = raw_header(name.upper(), split, tuple(s.images.shape[1:]), ds.num_classes,
                       {"classes": classes, "source": str(src), "dataset": name}, block_bytes)
        path = out / f"{split}.dts"
        with DtsWriter(path, h) as w:
            n = len(s.labels)
            for i in range(n):
                w.add(s.images[i], int(s.labels[i]))
                if progress is not None and (i % 4096 == 0 or i == n - 1):
                    progress(i + 1, n, (i + 1) * s.images[0].nbytes)
        done.append(Packed(path, n, path.stat().st_size, time.perf_counter() - t0))
    return done


def _folder_splits(src: Path) -> list[tuple[str, Path]]:
    """(split, class-folder root) pairs: src/train and src/val when src has them, else src as train."""
    subs = [(s, src / s) for s in ("train", "val") if (src / s).is_dir()]
    return subs or [("train", src)]


def _jpegs(index, level: int, workers: int, baseline: bool, recoded: list[int]) -> Iterator[tuple[bytes, int, str]]:
    """(JPEG bytes at ``level``, label, path) in packing order; with ``baseline`` progressive files re-coded
    (tr.data.dts.levels.to_baseline), their count appended to ``recoded``."""
    from tr.data.dts.levels import encode_level, to_baseline

    order = np.random.default_rng(PACK_SEED).permutation(len(index.samples))
    items = [index.samples[i] for i in order]

    def load(item: tuple[Path, int]) -> tuple[bytes, int, str]:
        path, label = item
        data = path.read_bytes()
        if level:
            data = encode_level(data, level, str(path))
        if baseline:
            new = to_baseline(data, str(path))
            if new is not data:
                recoded.append(1)
            data = new
        return data, label, str(path)

    if workers <= 1 or (level == 0 and not baseline):
        yield from map(load, items)
        return
    with ThreadPoolExecutor(workers) as pool:
        chunk = 4 * workers  # bounded read-ahead: results in order, memory bounded
        for k in range(0, len(items), chunk):
            yield from pool.map(load, items[k:k + chunk])


def _folder(src: Path, out: Path, level: int, workers: int, block_bytes: int, on_bad: str,
            progress: Progress | None, baseline: bool) -> list[Packed]:
    from tr.data.image_folder import scan_image_folder

    splits = _folder_splits(src)
    indexes = [(split, scan_image_folder(root, on_bad=on_bad)) for split, root in splits]
    classes = indexes[0][1].classes
    for split, idx in indexes[1:]:
        if idx.classes != classes:
            only = sorted(set(idx.classes) ^ set(classes))[:5]
            raise DataError(f"{src}: the {split} class folders differ from the train ones ({len(idx.classes)} vs "
                            f"{len(classes)}; in one only: {only})")
    done = []
    for split, idx in indexes:
        t0 = time.perf_counter()
        meta = {"classes": list(classes), "source": str(src), "dataset": "folder", "level": level,
                "baseline": baseline, "skipped": [[str(p), why] for p, why in idx.skipped]}
        h = jpeg_header(src.name.upper()[:8] or "FOLDER", split, level, len(classes), " RGB", meta, block_bytes)
        path = out / f"{split}.dts"
        n, nbytes, recoded = len(idx.samples), 0, []
        with DtsWriter(path, h) as w:
            for i, (data, label, where) in enumerate(_jpegs(idx, level, workers, baseline, recoded)):
                w.add(data, label, where)
                nbytes += len(data)
                if progress is not None and (i % 256 == 0 or i == n - 1):
                    progress(i + 1, n, nbytes)
        done.append(Packed(path, n, path.stat().st_size, time.perf_counter() - t0, len(recoded)))
    return done


def pack(src: str | Path, out: str | Path, level: int = 0, workers: int = 1, kind: str | None = None,
         block_bytes: int = DEFAULT_BLOCK_BYTES, on_bad: str = "error",
         progress: Progress | None = None, baseline: bool = False) -> list[Packed]:
    """Pack the dataset at ``src`` into ``out``/<split>.dts; ``kind`` None: detected (see detect()).
    ``baseline``: JPEG folders only; progressive (and arithmetic-coded) files are re-coded losslessly as
    baseline ones (the same pixels, decoded ~2.5x faster; tr.data.dts.levels.to_baseline)."""
    src, out = Path(src), Path(out)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
        raise ConfigError(f"DTS level must be 0, 1, 2 or 3, got {level!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    if not isinstance(baseline, bool):
        raise ConfigError(f"baseline must be True or False, got {baseline!r}")
    if (isinstance(block_bytes, bool) or not isinstance(block_bytes, int)
            or block_bytes_problem(block_bytes, MAX_BLOCK_BYTES)):
        raise ConfigError(f"DTS block size must be a multiple of {PAGE} in [{2 * PAGE}, {MAX_BLOCK_BYTES}] bytes, "
                          f"got {block_bytes!r}")  # now, not after the dataset is loaded
    if on_bad not in ("error", "skip"):
        raise ConfigError(f"on_bad must be 'error' or 'skip', got {on_bad!r}")
    kind = kind or detect(src)
    if kind not in ("mnist", "cifar10", "cifar100", "folder"):
        raise ConfigError(f"unknown dataset kind {kind!r}: mnist, cifar10, cifar100 or folder")
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: the output must be a directory (it receives train.dts and val.dts)")
    if kind == "folder":
        return _folder(src, out, level, workers, block_bytes, on_bad, progress, baseline)
    if baseline:
        raise ConfigError(f"baseline re-codes JPEG files; {kind} is packed RAW")
    if level:
        raise ConfigError(f"level {level} re-encodes JPEGs; {kind} is packed RAW (level 0)")
    return _raw(kind, src, out, block_bytes, progress)
