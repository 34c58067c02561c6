"""PREPROCESSOR_SETTING: every setter validates at once, commit() checks the whole and freezes."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, FrozenError
from tr.core.norm import NormMode
from tr.data import (
    PREPROCESSOR_SETTING,
    ArrayDataset,
    CenterCrop,
    Pad,
    PreprocessorSettings,
    RandomCrop,
    RandomResizedCrop,
    Resize,
    reset_preprocessor_settings,
)


def test_fluent_chain_and_defaults(mnist_dir):
    s = (
        PreprocessorSettings()
        .dataset("mnist", mnist_dir)
        .load_workers(2)
        .preprocess_workers(3)
        .normalization(NormMode.MNIST)
        .train_transforms(Pad(2), RandomCrop(28))
        .val_transforms()
        .shuffle(False)
        .drop_last(True)
        .cpvs(False)
        .seed(5)
    )
    assert (s.dataset_name, s.load_workers_count, s.preprocess_workers_count) == ("mnist", 2, 3)
    assert s.train == (Pad(2), RandomCrop(28)) and s.val == ()
    assert (s.shuffle_train, s.drop_last_enabled, s.cpvs_enabled, s.seed_value) == (False, True, False, 5)
    assert s.commit() is s and s.frozen
    assert s.sample_shape() == (28, 28, 1)
    d = PreprocessorSettings()
    assert d.shuffle_train and not d.drop_last_enabled and d.cpvs_enabled and d.preprocess_workers_count >= 1


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda s: s.preprocess_workers(0), r"preprocess_workers must be >= 1, got 0"),
        (lambda s: s.load_workers(-2), r"load_workers must be >= 1, got -2"),
        (lambda s: s.preprocess_workers(2.0), r"must be an integer, got 2.0"),
        (lambda s: s.dataset("imagenet9", "/x"), r"unknown dataset 'imagenet9'"),
        (lambda s: s.dataset("mnist"), r"needs the directory"),
        (lambda s: s.normalization("imagenet"), r"NormMode or a \(mean, std\) pair"),
        (lambda s: s.shuffle(1), r"shuffle must be True or False, got 1"),
        (lambda s: s.pad_channels_to(0), r"pad_channels_to must be >= 1, got 0"),
        (lambda s: s.seed(-1), r"seed must be an integer in \[0, 2\*\*64\), got -1"),
        (lambda s: s.train_transforms("Pad(2)"), r"'Pad\(2\)' is not a tr.data transform"),
        (lambda s: s.dataset(object()), r"dataset must be a name or an object"),
    ],
)
def test_setters_validate_at_once(call, match):
    with pytest.raises(ConfigError, match=match):
        call(PreprocessorSettings())


def test_commit_checks_the_whole(tmp_path, rng):
    with pytest.raises(ConfigError, match="no dataset configured"):
        PreprocessorSettings().commit()
    with pytest.raises(DataError, match=r"MNIST files missing in .*train-images-idx3-ubyte"):
        PreprocessorSettings().dataset("mnist", tmp_path).commit()
    ds = ArrayDataset(
        (rng.integers(0, 256, (4, 28, 28, 1), dtype=np.uint8), [0] * 4), (np.zeros((2, 28, 28, 1), np.uint8), [0, 0])
    )
    with pytest.raises(ConfigError, match=r"28x28, smaller than the crop 32x32"):
        PreprocessorSettings().dataset(ds).train_transforms(RandomCrop(32)).commit()
    with pytest.raises(
        ConfigError, match=r"train transforms give \(24, 24, 1\) samples but val transforms give \(28, 28, 1\)"
    ):
        PreprocessorSettings().dataset(ds).train_transforms(RandomResizedCrop(24)).commit()
    ok = (
        PreprocessorSettings()
        .dataset(ds)
        .train_transforms(RandomResizedCrop(24))
        .val_transforms(Resize(30), CenterCrop(24))
    )
    assert ok.commit().sample_shape(False) == (24, 24, 1)
    with pytest.raises(ConfigError, match=r"normalization has 3 channels but the images have 1"):
        PreprocessorSettings().dataset(ds).normalization(NormMode.CIFAR).commit()
    assert PreprocessorSettings().dataset(ds).pad_channels_to(4).commit().sample_shape() == (28, 28, 4)


def test_committed_settings_are_frozen(rng):
    ds = ArrayDataset((rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8), [0] * 4))
    s = PreprocessorSettings().dataset(ds).commit()
    with pytest.raises(FrozenError, match="cannot change preprocess_workers_count to 4"):
        s.preprocess_workers(4)
    c = s.copy().preprocess_workers(4)
    assert c.preprocess_workers_count == 4 and not c.frozen and s.frozen


def test_global_instance_and_reset(rng):
    try:
        PREPROCESSOR_SETTING.preprocess_workers(3).drop_last(True)
        assert PREPROCESSOR_SETTING.preprocess_workers_count == 3
    finally:
        reset_preprocessor_settings()
    assert not PREPROCESSOR_SETTING.drop_last_enabled and not PREPROCESSOR_SETTING.frozen


@pytest.mark.parametrize("kwargs, match", [
    ({"cpu_share": 1.5}, r"cpu_share must be a number in \[0, 1\] or 'auto', got 1.5"),
    ({"cpu_share": -0.1}, r"cpu_share must be a number in \[0, 1\]"),
    ({"cpu_share": True}, r"cpu_share must be a number"),
    ({"cpu_share": "half"}, r"got 'half'"),
    ({"cpu_threads": 0}, r"device_decode cpu_threads must be >= 1, got 0"),
    ({"cpu_threads": 2.5}, r"device_decode cpu_threads must be an integer"),
    ({"backend": "nvdec"}, r"backend must be 'auto', 'hardware' or 'gpu', got 'nvdec'"),
    ({"interpolate_chroma": 1}, r"device_decode interpolate_chroma must be True or False, got 1"),
    ({"refused": "libjpeg"}, r"device_decode refused must be 'nvjpeg', 'cpu' or 'auto', got 'libjpeg'"),
])
def test_device_decode_refuses_settings_out_of_range(kwargs, match):
    s = PreprocessorSettings()
    with pytest.raises(ConfigError, match=match):
        s.device_decode(True, **kwargs)
    assert s == PreprocessorSettings()  # nothing half-set


def test_device_decode_keeps_its_cpu_share_and_threads():
    s = PreprocessorSettings().device_decode(True, cpu_share=0.25, cpu_threads=3)
    assert (s.device_dec, s.device_dec_cpu_share, s.device_dec_cpu_threads) == (True, 0.25, 3)
    assert PreprocessorSettings().device_decode(True, cpu_share=1).device_dec_cpu_share == 1.0
    assert PreprocessorSettings().device_decode(True).device_dec_cpu_share == "auto"
    assert not PreprocessorSettings().device_decode(True).device_dec_interpolate_chroma  # (nvJPEG's fast path)
    assert PreprocessorSettings().device_decode(True, interpolate_chroma=True).device_dec_interpolate_chroma
    assert PreprocessorSettings().device_decode(True).device_dec_refused == "cpu"  # (faster beside a busy step)
    assert PreprocessorSettings().device_decode(True, refused="nvjpeg").device_dec_refused == "nvjpeg"
