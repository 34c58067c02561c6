"""MNIST from its idx files (gzipped or not), fully in memory: uint8 (n, 28, 28, 1) + int32 labels."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.data.checks import MAX_WORKERS, flag, integer
from tr.data.dataset import Split, check_split
from tr.data.download import DownloadFailed, fetch
from tr.data.idx import read_idx

MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MNIST_COUNTS = {"train": 60000, "val": 10000}


class MNIST:
    """``root`` holds the four idx files, plain or ``.gz`` (also looked for in root/MNIST/raw)."""

    name = "mnist"
    num_classes = 10
    image_shape = (28, 28, 1)

    def __init__(
        self, root: str | Path, download: bool = False, mirrors: tuple[str, ...] = MNIST_MIRRORS, load_workers: int = 1
    ):
        self.root = Path(root)
        self.download = flag("MNIST", "download", download)
        self.mirrors = (mirrors,) if isinstance(mirrors, str) else tuple(mirrors)
        if not self.mirrors or not all(isinstance(m, str) and m for m in self.mirrors):
            raise ConfigError(f"MNIST: mirrors must be URLs, got {mirrors!r}")
        self.load_workers = integer("MNIST", "load_workers", load_workers, 1, MAX_WORKERS)

    def expected_files(self) -> list[str]:
        return [f"{n}[.gz]" for split in ("train", "val") for n in MNIST_FILES[split]]

    def _find(self, stem: str) -> Path | None:
        for d in (self.root, self.root / "MNIST" / "raw"):
            for name in (stem, stem + ".gz"):
                p = d / name
                if p.is_file():
                    return p
        return None

    def _missing_error(self, missing: list[str], errors: list[str] | None = None) -> DataError:
        msg = f"MNIST files missing in {self.root}: {', '.join(missing)} (expected {', '.join(self.expected_files())})"
        if errors:
            msg += "; download failed: " + "; ".join(errors)
        elif not self.download:
            msg += "; pass download=True (PREPROCESSOR_SETTING.download(True)) to fetch them"
        return DataError(msg)

    def paths(self, split: str) -> tuple[Path, Path]:
        """(images, labels) paths of a split, downloading missing files when allowed."""
        split = check_split(split)
        stems = MNIST_FILES[split]
        found = [self._find(s) for s in stems]
        missing = [s for s, p in zip(stems, found) if p is None]
        if missing and self.download:
            errors: list[str] = []
            for s in missing:
                try:
                    fetch([m + s + ".gz" for m in self.mirrors], self.root / (s + ".gz"))
                except DownloadFailed as e:
                    errors += e.errors
            if errors:
                raise self._missing_error(missing, errors)
            found = [self._find(s) for s in stems]
            missing = [s for s, p in zip(stems, found) if p is None]
        if missing:
            raise self._missing_error(missing)
        return found[0], found[1]  # type: ignore[return-value]

    def check(self) -> None:
        """Every file present (downloading missing ones when allowed), else DataError."""
        for split in MNIST_FILES:
            self.paths(split)

    def load(self, split: str) -> Split:
        split = check_split(split)
        ipath, lpath = self.paths(split)
        if self.load_workers > 1:
            with ThreadPoolExecutor(2) as ex:
                fi, fl = ex.submit(read_idx, ipath, 3), ex.submit(read_idx, lpath, 1)
                images, labels = fi.result(), fl.result()
        else:
            images, labels = read_idx(ipath, 3), read_idx(lpath, 1)
        if images.dtype != np.uint8 or labels.dtype != np.uint8:
            raise DataError(
                f"{ipath}, {lpath}: MNIST idx files must hold uint8 data, got {images.dtype}, {labels.dtype}"
            )
        if images.shape[1:] != self.image_shape[:2]:  # what the chain, the station and the model are sized for
            raise DataError(f"{ipath}: the header gives {images.shape[1]}x{images.shape[2]} images; MNIST's are "
                            f"{self.image_shape[0]}x{self.image_shape[1]}")
        if len(images) != len(labels):
            raise DataError(f"{ipath} holds {len(images)} images but {lpath} holds {len(labels)} labels")
        if len(images) == 0:
            raise DataError(f"{ipath}: the header gives 0 images: an empty {split} split")
        if labels.size and labels.max() >= self.num_classes:
            raise DataError(f"{lpath}: label {int(labels.max())} is out of range for {self.num_classes} classes")
        return Split(np.ascontiguousarray(images[..., None]), labels.astype(np.int32))
