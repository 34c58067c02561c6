"""PREPROCESSOR_SETTING.dataset("imagenet", path): a class folder or a JPEG DTS pack at path, detected, giving the
Dataset a user would build by hand (ImageFolder(path) or DtsImages(path)); bad paths are DataErrors naming them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError
from tr.data import DtsImages, ImageFolder, PreprocessorSettings
from tr.data.dts.pack import pack


def _same_split(a, b, split: str) -> None:
    x, y = a.load(split), b.load(split)
    assert np.array_equal(x.labels, y.labels) and np.array_equal(x.sizes, y.sizes)
    assert all(bytes(x.images[o:o + n]) == bytes(y.images[p:p + n])
               for o, p, n in zip(x.offsets, y.offsets, x.sizes))


def test_a_class_folder_is_an_image_folder(jpeg_folder):
    s = PreprocessorSettings().dataset("imagenet", jpeg_folder)
    ds, by_hand = s.open_dataset(), ImageFolder(jpeg_folder)
    assert type(ds) is ImageFolder and ds.root == by_hand.root and ds.classes == by_hand.classes
    assert s.dataset_name == by_hand.name and s.dataset_path is None
    for split in ("train", "val"):
        _same_split(ds, by_hand, split)
    # one split of class folders, no train/ and val/: the folder is the training set
    only = PreprocessorSettings().dataset("ImageNet", jpeg_folder / "train").open_dataset()
    assert type(only) is ImageFolder and only.has_split("train") and not only.has_split("val")


def test_a_pack_is_dts_images(jpeg_folder, tmp_path):
    pack(jpeg_folder, tmp_path / "packed")
    s = PreprocessorSettings().dataset("imagenet", tmp_path / "packed")
    ds, by_hand = s.open_dataset(), DtsImages(tmp_path / "packed")
    assert type(ds) is DtsImages and ds.mode == "fully" and ds.classes == by_hand.classes == ImageFolder(
        jpeg_folder).classes
    assert s.dataset_name == by_hand.name
    for split in ("train", "val"):
        _same_split(ds, by_hand, split)


def test_bad_paths_are_errors_naming_them(tmp_path, mnist_dir):
    s = PreprocessorSettings()
    cases = {
        tmp_path / "missing": "no such image folder or DTS pack",
        tmp_path / "empty": "an empty folder",
        tmp_path / "notes.txt": "not a DTS pack nor an image folder",
        tmp_path / "flat": "has no class folders",
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"\xff\xd8")
    for path, why in cases.items():
        with pytest.raises(DataError, match=f"{re.escape(str(path))}.*{why}"):
            s.dataset("imagenet", path)
    pack(mnist_dir, tmp_path / "raw")  # a RAW pack: MNIST's, not JPEGs
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "raw" / "train.dts")) + ": a RAW DTS"):
        s.dataset("imagenet", tmp_path / "raw")
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "raw" / "train.dts")) + ": a DTS file; give"):
        s.dataset("imagenet", tmp_path / "raw" / "train.dts")
    with pytest.raises(ConfigError, match="'imagenet' needs the class folder or DTS pack folder"):
        s.dataset("imagenet")
    assert s.dataset_name is None  # nothing was set by a refused call
