"""In-memory samples (FULLY mode) and the dataset protocol the Preprocessor reads.

A ``Split`` is what one phase (train or val) iterates over: uint8 images and int32 labels, either one
(n, h, w, c) array or, for images of different sizes, one flat byte buffer with per-sample offsets
and shapes. Datasets (MNIST, CIFAR, ArrayDataset) load their splits into Splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.data.labels import check_labels

SPLITS = ("train", "val")


def _ints(name: str, v: Any, dtype: type) -> np.ndarray:
    """An index array as ``dtype``: integers only (2.5 is no byte offset; a cast would truncate it)."""
    a = np.asarray(v)
    if a.dtype == np.bool_ or (a.size and a.dtype.kind not in "iu"):
        raise DTypeError(f"{name} must be integers, got {a.dtype}")
    info = np.iinfo(dtype)
    if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):  # never wrapped into range
        raise ShapeError(f"{name} must fit {np.dtype(dtype).name}, got values from {int(a.min())} to {int(a.max())}")
    return np.ascontiguousarray(a, dtype=dtype)


@dataclass(frozen=True)
class Split:
    """``images``: uint8 (n, h, w, c), or flat uint8 bytes when ``offsets``/``shapes`` are given."""

    images: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray | None = None  # int64 (n,) byte offsets into images (ragged, encoded)
    shapes: np.ndarray | None = None  # int32 (n, 3) (ragged)
    sizes: np.ndarray | None = None  # int64 (n,) byte counts of encoded (JPEG) samples at offsets

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels)
        if labels.ndim != 1:
            raise ShapeError(f"labels must be one-dimensional, got shape {labels.shape}")
        labels = np.ascontiguousarray(check_labels(labels))  # never a truncated float or a wrapped int64
        object.__setattr__(self, "labels", labels)
        imgs = self.images
        if not isinstance(imgs, np.ndarray) or imgs.dtype != np.uint8:
            # never cast: float images in [0, 1] would become 0s and 1s, int ones wrap at 256
            raise DTypeError(f"images must be a uint8 numpy array (pixels 0..255; normalisation is the pipeline's "
                             f"normalization setting), got {getattr(imgs, 'dtype', type(imgs).__name__)}")
        if not imgs.flags.c_contiguous:
            object.__setattr__(self, "images", np.ascontiguousarray(imgs))
        if self.sizes is not None:  # encoded: JPEG files' bytes, decoded by the pipeline's workers
            offs = _ints("offsets", self.offsets, np.int64)
            siz = _ints("sizes", self.sizes, np.int64)
            object.__setattr__(self, "offsets", offs)
            object.__setattr__(self, "sizes", siz)
            n = len(offs)
            flat = imgs.reshape(-1)
            object.__setattr__(self, "images", flat)
            if siz.shape != (n,) or (n and ((offs < 0).any() or (siz < 1).any() or (offs + siz).max() > flat.size)):
                raise DataError(f"encoded samples must lie inside their buffer of {flat.size} bytes")
        elif self.offsets is None:
            if imgs.ndim == 3:  # (n, h, w): one channel
                object.__setattr__(self, "images", imgs[..., None])
            elif imgs.ndim != 4:
                raise ShapeError(f"images must be (n, h, w, c) uint8, got shape {imgs.shape}")
            n = self.images.shape[0]
            if min(self.images.shape[1:]) < 1:
                raise ShapeError(f"images must have a positive (h, w, c), got {self.images.shape}")
        else:
            offs = _ints("offsets", self.offsets, np.int64)
            shp = _ints("shapes", self.shapes, np.int32)
            object.__setattr__(self, "offsets", offs)
            object.__setattr__(self, "shapes", shp)
            n = len(offs)
            if shp.shape != (n, 3):
                raise ShapeError(f"shapes must be (n, 3) for {n} offsets, got {shp.shape}")
            if n and (shp.min() < 1 or (offs < 0).any()):
                raise ShapeError("ragged images need positive shapes and non-negative offsets")
            ends = offs + shp.prod(axis=1).astype(np.int64)
            if n and ends.max() > imgs.size:
                raise DataError(f"ragged images overrun their buffer ({int(ends.max())} > {imgs.size} bytes)")
        if len(labels) != n:
            raise DataError(f"{n} images but {len(labels)} labels")

    @classmethod
    def from_images(cls, images: Sequence[np.ndarray], labels: Sequence[int]) -> Split:
        """Images of different sizes: packs them into one buffer (each (h, w, c) or (h, w) uint8)."""
        arrs = []
        for i, a in enumerate(images):
            a = np.asarray(a)
            if a.ndim == 2:
                a = a[:, :, None]
            if a.dtype != np.uint8:
                raise DTypeError(f"image {i} must be uint8 (pixels 0..255), got {a.dtype}")
            if a.ndim != 3 or min(a.shape) < 1:
                raise ShapeError(f"image {i} must be a non-empty (h, w, c) or (h, w) array, got shape {a.shape}")
            arrs.append(np.ascontiguousarray(a))
        sizes = np.array([a.size for a in arrs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if arrs else np.zeros(0, np.int64)
        buf = np.concatenate([a.reshape(-1) for a in arrs]) if arrs else np.zeros(0, np.uint8)
        shapes = np.array([a.shape for a in arrs], dtype=np.int32).reshape(-1, 3)
        return cls(buf, np.asarray(labels), offsets, shapes)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def ragged(self) -> bool:
        return self.offsets is not None

    @property
    def encoded(self) -> bool:
        return self.sizes is not None

    @property
    def image_shape(self) -> tuple[int, int, int] | None:
        """(h, w, c) when all images share it, else None (encoded samples: None)."""
        if not self.ragged:
            return tuple(int(x) for x in self.images.shape[1:])  # type: ignore[return-value]
        if self.shapes is not None and len(self) and (self.shapes == self.shapes[0]).all():
            return tuple(int(x) for x in self.shapes[0])  # type: ignore[return-value]
        return None

    def encoded_bytes(self, i: int) -> bytes:
        o, n = int(self.offsets[i]), int(self.sizes[i])
        return self.images[o:o + n].tobytes()

    def image(self, i: int) -> np.ndarray:
        if self.encoded:
            from tr.data import _native

            return _native.decode_jpeg(self.encoded_bytes(i))
        if not self.ragged:
            return self.images[i]
        h, w, c = (int(x) for x in self.shapes[i])
        o = int(self.offsets[i])
        return self.images[o : o + h * w * c].reshape(h, w, c)


@runtime_checkable
class Dataset(Protocol):
    name: str
    num_classes: int | None

    @property
    def image_shape(self) -> tuple[int, int, int] | None: ...

    def load(self, split: str) -> Split: ...


def check_split(split: str) -> str:
    if split in ("test", "validation"):
        split = "val"
    if split not in SPLITS:
        raise ConfigError(f"split must be 'train' or 'val', got {split!r}")
    return split


class ArrayDataset:
    """A dataset from arrays already in memory: ``ArrayDataset(train=(images, labels), val=(...))``.

    Images are uint8 (n, h, w, c) arrays, or lists of (h, w, c) arrays of different sizes.
    """

    def __init__(self, train: Any, val: Any = None, name: str = "arrays", num_classes: int | None = None):
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 2):
            raise ConfigError(f"ArrayDataset num_classes must be an integer >= 2, got {num_classes!r}")
        self.name = name
        self.num_classes = num_classes
        self._splits = {"train": self._as_split(train, "train")}
        self._splits["val"] = self._as_split(val, "val") if val is not None else None
        if num_classes is not None:  # a label past the model's logits is refused here, not inside a step
            for which, sp in self._splits.items():
                if sp is not None:
                    check_labels(sp.labels, which, num_classes)

    @staticmethod
    def _as_split(v: Any, which: str) -> Split:
        if isinstance(v, Split):
            return v
        if not (isinstance(v, Sequence) and len(v) == 2):
            raise ConfigError(f"ArrayDataset {which} must be (images, labels), got {type(v).__name__}")
        images, labels = v
        if isinstance(images, np.ndarray):
            return Split(images, np.asarray(labels))
        return Split.from_images(list(images), labels)

    @property
    def image_shape(self) -> tuple[int, int, int] | None:
        return self._splits["train"].image_shape

    def load(self, split: str) -> Split:
        split = check_split(split)
        s = self._splits[split]
        if s is None:
            raise DataError(f"ArrayDataset {self.name!r} has no {split} split")
        return s

    def has_split(self, split: str) -> bool:
        return self._splits[check_split(split)] is not None


DATASET_NAMES = ("mnist", "cifar10", "cifar100")


def open_dataset(name: str, path: str | Path, download: bool = False, load_workers: int = 1) -> Dataset:
    """The dataset class for a name of PREPROCESSOR_SETTING.dataset(name, path)."""
    from tr.data.cifar import CIFAR10, CIFAR100
    from tr.data.mnist import MNIST

    key = str(name).lower().replace("-", "").replace("_", "")
    if key == "mnist":
        return MNIST(path, download=download, load_workers=load_workers)
    if key == "cifar10":
        return CIFAR10(path, download=download, load_workers=load_workers)
    if key == "cifar100":
        return CIFAR100(path, download=download, load_workers=load_workers)
    raise ConfigError(f"unknown dataset {name!r}; expected one of {DATASET_NAMES} or a Dataset object")
