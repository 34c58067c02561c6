"""FastRandomResizedCrop: RandomResizedCrop's boxes with the JPEG decoded at a reduced DCT scale. On pixel data it is
RandomResizedCrop byte for byte; on JPEGs it is RandomResizedCrop with jpeg_dct_scaling byte for byte (any worker
count), close to the full decode; it must come first; the device decode refuses it by name; progressive resizing
keeps it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    FastRandomResizedCrop,
    ImageFolder,
    Preprocessor,
    PreprocessorSettings,
    RandomHorizontalFlip,
    RandomResizedCrop,
    TransferStation,
    _native,
)
from tr.data.progressive import resized_transforms

ROOT = Path(__file__).resolve().parents[3]


def _epoch(settings: PreprocessorSettings, side: int, channels: int, dtype: str = "float32") -> np.ndarray:
    with Preprocessor(settings, TransferStation(6, (side, side, channels), dtype)) as pre, pre.epoch(1, True) as run:
        return np.concatenate([b.valid_data.astype(np.float32) for b in run.batches(0)])


def test_on_pixel_data_it_is_random_resized_crop():
    rng = np.random.default_rng(3)
    ds = ArrayDataset((rng.integers(0, 256, (20, 40, 36, 3), dtype=np.uint8), np.arange(20) % 4))

    def epoch(crop):
        s = (PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.IMAGENET)
             .train_transforms(crop(16), RandomHorizontalFlip()).seed(7))
        return _epoch(s, 16, 3)

    fast, plain = epoch(FastRandomResizedCrop), epoch(RandomResizedCrop)
    assert fast.tobytes() == plain.tobytes()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    pytest.importorskip("PIL")
    pytest.importorskip("skimage")
    if not _native.jpeg_available():
        pytest.skip("tr-data built without libjpeg-turbo")
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    root = tmp_path_factory.mktemp("fast_crop_jpegs")
    make_image_folder(root, classes=3, per_class=8, min_side=64, max_side=128, seed=4)
    return root


def test_on_jpegs_it_is_the_dct_scaled_decode_and_close_to_the_full_one(folder):
    def epoch(crop, scaled, workers):
        s = (PreprocessorSettings().dataset(ImageFolder(folder)).preprocess_workers(workers)
             .normalization(NormMode.IMAGENET).train_transforms(crop(16), RandomHorizontalFlip()).seed(5)
             .jpeg_dct_scaling(scaled))
        return _epoch(s, 16, 3)

    fast1, fast3 = epoch(FastRandomResizedCrop, False, 1), epoch(FastRandomResizedCrop, False, 3)
    scaled, full = epoch(RandomResizedCrop, True, 2), epoch(RandomResizedCrop, False, 2)
    assert fast1.tobytes() == fast3.tobytes() == scaled.tobytes()
    assert not np.array_equal(fast1, full)  # 64-128 px photographs to 16 px: reduced in the DCT
    # the same boxes, another low-pass: under 4 % of the normalised range on average (test_jpeg_pipeline's bound)
    assert np.abs(fast1 - full).mean() < 0.04 * (full.max() - full.min())


def test_it_must_come_first_and_the_device_decode_refuses_it():
    with pytest.raises(ConfigError, match="must be the chain's first transform .* position 2"):
        PreprocessorSettings().train_transforms(RandomHorizontalFlip(), FastRandomResizedCrop(16))
    with pytest.raises(ConfigError, match="val_transforms: FastRandomResizedCrop must be"):
        PreprocessorSettings().val_transforms(RandomHorizontalFlip(), FastRandomResizedCrop(16))
    from tr.data.jpeg_plan import _check_chain
    from tr.data.transforms import Compose

    with pytest.raises(ConfigError, match="FastRandomResizedCrop needs the CPU pipeline"):
        _check_chain(Compose([FastRandomResizedCrop(16)], NormMode.IMAGENET))


def test_progressive_resizing_keeps_it():
    fast = FastRandomResizedCrop(64, scale=(0.2, 1.0), ratio=(0.5, 2.0))
    (got, flip) = resized_transforms([fast, RandomHorizontalFlip()], 32)
    assert type(got) is FastRandomResizedCrop and got.size == (32, 32)
    assert got.scale == fast.scale and got.ratio == fast.ratio and isinstance(flip, RandomHorizontalFlip)
