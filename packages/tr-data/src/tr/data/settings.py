"""PREPROCESSOR_SETTING: the fluent, validated configuration of the data pipeline; the section "data" of the
configuration tree (tr.core.config).

Every setter checks its value at once (ConfigError naming the value) and returns the settings, so calls
chain. ``commit()`` checks the whole (dataset known, transforms fit its images, train and val
samples of one shape) and freezes the object; later setters raise FrozenError. Tests use a fresh
``PreprocessorSettings()`` or ``reset_preprocessor_settings()``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tr.core.config import Section
from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.data.checks import MAX_WORKERS
from tr.data.dataset import DATASET_NAMES, ArrayDataset, Dataset, open_dataset
from tr.data.image_dataset import open_imagenet
from tr.data.seeds import check_seed
from tr.data.transforms import Compose, Transform, check_transforms, norm_constants
from tr.data.transforms_fast_crop import check_fast_crop_first


def _count(name: str, v: Any, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    if v < 1:
        raise ConfigError(f"{name} must be >= 1, got {v}")
    if hi is not None and v > hi:
        raise ConfigError(f"{name} must be <= {hi}, got {v}")
    return v


def _flag(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name} must be True or False, got {v!r}")
    return v


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass
class PreprocessorSettings(Section):
    NAME: ClassVar[str] = "data"
    FROZEN_WHAT: ClassVar[str] = "preprocessor settings are committed"
    FROZEN_HINT: ClassVar[str] = "Use .copy() for an editable copy"
    # Where the files are (their content is the data fingerprint's business: tr.task.data_fingerprint) and how
    # many threads load and transform them (the pipeline gives the same bytes at any count).
    NOT_RECORDED: ClassVar[frozenset[str]] = frozenset({"dataset_path", "dataset_object", "download_enabled",
                                                        "load_workers_count", "preprocess_workers_count",
                                                        "device_dec_cpu_threads"})

    dataset_name: str | None = None
    dataset_path: Path | None = None
    dataset_object: Any = None
    download_enabled: bool = False
    load_workers_count: int = 1
    preprocess_workers_count: int = field(default_factory=default_workers)
    norm: Any = NormMode.NO_NORM
    train: tuple[Transform, ...] = ()
    val: tuple[Transform, ...] = ()
    shuffle_train: bool = True
    drop_last_enabled: bool = False
    cpvs_enabled: bool = True
    cpvs_requested: bool = False  # cpvs(True) was called: a val chain it cannot cache is then refused
    sdmp: int = 1
    dct_scaling: bool = False
    pad_channels: int | None = None
    seed_value: int | None = None  # None: tr.core.settings.GLOBAL_SETTING.seed
    device_aug: bool = False
    device_dec: bool = False
    device_dec_backend: str = "auto"
    device_dec_cpu_share: float | str = "auto"
    device_dec_cpu_threads: int | None = None
    device_dec_interpolate_chroma: bool = False
    device_dec_refused: str = "cpu"

    # ---- the fluent builder -------------------------------------------------------------------
    def dataset(self, name: str | Dataset, path: str | os.PathLike | None = None) -> PreprocessorSettings:
        """``dataset("mnist" | "cifar10" | "cifar100", path)``, ``dataset("imagenet", path)`` (class folders or a
        JPEG DTS pack at ``path``: tr.data.image_dataset.open_imagenet) or ``dataset(dataset_object)``."""
        if isinstance(name, str) and name.lower() == "imagenet":
            if path is None or str(path) == "":
                raise ConfigError(f"dataset {name!r} needs the class folder or DTS pack folder, got {path!r}")
            return self.dataset(open_imagenet(path))  # the object a user would build by hand
        if isinstance(name, str):
            key = name.lower().replace("-", "").replace("_", "")
            if key not in DATASET_NAMES:
                raise ConfigError(f"unknown dataset {name!r}; expected one of {(*DATASET_NAMES, 'imagenet')} or a "
                                  f"Dataset object")
            if path is None or str(path) == "":
                raise ConfigError(f"dataset {name!r} needs the directory that holds its files, got {path!r}")
            self._set("dataset_object", None)
            self._set("dataset_path", Path(path))
            return self._set("dataset_name", key)
        if not (hasattr(name, "load") and hasattr(name, "image_shape")):
            raise ConfigError(f"dataset must be a name or an object with load() and image_shape, got {name!r}")
        if path is not None:  # the object knows its files: a path here would be silently ignored
            raise ConfigError(f"dataset({type(name).__name__}, {str(path)!r}): a Dataset object takes no path "
                              f"(give the path to the object itself)")
        self._set("dataset_object", name)
        self._set("dataset_path", None)
        return self._set("dataset_name", getattr(name, "name", type(name).__name__))

    def download(self, enabled: bool = True) -> PreprocessorSettings:
        return self._set("download_enabled", _flag("download", enabled))

    def load_workers(self, n: int) -> PreprocessorSettings:
        """IO threads that read dataset files."""
        return self._set("load_workers_count", _count("load_workers", n, MAX_WORKERS))

    def preprocess_workers(self, n: int) -> PreprocessorSettings:
        """Native threads that transform samples (in total, across all devices)."""
        return self._set("preprocess_workers_count", _count("preprocess_workers", n, MAX_WORKERS))

    def normalization(self, mode: NormMode | tuple) -> PreprocessorSettings:
        norm_constants(mode)  # validates
        return self._set("norm", mode)

    def train_transforms(self, *transforms: Transform) -> PreprocessorSettings:
        ts = check_transforms("train_transforms", _flatten(transforms))
        check_fast_crop_first("train_transforms", ts)
        return self._set("train", ts)

    def val_transforms(self, *transforms: Transform) -> PreprocessorSettings:
        ts = check_transforms("val_transforms", _flatten(transforms))
        check_fast_crop_first("val_transforms", ts)
        return self._set("val", ts)

    def shuffle(self, enabled: bool = True) -> PreprocessorSettings:
        """Shuffle the training set every epoch (validation is never shuffled)."""
        return self._set("shuffle_train", _flag("shuffle", enabled))

    shuffle_train_set = shuffle

    def drop_last(self, enabled: bool = True) -> PreprocessorSettings:
        """Drop the last incomplete training batch (validation always delivers every sample)."""
        return self._set("drop_last_enabled", _flag("drop_last", enabled))

    def cpvs(self, enabled: bool = True) -> PreprocessorSettings:
        """Cache the preprocessed validation set after its first pass and replay it later. By default on where
        the val transforms are deterministic (random ones would be frozen at their first draws: then not
        cached); cpvs(True) with random val transforms is refused at commit()."""
        self._set("cpvs_requested", _flag("cpvs", enabled))
        return self._set("cpvs_enabled", enabled)

    using_cpvs = cpvs

    def sdmp_factor(self, k: int) -> PreprocessorSettings:
        """SDMP (the seed's "single decode, multiple passes"): every k-th training epoch decodes each sample
        once and also computes its samples of the next k - 1 epochs (their own augmentation seeds), kept in
        memory ((k - 1) x the split's samples x the sample's bytes) and replayed then: the same bytes as
        k = 1, decoded k times less often. One process only (a rank's shard changes with the epoch)."""
        return self._set("sdmp", _count("sdmp_factor", k, 16))

    def jpeg_dct_scaling(self, on: bool = True) -> PreprocessorSettings:
        """Decode a JPEG sample at the smallest eighth of its size (libjpeg-turbo's DCT scaling) that keeps the
        box a first RandomResizedCrop or Resize reads at least as large as its output, then resample from that:
        less IDCT, upsampling and colour work when the box is well over the output (large photographs,
        Resize(256) of big images). Off (the default): the bytes of a full decode and the resample, as
        Pillow/torchvision compute them. On: a different, still antialiased, reduction, deterministic as ever."""
        if not isinstance(on, bool):
            raise ConfigError(f"jpeg_dct_scaling takes True or False, got {on!r}")
        return self._set("dct_scaling", on)

    def device_augment(self, on: bool = True) -> PreprocessorSettings:
        """Train from the device: tr-task copies the raw data set into the training device's arena once and
        runs the training chain there, inside the captured step (one gather per output pixel), with the draws
        this pipeline's workers would make for the same seed, epoch and sample (tr.graph.resident). For data
        sets held in memory as uint8 images (MNIST, CIFAR, ArrayDataset) and a chain of Pad + RandomCrop,
        RandomRotation, RandomScale, RandomErasing, RandomHorizontalFlip and the normalisation; val
        transforms none. The task refuses other chains, naming the transform. tr.data's own Preprocessor
        ignores this setting: its workers run the chain either way."""
        return self._set("device_aug", _flag("device_augment", on))

    def device_decode(self, on: bool = True, backend: str = "auto", cpu_share: float | str = "auto",
                      cpu_threads: int | None = None, interpolate_chroma: bool = False,
                      refused: str = "cpu") -> PreprocessorSettings:
        """Decode JPEG data sets (an image folder or a JPEG DTS pack) on the training device: the host reads only
        the files and their headers and draws each sample's parameters as this pipeline's workers would; the
        device decodes the regions the chain reads (nvJPEG: ``backend`` "auto" takes the GPU's hardware JPEG
        engine where it has one, "hardware" or "gpu" force one) and crops, resizes, flips, erases and
        normalises them in the transfer graph (tr.task.jpeg_feeder). For chains of RandomResizedCrop or
        Resize (+ CenterCrop), then ColorJitter, RandomHorizontalFlip and RandomErasing; the task refuses
        others, naming the transform. tr.data's own Preprocessor ignores this setting.

        The CPU decodes a share of each batch's regions alongside (libjpeg-turbo on ``cpu_threads`` threads,
        default all cores but two), as well as every file nvJPEG does not take: ``cpu_share`` is that share of
        the batch, a number in [0, 1], or "auto": measured when the task compiles (both decoders timed on the
        first batch), then re-balanced early in every training epoch and at its end from that epoch's timings
        (beside the training step) so that both take as long for a batch. A number gives the same batches run
        after run (which row goes to which decoder depends on it alone; "auto"'s rows move with timings, and
        nvJPEG's pixels may differ from libjpeg-turbo's by a grey level).

        ``interpolate_chroma``: how both decoders upsample the chroma of subsampled (4:2:0, 4:2:2) files. False
        (the default): each chroma sample replicated, nvJPEG's hardware engine at full speed (5x the
        interpolated rate on the H200, benchmarks/RESULTS.md) and libjpeg-turbo set to match it; the pixels then
        differ from the CPU pipeline's (libjpeg's interpolated "fancy" upsampling, Pillow's too) along colour
        edges. True: interpolated, as the CPU pipeline; with ``cpu_share=1.0`` and ``refused="cpu"`` the CPU
        pipeline's pixels to the bit (the exact path).

        ``refused``: who decodes the files a hardware JPEG engine does not take (progressive, arithmetic-coded).
        "cpu" (the default): libjpeg-turbo, with the CPU's share. "nvjpeg": nvJPEG's decoupled decoder, its
        Huffman decoding on ``cpu_threads`` host threads and the rest on the GPU, while the next batch is
        prepared (its pixels within 3 grey levels of libjpeg-turbo's, mean 0.03; a file it refuses too goes to
        libjpeg-turbo). Measured on the H200 (benchmarks/RESULTS.md): "nvjpeg" where the pipeline is the limit,
        1.2-1.5x the images/s from a folder or pack with progressive files; beside a training step that keeps
        the GPU busy (ResNet-50) its GPU phase waits for the step and "cpu" is faster (95 % of the step rate
        against 77-84 %). "auto": both, timed in the first training batches (8 each, the decoupled decoder
        first), the faster kept for the run (before the CPU share's own probe, with cpu_share="auto"; not yet
        measured on the H200)."""
        if backend not in ("auto", "hardware", "gpu"):
            raise ConfigError(f"device_decode backend must be 'auto', 'hardware' or 'gpu', got {backend!r}")
        if cpu_share != "auto" and (isinstance(cpu_share, bool) or not isinstance(cpu_share, (int, float))
                                    or not 0.0 <= float(cpu_share) <= 1.0):
            raise ConfigError(f"device_decode cpu_share must be a number in [0, 1] or 'auto', got {cpu_share!r}")
        if cpu_threads is not None:
            cpu_threads = _count("device_decode cpu_threads", cpu_threads, MAX_WORKERS)
        interpolate_chroma = _flag("device_decode interpolate_chroma", interpolate_chroma)
        if refused not in ("nvjpeg", "cpu", "auto"):
            raise ConfigError(f"device_decode refused must be 'nvjpeg', 'cpu' or 'auto', got {refused!r}")
        self._set("device_dec_backend", backend)
        self._set("device_dec_refused", refused)
        self._set("device_dec_cpu_share", cpu_share if cpu_share == "auto" else float(cpu_share))
        self._set("device_dec_cpu_threads", cpu_threads)
        self._set("device_dec_interpolate_chroma", interpolate_chroma)
        return self._set("device_dec", _flag("device_decode", on))

    def pad_channels_to(self, n: int | None) -> PreprocessorSettings:
        """Pad the normalised samples to n channels with zeros (the seed uses 4 in AMP mode)."""
        if n is not None:
            n = _count("pad_channels_to", n)
            if n > 64:
                raise ConfigError(f"pad_channels_to must be <= 64, got {n}")
        return self._set("pad_channels", n)

    def seed(self, s: int | None) -> PreprocessorSettings:
        """Augmentation and shuffle seed; None: GLOBAL_SETTING.seed at Preprocessor creation."""
        if s is not None:
            check_seed(s, integers=(int,))  # kept as given: a Python int only
        return self._set("seed_value", s)

    # ---- lifecycle ----------------------------------------------------------------------------

    def open_dataset(self) -> Dataset:
        if self.dataset_object is not None:
            return self.dataset_object
        if self.dataset_name is None:
            raise ConfigError("no dataset configured: call dataset(name, path) first")
        return open_dataset(self.dataset_name, self.dataset_path, self.download_enabled, self.load_workers_count)

    def chain(self, train: bool = True, dtype: str = "float32") -> Compose:
        return Compose(self.train if train else self.val, self.norm, dtype, self.pad_channels)

    def sample_shape(self, train: bool = True, image_shape: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
        """(h, w, c) of the normalised samples, for sizing a TransferStation before loading data."""
        ds = self.open_dataset() if image_shape is None else None
        shape = image_shape or ds.image_shape
        channels = getattr(ds, "channels", None)
        if shape is None and channels:  # images of any size, known channels (decoded JPEGs: RGB)
            a, b = (self.chain(train).out_shape((h, w, channels)) for h, w in ((97, 131), (211, 157)))
            if a == b:  # the chain ends in a fixed-size crop or resize
                return a
        if shape is None:
            raise ConfigError(
                f"dataset {self.dataset_name!r} has images of different sizes; its sample shape is only "
                "known when the transforms end in a fixed-size crop or resize and a sample is seen"
            )
        return self.chain(train).out_shape(shape)

    def commit(self) -> PreprocessorSettings:
        """Validate the whole configuration and freeze it."""
        if self._frozen:
            return self
        if self.dataset_name is None:
            raise ConfigError("no dataset configured: call dataset(name, path) first")
        if self.cpvs_requested and not self.chain(False).deterministic:
            random = [type(t).__name__ for t in self.val if not t.deterministic]
            raise ConfigError(f"cpvs(True) replays the first validation pass, but the val transforms {random} are "
                              f"random: their later draws would never be used. Use cpvs(False) or deterministic "
                              f"val transforms")
        ds = self.open_dataset()
        check = getattr(ds, "check", None)
        if callable(check):  # files present (or downloaded when allowed), else DataError now
            check()
        shape = ds.image_shape
        if shape is not None:
            tr_shape = self.chain(True).out_shape(shape)
            has_val = not isinstance(ds, ArrayDataset) or ds.has_split("val")
            if has_val:
                va_shape = self.chain(False).out_shape(shape)
                if tr_shape != va_shape:
                    raise ConfigError(
                        f"train transforms give {tr_shape} samples but val transforms give {va_shape}; "
                        "one TransferStation holds one sample shape"
                    )
        else:  # variable-size images: both chains must end in a fixed size
            self.chain(True)
            self.chain(False)
        object.__setattr__(self, "_frozen", True)
        return self


def _flatten(ts: Sequence[Any]) -> tuple:
    if len(ts) == 1 and isinstance(ts[0], (list, tuple)):
        return tuple(ts[0])
    return tuple(ts)


PREPROCESSOR_SETTING = PreprocessorSettings()


def reset_preprocessor_settings() -> PreprocessorSettings:
    """Restore the process-wide preprocessor settings to defaults (uncommitted), in place."""
    fresh = PreprocessorSettings()
    for k, v in fresh.__dict__.items():
        object.__setattr__(PREPROCESSOR_SETTING, k, v)
    return PREPROCESSOR_SETTING
