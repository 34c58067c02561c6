"""CIFAR-10 / CIFAR-100, python (pickled) or binary version, fully in memory: uint8 (n, 32, 32, 3) NHWC.

``root`` may be the batches directory itself or a directory holding it (or the downloaded archive).
Python version: cifar-10-batches-py/{data_batch_1..5, test_batch}, cifar-100-python/{train, test}.
Binary version: cifar-10-batches-bin/{data_batch_1..5, test_batch}.bin (1 label byte + 3072 pixel
bytes per record), cifar-100-binary/{train, test}.bin (coarse byte, fine byte, 3072 pixel bytes).
Pixels are stored planar (1024 R, 1024 G, 1024 B); they are returned NHWC.

Neither format stores a record count, so each file must hold the count the dataset defines (CIFAR-10: 10000 a
batch; CIFAR-100: 50000 train, 10000 test): a file cut at a record boundary, or another data set's file
under the same name, is a DataError, not a smaller training set. Every per-record list of a python batch
(labels, filenames, coarse labels) must have one entry a record; labels are integers, never cast.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.log import get_logger
from tr.data.checks import MAX_WORKERS, flag, integer
from tr.data.dataset import Split, check_split
from tr.data.download import DownloadFailed, fetch, md5sum
from tr.data.extract import archive_sizes, extract_tar, read_manifest, size_problems, write_manifest

log = get_logger(__name__)

PIXELS = 32 * 32 * 3


class _SafeUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only (no arbitrary code from a data file)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR batch")


_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}


def _check_opcodes(raw: bytes, path: Path) -> None:
    """Refuse memo indices no valid pickle of this size can have before the C unpickler sees them: it
    grows its memo to the index, so one corrupt LONG_BINPUT costs gigabytes and seconds."""
    try:
        for op, arg, pos in pickletools.genops(raw):
            if op.name in _MEMO_OPS and int(arg) > len(raw):
                raise DataError(f"{path}: corrupt CIFAR python batch: memo index {arg} at byte {pos}")
    except DataError:
        raise
    except Exception as e:  # genops reports unknown opcodes and truncation as ValueError
        raise DataError(f"{path}: not a readable CIFAR python batch ({type(e).__name__}: {e})") from None


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    _check_opcodes(raw, path)
    try:
        d = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # a corrupt pickle can fail in any of the unpickler's and numpy's ways
        raise DataError(f"{path}: not a readable CIFAR python batch ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict):
        raise DataError(f"{path}: a CIFAR batch must hold a dict, got {type(d).__name__}")
    try:
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: a CIFAR batch key is not text ({e})") from None


def _planar_to_nhwc(data: Any, path: Path) -> np.ndarray:
    if not isinstance(data, np.ndarray):
        raise DataError(f"{path}: CIFAR data must be a uint8 numpy array, got {type(data).__name__}")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != PIXELS:
        raise DataError(f"{path}: CIFAR data must be uint8 (n, {PIXELS}), got {data.dtype} {data.shape}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


class _CIFAR:
    name = ""
    num_classes = 0
    image_shape = (32, 32, 3)
    py_dir = ""
    bin_dir = ""
    py_files: dict[str, tuple[str, ...]] = {}
    bin_files: dict[str, tuple[str, ...]] = {}
    label_key = ""
    label_bytes = 1  # bytes before the pixels in a binary record
    label_byte = 0  # which of them is the label
    records: dict[str, int] = {}  # file name -> the records it holds
    coarse_classes = 0  # CIFAR-100: the coarse labels' class count (checked, not returned)
    url = ""
    md5 = ""

    def __init__(self, root: str | Path, download: bool = False, url: str | None = None, load_workers: int = 1):
        self.root = Path(root)
        self.download = flag(type(self).__name__, "download", download)
        if url is not None and (not isinstance(url, str) or not url):
            raise ConfigError(f"{type(self).__name__}: url must be a URL string, got {url!r}")
        self.url = url or self.url
        self.load_workers = integer(type(self).__name__, "load_workers", load_workers, 1, MAX_WORKERS)

    # ---- locating files ----------------------------------------------------------------------
    def expected_files(self) -> list[str]:
        py = [f"{self.py_dir}/{n}" for s in ("train", "val") for n in self.py_files[s]]
        return py + [f"(or the binary version {self.bin_dir}/...bin)"]

    def _dir_with(self, names: tuple[str, ...], dirname: str) -> Path | None:
        for d in (self.root, self.root / dirname):
            if all((d / n).is_file() for n in names):
                return d
        return None

    def _locate(self, split: str) -> tuple[str, list[Path]]:
        d = self._dir_with(self.py_files[split], self.py_dir)
        if d is not None:
            return "py", [d / n for n in self.py_files[split]]
        d = self._dir_with(self.bin_files[split], self.bin_dir)
        if d is not None:
            return "bin", [d / n for n in self.bin_files[split]]
        return "", []

    def _missing(self, errors: list[str] | None = None) -> DataError:
        msg = f"{self.name.upper()} files missing in {self.root}: expected {', '.join(self.expected_files())}"
        if errors:
            msg += "; download failed: " + "; ".join(errors)
        elif not self.download:
            msg += "; pass download=True (PREPROCESSOR_SETTING.download(True)) to fetch them"
        return DataError(msg)

    def files(self, split: str) -> tuple[str, list[Path]]:
        """('py' | 'bin', paths) of a split, downloading and extracting the archive when allowed.

        Files that disagree in size with what their extraction recorded (an extraction interrupted by an
        older tr, a file truncated since) are extracted again from the archive."""
        split = check_split(split)
        kind, paths = self._locate(split)
        archive = self._archive()
        if kind:
            damage = self._damage(paths)
            if not damage:
                return kind, paths
            if not (self.download or archive.is_file()):
                fix = f"; pass download=True to fetch {archive.name} and extract it again"
                raise DataError("; ".join(damage) + fix)
            log.warning("%s: extracting %s again", "; ".join(damage), archive)
        elif not (self.download or archive.is_file()):  # an archive already here needs no network
            raise self._missing()
        self._extract(archive)
        kind, paths = self._locate(split)
        if not kind:
            raise self._missing([f"{archive} did not contain the expected files"])
        damage = self._damage(paths)
        if damage:
            raise DataError("; ".join(damage))
        return kind, paths

    def _archive(self) -> Path:
        return self.root / Path(self.url).name

    def _extract(self, archive: Path) -> None:
        try:
            if not archive.is_file():
                fetch([self.url], archive, md5=self.md5)
        except DownloadFailed as e:
            raise self._missing(e.errors) from None
        if self.md5 and (got := md5sum(archive)) != self.md5:
            raise DataError(f"{archive}: md5 {got}, expected {self.md5}; delete it to download it again")
        extract_tar(archive, self.root)

    def _damage(self, paths: list[Path]) -> list[str]:
        """Files of ``paths`` whose size differs from what their extraction recorded."""
        archive = self._archive()
        sizes = read_manifest(self.root, archive.name)
        if sizes is None:
            if not archive.is_file():
                return []  # files put here by hand: the readers check them as they read
            # extracted without a record (an older tr, perhaps interrupted): compare with the archive once
            sizes = archive_sizes(archive)
            damage = size_problems(self.root, paths, sizes)
            if not damage:
                write_manifest(self.root, archive.name, {k: {"size": v} for k, v in sizes.items()})
            return damage
        return size_problems(self.root, paths, sizes)

    def check(self) -> None:
        """Every file present (downloading the archive when allowed), else DataError."""
        for split in ("train", "val"):
            self.files(split)

    # ---- reading -----------------------------------------------------------------------------
    def _check_count(self, path: Path, n: int) -> None:
        want = self.records.get(path.name)
        if want is not None and n != want:
            raise DataError(f"{path}: {n} records, but a {self.name.upper()} {path.name!r} file holds {want} "
                            f"(a truncated or foreign file; an ArrayDataset takes a subset)")

    def _labels(self, path: Path, d: dict, key: str, n: int, classes: int) -> np.ndarray:
        """A per-record label list of a python batch: n integers in [0, classes)."""
        labels = np.asarray(d[key]) if isinstance(d[key], (list, tuple, np.ndarray)) else None
        if labels is None or labels.ndim != 1 or labels.dtype == np.bool_ or labels.dtype.kind not in "iu":
            what = type(d[key]).__name__ if labels is None else f"{labels.dtype} of shape {labels.shape}"
            raise DataError(f"{path}: {key!r} must be a flat list of integer class indices, got {what}")
        if len(labels) != n:
            raise DataError(f"{path}: {n} images but {len(labels)} {key!r}")
        bad = np.flatnonzero((labels < 0) | (labels >= classes))
        if bad.size:
            raise DataError(f"{path}: {key!r}[{int(bad[0])}] is {labels[bad[0]].item()}, outside [0, {classes})")
        return labels.astype(np.int64)

    def _read_py(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        d = _unpickle(path)
        if "data" not in d or self.label_key not in d:
            raise DataError(f"{path}: a CIFAR batch needs 'data' and '{self.label_key}', found {sorted(d)}")
        images = _planar_to_nhwc(d["data"], path)
        n = len(images)
        self._check_count(path, n)
        labels = self._labels(path, d, self.label_key, n, self.num_classes)
        if self.coarse_classes and "coarse_labels" in d:
            self._labels(path, d, "coarse_labels", n, self.coarse_classes)
        names = d.get("filenames")
        if names is not None and (not isinstance(names, (list, tuple)) or len(names) != n):
            got = len(names) if isinstance(names, (list, tuple)) else type(names).__name__
            raise DataError(f"{path}: {n} images but {got} 'filenames'")
        return images, labels

    def _read_bin(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        try:
            raw = np.fromfile(path, dtype=np.uint8)
        except OSError as e:
            raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
        rec = self.label_bytes + PIXELS
        if raw.size == 0 or raw.size % rec:
            raise DataError(
                f"{path}: truncated CIFAR binary file: {raw.size} bytes is not a whole number of "
                f"{rec}-byte records (expected {rec} x n, e.g. {rec * 10000})"
            )
        recs = raw.reshape(-1, rec)
        self._check_count(path, len(recs))
        if self.coarse_classes and (bad := np.flatnonzero(recs[:, 0] >= self.coarse_classes)).size:
            raise DataError(f"{path}: record {int(bad[0])} has coarse label {int(recs[bad[0], 0])}, outside "
                            f"[0, {self.coarse_classes}): not a {self.name.upper()} binary file")
        return _planar_to_nhwc(recs[:, self.label_bytes :], path), recs[:, self.label_byte].astype(np.int64)

    def load(self, split: str) -> Split:
        kind, paths = self.files(split)
        reader = self._read_py if kind == "py" else self._read_bin
        if self.load_workers > 1 and len(paths) > 1:
            with ThreadPoolExecutor(min(self.load_workers, len(paths))) as ex:
                parts = list(ex.map(reader, paths))
        else:
            parts = [reader(p) for p in paths]
        images = np.ascontiguousarray(np.concatenate([p[0] for p in parts]))
        labels = np.concatenate([p[1] for p in parts])
        if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
            bad = int(labels.max() if labels.max() >= self.num_classes else labels.min())
            raise DataError(f"{paths[0].parent}: label {bad} is out of range for {self.num_classes} classes")
        return Split(images, labels.astype(np.int32))


class CIFAR10(_CIFAR):
    name = "cifar10"
    num_classes = 10
    py_dir = "cifar-10-batches-py"
    bin_dir = "cifar-10-batches-bin"
    py_files = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "val": ("test_batch",)}
    bin_files = {"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "val": ("test_batch.bin",)}
    label_key = "labels"
    label_bytes, label_byte = 1, 0
    records = dict.fromkeys([*py_files["train"], *py_files["val"], *bin_files["train"], *bin_files["val"]], 10000)
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    md5 = "c58f30108f718f92721af3b95e74349a"


class CIFAR100(_CIFAR):
    """Fine labels (100 classes)."""

    name = "cifar100"
    num_classes = 100
    py_dir = "cifar-100-python"
    bin_dir = "cifar-100-binary"
    py_files = {"train": ("train",), "val": ("test",)}
    bin_files = {"train": ("train.bin",), "val": ("test.bin",)}
    label_key = "fine_labels"
    label_bytes, label_byte = 2, 1
    records = {"train": 50000, "train.bin": 50000, "test": 10000, "test.bin": 10000}
    coarse_classes = 20
    url = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    md5 = "eb9058c3a382ffc7106e4002c42a8d85"
