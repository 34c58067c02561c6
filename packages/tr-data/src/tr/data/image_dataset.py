"""JPEG datasets for the native pipeline (FULLY mode: the encoded files in memory or mapped, decoded by the
workers per sample): an ImageNet-style class folder, or a JPEG DTS pack."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.data.checks import MAX_WORKERS, flag, integer
from tr.data.dataset import Split, check_split
from tr.data.image_folder import ImageFolderIndex, scan_image_folder


def _folder_roots(root: Path) -> dict[str, Path]:
    subs = {s: root / s for s in ("train", "val") if (root / s).is_dir()}
    return subs or {"train": root}


class ImageFolder:
    """``root`` holding class folders of JPEG files, or train/ and val/ of them (as torchvision's
    ImageFolder: classes are the sorted folder names). Every file's JPEG structure is checked when a split is
    loaded (tr.data.scan_image_folder; ``on_bad="skip"`` skips and counts bad files); ``load`` reads the
    files into one buffer and the pipeline decodes them (libjpeg-turbo) in its worker threads."""

    channels = 3  # decoded as RGB (gray files too)

    def __init__(self, root: str | Path, on_bad: str = "error", load_workers: int = 8) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise DataError(f"{self.root}: no such image folder")
        self.on_bad = on_bad
        self.load_workers = integer("ImageFolder", "load_workers", load_workers, 1, MAX_WORKERS)
        self._roots = _folder_roots(self.root)
        self._index: dict[str, ImageFolderIndex] = {}
        train = self.index("train")
        self.name = self.root.name
        self.classes = train.classes
        self.num_classes = len(train.classes)

    @property
    def image_shape(self) -> None:
        return None  # images of any size

    def index(self, split: str) -> ImageFolderIndex:
        split = check_split(split)
        if split not in self._index:
            if split not in self._roots:
                raise DataError(f"{self.root}: no {split}/ folder")
            self._index[split] = scan_image_folder(self._roots[split], on_bad=self.on_bad)
        return self._index[split]

    def has_split(self, split: str) -> bool:
        return check_split(split) in self._roots

    def describe_sample(self, split: str, i: int) -> str:
        """Where sample ``i`` of a loaded split comes from (its file), for errors about it."""
        samples = self.index(split).samples
        return str(samples[i][0]) if 0 <= i < len(samples) else f"{self._roots[check_split(split)]}: sample {i}"

    def load(self, split: str) -> Split:
        idx = self.index(split)
        if split != "train" and idx.classes != self.classes:
            raise DataError(f"{self._roots[check_split(split)]}: its class folders differ from train's")
        with ThreadPoolExecutor(self.load_workers) as pool:
            blobs = list(pool.map(lambda item: item[0].read_bytes(), idx.samples))
        sizes = np.array([len(b) for b in blobs], np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        data = np.frombuffer(b"".join(blobs), np.uint8)
        labels = np.array([label for _, label in idx.samples], np.int32)
        return Split(data, labels, offsets=offsets, sizes=sizes)


class DtsImages:
    """A JPEG DTS pack (``root``/train.dts, val.dts) as a dataset: the files are mapped, not copied; every
    block's checksums are checked when a split is loaded (``verify=False`` skips the payload checksums).

    ``mode``: "fully" shuffles the training samples over the whole pack (random reads: the pack should fit
    the page cache); "partial" reads ``buffer_blocks`` blocks at a time (the seed's PARTIAL mode: the block
    order shuffled per epoch, the samples shuffled inside each buffer; tr.data.seeds), so a pack larger than
    memory is read a few 16 MiB blocks at a time."""

    channels = 3  # decoded as RGB (gray files too)

    def __init__(self, root: str | Path, verify: bool = True, mode: str = "fully", buffer_blocks: int = 4) -> None:
        from tr.data.dts.format import KIND_JPEG
        from tr.data.dts.reader import DtsFile

        self.root = Path(root)
        self.verify = flag("DtsImages", "verify", verify)
        if mode not in ("fully", "partial"):
            raise ConfigError(f"DtsImages mode must be 'fully' or 'partial', got {mode!r}")
        if isinstance(buffer_blocks, bool) or not isinstance(buffer_blocks, int) or buffer_blocks < 1:
            raise ConfigError(f"buffer_blocks must be an integer >= 1, got {buffer_blocks!r}")
        self.mode, self.buffer_blocks = mode, buffer_blocks
        self._block_sizes: dict[str, np.ndarray] = {}
        self._dts: dict[str, object] = {}  # split -> its open DtsFile
        path = self.root / "train.dts"
        if not path.is_file():
            raise DataError(f"{path}: no such DTS file (pack one with: tr-dts pack SRC {self.root})")
        with DtsFile(path) as f:
            if f.header.kind != KIND_JPEG:
                raise DataError(f"{path}: a RAW DTS; load it with tr.data.dts.DtsDataset")
            self.classes = tuple(f.header.classes)
            self.num_classes = f.header.num_classes
            self.name = str(f.header.dataset).lower()
        self._files: list[object] = []  # the open files: their maps back the Splits

    @property
    def image_shape(self) -> None:
        return None

    def has_split(self, split: str) -> bool:
        return (self.root / f"{check_split(split)}.dts").is_file()

    def load(self, split: str) -> Split:
        from tr.data.dts.reader import DtsFile

        f = DtsFile(self.root / f"{check_split(split)}.dts")
        f.check_split(check_split(split))
        if tuple(f.header.classes) != self.classes:
            raise DataError(f"{f.path}: its classes differ from train.dts's")
        if f.header.num_classes != self.num_classes:
            raise DataError(f"{f.path}: {f.header.num_classes} classes, train.dts has {self.num_classes}")
        offsets, sizes, labels = [], [], []
        for b in f.blocks(check=self.verify):
            start = f.header.header_bytes + b.index * f.header.block_bytes
            offsets.append(b.offsets.astype(np.int64) + start)
            sizes.append(b.sizes.astype(np.int64))
            labels.append(b.labels)
        f.check_count(sum(len(x) for x in labels))
        self._files.append(f)
        self._dts[check_split(split)] = f
        self._block_sizes[check_split(split)] = np.array([len(x) for x in labels], np.int64)
        data = np.frombuffer(f._map, np.uint8)
        return Split(data, np.concatenate(labels), offsets=np.concatenate(offsets), sizes=np.concatenate(sizes))

    def describe_sample(self, split: str, i: int) -> str:
        """Where sample ``i`` of a loaded split lies (its file, block and place in the block), for errors
        about it."""
        sizes = self._block_sizes.get(check_split(split))
        if sizes is None or not 0 <= i < int(sizes.sum()):
            return f"{self.root / f'{check_split(split)}.dts'}: sample {i}"
        b = int(np.searchsorted(np.cumsum(sizes), i, side="right"))
        return f"{self._dts[check_split(split)].path}: block {b}, sample {i - int(sizes[:b].sum())} of the block"

    def epoch_order(self, split: str, seed: int, epoch: int) -> np.ndarray | None:
        """The training order the Preprocessor uses: "partial" the block-buffer shuffle, "fully" its own."""
        from tr.data.seeds import block_shuffle_order, shuffle_order

        sizes = self._block_sizes.get(check_split(split))
        if sizes is None:
            raise DataError(f"{self.root}: the {split} split is not loaded")
        if self.mode == "fully":
            return shuffle_order(int(sizes.sum()), seed, epoch)
        return block_shuffle_order(sizes, self.buffer_blocks, seed, epoch)

    def readahead(self, split: str, seed: int, epoch: int, progress) -> object | None:
        """For a "partial" training epoch, a started tr.data.dts.readahead.Readahead that reads the next buffer's
        blocks while the workers decode this one and lets the last one go; None otherwise. ``progress()``:
        samples done so far, in epoch positions."""
        from tr.data.dts.readahead import Readahead
        from tr.data.seeds import block_buffers

        split = check_split(split)
        if self.mode != "partial" or split != "train" or split not in self._dts:
            return None
        f = self._dts[split]
        h = f.header
        sizes = self._block_sizes[split]
        spans, starts, pos = [], [], 0
        for group in block_buffers(len(sizes), self.buffer_blocks, seed, epoch):
            spans.append([(h.header_bytes + int(i) * h.block_bytes, h.block_bytes) for i in group])
            starts.append(pos)
            pos += int(sizes[group].sum())
        return Readahead(f._map, f.path, spans, starts, progress).start()


def open_imagenet(path: str | Path) -> ImageFolder | DtsImages:
    """What ``PREPROCESSOR_SETTING.dataset("imagenet", path)`` trains from: ``DtsImages(path)`` when ``path`` holds
    a DTS pack (train.dts, val.dts: what ``tr-dts pack`` writes), else ``ImageFolder(path)`` (class folders, or
    train/ and val/ of them), each with its defaults. A missing path, a file, an empty folder: a DataError naming
    it."""
    from tr.data.dts.format import MAGIC

    root = Path(path)
    if not root.exists():
        raise DataError(f"{root}: no such image folder or DTS pack")
    if not root.is_dir():
        with open(root, "rb") as f:
            is_dts = f.read(len(MAGIC)) == MAGIC
        if is_dts:
            raise DataError(f"{root}: a DTS file; give the folder that holds the pack's train.dts (and val.dts): "
                            f"{root.parent}")
        raise DataError(f"{root}: not a DTS pack nor an image folder (a file; expected a folder of class folders "
                        f"or of train.dts and val.dts)")
    entries = [p for p in root.iterdir() if not p.name.startswith(".")]
    if not entries:
        raise DataError(f"{root}: an empty folder (expected class folders, train/ and val/ of them, or a DTS pack)")
    if any(p.suffix == ".dts" and p.is_file() for p in entries):
        return DtsImages(root)
    return ImageFolder(root)
