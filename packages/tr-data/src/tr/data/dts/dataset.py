"""A packed RAW DTS folder as a Dataset (FULLY mode: every sample in memory, as MNIST and CIFAR are)."""

from __future__ import annotations

from pathlib import Path

from tr.core.errors import DataError
from tr.data.dataset import Split, check_split
from tr.data.dts.format import KIND_RAW
from tr.data.dts.reader import DtsFile


class DtsDataset:
    """``root``/train.dts and ``root``/val.dts (what tr-dts pack wrote) of a RAW dataset (MNIST, CIFAR):
    ``load(split)`` reads and checks every block. JPEG packs are decoded by the image pipeline instead."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        path = self._path("train")
        if not path.is_file():
            raise DataError(f"{path}: no such DTS file (pack one with: tr-dts pack SRC {self.root})")
        with DtsFile(path) as f:
            h = f.header
        if h.kind != KIND_RAW:
            raise DataError(f"{path}: a JPEG DTS; DtsDataset loads RAW packs (MNIST, CIFAR)")
        self.name = str(h.meta.get("dataset", h.dataset)).lower()
        self.num_classes = h.num_classes
        self.classes = tuple(h.classes)
        self._shape = (h.height, h.width, h.channels)

    def _path(self, split: str) -> Path:
        return self.root / f"{check_split(split)}.dts"

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self._shape

    def has_split(self, split: str) -> bool:
        return self._path(split).is_file()

    def load(self, split: str) -> Split:
        path = self._path(split)
        with DtsFile(path) as f:
            f.check_split(check_split(split))
            if (f.header.height, f.header.width, f.header.channels) != self._shape:
                raise DataError(f"{path}: samples of {f.header.height}x{f.header.width}x{f.header.channels}, the "
                                f"train pack's are {self._shape}")
            if (f.header.num_classes, tuple(f.header.classes)) != (self.num_classes, self.classes):
                raise DataError(f"{path}: {f.header.num_classes} classes {f.header.classes[:5]}..., the train "
                                f"pack's are {self.num_classes} {list(self.classes[:5])}...")
            images, labels = f.arrays()
        return Split(images, labels)
