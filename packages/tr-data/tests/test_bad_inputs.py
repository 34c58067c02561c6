"""Parameters tr.data used to accept but could not honour: each is refused when it is given (or, for what
depends on the images, when the chain meets them at commit / Preprocessor creation), with a tr error naming
the value and what was expected; the valid edge values next to each still work.

Files and packs that do not hold what they claim are in test_bad_files.py."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.core.norm import NormMode
from tr.data import (
    CIFAR10,
    CIFAR100,
    MNIST,
    ArrayDataset,
    CenterCrop,
    ColorJitter,
    Compose,
    DtsImages,
    FusedNormalization,
    ImageFolder,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    TransferStation,
    scan_image_folder,
)
from tr.data.dts import pack

NAN = float("nan")
U8 = np.zeros((4, 4, 3), np.uint8)


def _arrays(c: int = 3, n: int = 4) -> ArrayDataset:
    return ArrayDataset((np.zeros((n, 6, 6, c), np.uint8), np.arange(n) % 2))


def _ragged(c: int) -> ArrayDataset:
    imgs = [np.zeros((6 + i, 7, c), np.uint8) for i in range(4)]
    return ArrayDataset((imgs, np.arange(4) % 2))


def _preprocessor(settings: PreprocessorSettings, seed=None, shape=None) -> Preprocessor:
    s = settings.commit()
    return Preprocessor(s, TransferStation(2, shape or s.sample_shape(True)), seed=seed)


def _on_preprocessor(call):
    """``call(pre)`` on a small Preprocessor that is closed afterwards (its workers stopped)."""
    with _preprocessor(PreprocessorSettings().dataset(_arrays())) as pre:
        return call(pre)


# (label, what to call, error class, regex: the message names the value and what was expected)
BAD = [
    # --- fill values written as pixels: whole numbers (the native core rounded 1.5, torchvision truncates)
    ("Pad fill 1.5", lambda _: Pad(1, fill=1.5), ConfigError, r"Pad: fill values are whole pixel values .*got 1\.5"),
    ("RandomCrop fill 0.5", lambda _: RandomCrop(4, padding=1, fill=0.5), ConfigError,
     r"RandomCrop: fill values are whole pixel values .*got 0\.5"),
    ("RandomScale fill (1, 2.5, 3)", lambda _: RandomScale(0.5, fill=(1, 2.5, 3)), ConfigError,
     r"RandomScale: fill values are whole .*got 2\.5"),
    ("RandomRotation fill 256", lambda _: RandomRotation(5, fill=256), ConfigError,
     r"RandomRotation: fill values are pixel values in \[0, 255\], got 256"),
    # --- ranges that cannot be drawn from
    ("RandomResizedCrop scale past 1", lambda _: RandomResizedCrop(8, scale=(0.5, 2.0)), ConfigError,
     r"RandomResizedCrop: scale must be <= 1\.0, got \(0\.5, 2\.0\)"),
    ("RandomErasing scale (0, 0)", lambda _: RandomErasing(1.0, scale=(0, 0)), ConfigError,
     r"RandomErasing: scale must allow a positive area, got \(0, 0\)"),
    # --- normalisation: values the output dtype cannot hold, malformed per-channel values
    ("std so small float32 overflows", lambda _: Compose([], ((0.5,), (1e-39,))), ConfigError,
     r"std=\(1e-39,\) maps pixels to values up to 5e\+38, beyond float32's largest finite value"),
    ("std so small float16 overflows", lambda _: Compose([], ((0.5,), (1e-6,)), "float16"), ConfigError,
     r"std=\(1e-06,\) maps pixels to values up to 5e\+05, beyond float16's largest finite value 65504"),
    ("FusedNormalization float16 overflow", lambda _: FusedNormalization(((0.0,), (1e-5,)), "float16"),
     ConfigError, r"values up to 1e\+05, beyond float16"),
    ("setting: std overflowing float32", lambda _: PreprocessorSettings().normalization(((0.0,), (1e-40,))),
     ConfigError, r"std=\(1e-40,\) maps pixels .*beyond float32"),
    ("mean as a 2-D array", lambda _: Compose([], (np.zeros((1, 3)), np.ones(3))), ConfigError,
     r"normalization mean must be a number or one number per channel, got an array of shape \(1, 3\)"),
    ("mean as a string", lambda _: Compose([], ("0.5", (0.2,))), ConfigError,
     r"normalization mean must be a number or one number per channel, got '0\.5'"),
    ("std NaN in an array", lambda _: Compose([], (np.zeros(3), np.array([1.0, NAN, 1.0]))), ConfigError,
     r"normalization: std must be a finite number, got nan"),
    ("erase value past float16", lambda _: Compose([RandomErasing(value=1e5)], NormMode.MNIST, "float16"),
     ConfigError, r"RandomErasing: erase value 100000 is beyond float16's largest finite value 65504"),
    ("fused erase value NaN",
     lambda _: FusedNormalization()(U8, erase=np.array([[0, 0, 1, 1]]), erase_value=NAN), ConfigError,
     r"erase value must be a finite number, got nan"),
    ("fused erase value text",
     lambda _: FusedNormalization()(U8, erase=np.array([[0, 0, 1, 1]]), erase_value="a"), ConfigError,
     r"erase value must be a finite number, got 'a'"),
    ("fused flip 2", lambda _: FusedNormalization()(np.zeros((2, 4, 4, 3), np.uint8), flip=np.array([2, 0])),
     ShapeError, r"flip needs one True/False \(or 0/1\) flag per image \(2\), got int64 \(2,\): array\(\[2, 0\]\)"),
    # --- channels: padding to fewer channels than the images have; colour transforms on 2 or 4 channels
    ("pad_channels_to below the channels", lambda _: Compose([], NormMode.CIFAR, pad_channels_to=2).out_shape(
        (4, 4, 3)), ConfigError, r"pad_channels_to=2 is fewer than the 3 channels of the images"),
    ("fused pad_channels_to below the channels", lambda _: FusedNormalization(pad_channels_to=2)(U8), ShapeError,
     r"pad_channels_to=2 is fewer than the images' 3 channels"),
    ("RandomGrayscale on 4 channels", lambda _: Compose([RandomGrayscale()]).out_shape((4, 4, 4)), ConfigError,
     r"RandomGrayscale needs 1 \(grey\) or 3 \(RGB\) channels, got images of shape \(4, 4, 4\)"),
    ("RandomGrayscale on a 2-channel image", lambda _: Compose([RandomGrayscale(1.0)]).apply_uint8(
        np.zeros((4, 4, 2), np.uint8)), DataError, r"RandomGrayscale needs .* got an image of shape \(4, 4, 2\)"),
    ("ColorJitter commit on 4 channels", lambda _: PreprocessorSettings().dataset(_arrays(4)).train_transforms(
        ColorJitter(0.3)).commit(), ConfigError, r"ColorJitter needs 1 \(grey\) or 3 \(RGB\) channels, got images "
                                                 r"of shape \(6, 6, 4\)"),
    ("RandomGrayscale on ragged 4-channel images", lambda _: _preprocessor(PreprocessorSettings().dataset(
        _ragged(4)).train_transforms(RandomGrayscale(), CenterCrop(4)).val_transforms(CenterCrop(4)), shape=(4, 4, 4)),
     ConfigError, r"RandomGrayscale needs .* got the train split's images of shape \(6, 7, 4\)"),
    # --- settings and objects
    ("a path beside a Dataset object", lambda _: PreprocessorSettings().dataset(_arrays(), "/data/mnist"),
     ConfigError, r"dataset\(ArrayDataset, '/data/mnist'\): a Dataset object takes no path"),
    ("Preprocessor seed 1.5", lambda _: _preprocessor(PreprocessorSettings().dataset(_arrays()), seed=1.5),
     ConfigError, r"seed must be an integer in \[0, 2\*\*64\), got 1\.5"),
    ("Preprocessor seed -1", lambda _: _preprocessor(PreprocessorSettings().dataset(_arrays()), seed=-1),
     ConfigError, r"seed must be an integer in \[0, 2\*\*64\), got -1"),
    ("TransferStation side 2.7", lambda _: TransferStation(2, (2.7, 4, 3)), ShapeError,
     r"sample_shape must be three integers \(height, width, channels\), got \(2\.7, 4, 3\)"),
    ("TransferStation bool side", lambda _: TransferStation(2, (True, 4, 3)), ShapeError,
     r"sample_shape must be three integers .*got \(True, 4, 3\)"),
    ("epoch train='val'", lambda _: _on_preprocessor(lambda pre: pre.epoch(0, train="val")), ConfigError,
     r"train must be True \(training\) or False \(validation\), got 'val'"),
    ("plan train=1", lambda _: _on_preprocessor(lambda pre: pre.plan(1)), ConfigError,
     r"train must be True \(training\) or False \(validation\), got 1"),
    ("batches of station -1", lambda _: _on_preprocessor(lambda pre: next(pre.epoch(0).batches(-1))), ConfigError,
     r"rank must be an integer in \[0, 1\) \(one per station\), got -1"),
    ("acquire timeout -5", lambda _: TransferStation(2, (2, 2, 1)).acquire(0, timeout=-5), ConfigError,
     r"timeout must be None \(wait\) or a finite number of seconds >= 0, got -5"),
    ("acquire timeout NaN", lambda _: TransferStation(2, (2, 2, 1)).acquire(0, timeout=NAN), ConfigError,
     r"timeout must be None .*got nan"),
    ("acquire batch 1.5", lambda _: TransferStation(2, (2, 2, 1)).acquire(1.5, timeout=0), ConfigError,
     r"a batch index is an integer >= 0, got 1\.5"),
    ("Compose seed -1", lambda _: Compose([])(U8, seed=-1), ConfigError,
     r"seed must be an integer in \[0, 2\*\*64\), got -1"),
    ("Compose index 1.5", lambda _: Compose([]).apply_uint8(U8, index=1.5), ConfigError,
     r"index must be an integer >= 0, got 1\.5"),
    ("Compose epoch -1", lambda _: Compose([RandomCrop(2)]).params((4, 4, 3), epoch=-1), ConfigError,
     r"epoch must be an integer >= 0, got -1"),
    ("Compose train 'val'", lambda _: Compose([])(U8, train="val"), ConfigError,
     r"train must be True \(training\) or False \(validation\), got 'val'"),
    # --- datasets' parameters: no silent clamp (0 -> 1), truncation (2.5 -> 2) or truthiness ("yes")
    ("MNIST load_workers 0", lambda p: MNIST(p, load_workers=0), ConfigError,
     r"MNIST: load_workers must be >= 1, got 0"),
    ("MNIST load_workers 2.5", lambda p: MNIST(p, load_workers=2.5), ConfigError,
     r"MNIST: load_workers must be an integer, got 2\.5"),
    ("MNIST download 'yes'", lambda p: MNIST(p, download="yes"), ConfigError,
     r"MNIST: download must be True or False, got 'yes'"),
    ("MNIST mirrors empty", lambda p: MNIST(p, mirrors=()), ConfigError, r"MNIST: mirrors must be URLs, got \(\)"),
    ("CIFAR10 load_workers -1", lambda p: CIFAR10(p, load_workers=-1), ConfigError,
     r"CIFAR10: load_workers must be >= 1, got -1"),
    ("CIFAR100 download 1", lambda p: CIFAR100(p, download=1), ConfigError,
     r"CIFAR100: download must be True or False, got 1"),
    ("ImageFolder load_workers 0", lambda p: ImageFolder(p, load_workers=0), ConfigError,
     r"ImageFolder: load_workers must be >= 1, got 0"),
    ("DtsImages verify 'no'", lambda p: DtsImages(p, verify="no"), ConfigError,
     r"DtsImages: verify must be True or False, got 'no'"),
    ("scan_image_folder check 'no'", lambda p: scan_image_folder(p, check="no"), ConfigError,
     r"scan_image_folder: check must be True or False, got 'no'"),
    ("ArrayDataset num_classes 2.5", lambda _: ArrayDataset((U8[None], [0]), num_classes=2.5), ConfigError,
     r"ArrayDataset num_classes must be an integer >= 2, got 2\.5"),
    ("ArrayDataset num_classes 1", lambda _: ArrayDataset((U8[None], [0]), num_classes=1), ConfigError,
     r"ArrayDataset num_classes must be an integer >= 2, got 1"),
    ("ArrayDataset float images", lambda _: ArrayDataset((np.zeros((2, 4, 4, 3), np.float32), [0, 1])),
     DTypeError, r"images must be a uint8 numpy array \(pixels 0\.\.255.*got float32"),
    ("ArrayDataset int64 images in a list", lambda _: ArrayDataset(([np.zeros((4, 4, 3), np.int64)], [0])),
     DTypeError, r"image 0 must be uint8 \(pixels 0\.\.255\), got int64"),
    ("pack block_bytes 1000", lambda p: pack(p, p / "out", block_bytes=1000), ConfigError,
     r"DTS block size must be a multiple of 4096 in \[8192, 1073741824\] bytes, got 1000"),
    ("pack on_bad 'ignore'", lambda p: pack(p, p / "out", on_bad="ignore"), ConfigError,
     r"on_bad must be 'error' or 'skip', got 'ignore'"),
]


@pytest.mark.parametrize("label, call, error, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_input_is_refused_naming_its_value(tmp_path, label, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path)


def test_the_valid_edge_values_still_work(tmp_path, rng):
    img = rng.integers(0, 256, (9, 9, 3), dtype=np.uint8)
    # whole fills at both ends of the range, as ints or floats; a rotation's fraction is honoured by its taps
    for t in (Pad(1, fill=0), Pad(1, fill=255), Pad(1, fill=(0, 128.0, 255)), RandomCrop(9, padding=1, fill=255.0),
              RandomScale(0.5, fill=(7, 8, 9)), RandomRotation(30, fill=37.6)):
        assert Compose([t]).apply_uint8(img, index=1).dtype == np.uint8
    out = Compose([Pad(2, fill=(0, 128, 255))]).apply_uint8(img)
    assert out[0, 0].tolist() == [0, 128, 255]
    # the whole image as the crop's area, the smallest area, any p
    for t in (RandomResizedCrop(5, scale=(1.0, 1.0)), RandomResizedCrop(5, scale=(0.0, 1e-3)),
              RandomErasing(0.0, scale=(1.0, 1.0)), RandomErasing(1.0, scale=(0.0, 1e-6))):
        assert Compose([t]).apply_uint8(img, index=2).shape[2] == 3
    # a std whose extreme just fits float16 (65000 <= 65504): finite samples at both ends of the pixel range
    x = Compose([], ((0.0,), (1 / 65000,)), "float16")(np.array([[[0], [255]]], np.uint8))
    assert x.dtype == np.float16 and np.isfinite(x).all() and float(x.max()) == pytest.approx(65000, rel=1e-3)
    assert float(x.min()) == 0.0
    # per-channel constants as numpy arrays; float16 erasing at its largest value
    c = Compose([RandomErasing(1.0, value=65504.0)], (np.array([0.5, 0.5, 0.5]), np.array([0.25, 0.25, 0.25])),
                "float16")
    assert np.isfinite(c(img, index=3)).all() and float(c(img, index=3).max()) == 65504.0
    # padding to exactly the channel count, colour transforms on grey and RGB
    assert Compose([], NormMode.CIFAR, pad_channels_to=3).out_shape((4, 4, 3)) == (4, 4, 3)
    assert FusedNormalization(pad_channels_to=3)(U8).shape == (4, 4, 3)
    for shape in ((5, 5, 1), (5, 5, 3)):
        assert Compose([RandomGrayscale(1.0), ColorJitter(0.3)]).out_shape(shape) == shape
    assert FusedNormalization()(np.zeros((2, 2, 2, 1), np.uint8), flip=[True, 0]).shape == (2, 2, 2, 1)
    # the datasets' and the station's parameters at their edges, numpy integers included
    assert MNIST(tmp_path, load_workers=1, download=False).load_workers == 1
    assert CIFAR10(tmp_path, load_workers=np.int64(4)).load_workers == 4
    assert TransferStation(2, (np.int64(3), 4, 3)).sample_shape == (3, 4, 3)
    assert ArrayDataset((U8[None], [1]), num_classes=2).num_classes == 2
    s = PreprocessorSettings().dataset(_arrays()).commit()
    for seed in (0, 2**64 - 1):
        assert Preprocessor(s, TransferStation(2, s.sample_shape()), seed=seed).seed == seed


def test_a_float16_std_overflow_is_found_where_the_dtype_is_known():
    # normalization() cannot know the station's dtype: the Preprocessor refuses it when it builds the chain
    s = PreprocessorSettings().dataset(_arrays()).normalization(((0.0,), (1e-6,))).commit()
    assert s.sample_shape() == (6, 6, 3)  # float32 holds it
    with pytest.raises(ConfigError, match=r"values up to 1e\+06, beyond float16"):
        Preprocessor(s, TransferStation(2, s.sample_shape(), "float16"))
