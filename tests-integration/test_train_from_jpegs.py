"""Training fed from JPEGs end to end on the CPU backend: an ImageNet-style folder and its DTS pack (FULLY
and PARTIAL) through the native pipeline (libjpeg-turbo decode, RandomResizedCrop, flip, normalisation) into
a BN CNN; the three sources hold the same files, so each run trains, and the folder run is repeatable."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL")
pytest.importorskip("skimage")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _default_pipeline():
    yield
    from tr.data import reset_preprocessor_settings

    reset_preprocessor_settings()


def _train(ds) -> list[tuple[float, float]]:
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.norm import NormMode
    from tr.core.settings import Settings
    from tr.data import (
        PREPROCESSOR_SETTING,
        CenterCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        reset_preprocessor_settings,
    )
    from tr.graph.blueprint import bn, conv, fc, flatten, maxpool, relu, seq
    from tr.task.deep_learning import DeepLearningTask

    reset_preprocessor_settings()
    PREPROCESSOR_SETTING.dataset(ds).preprocess_workers(2).normalization(NormMode.IMAGENET) \
        .train_transforms(RandomResizedCrop(24, scale=(0.5, 1.0)), RandomHorizontalFlip()) \
        .val_transforms(Resize(28), CenterCrop(24))
    task = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(8)).device("cpu").quiet()
            .model(seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2), conv(16, 3, 1, 1), bn(), relu(), maxpool(2),
                       flatten(), fc(ds.num_classes)))
            .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.02)).total_epochs(3))
    result = task.compile().run()
    return [(r.train_loss, r.top1) for r in result.history]


def test_training_from_a_jpeg_folder_and_its_packs(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    from tr.data import DtsImages, ImageFolder, _native
    from tr.data.dts import pack

    if not _native.jpeg_available():
        pytest.skip("tr-data built without libjpeg-turbo")
    make_image_folder(tmp_path / "img", classes=3, per_class=16, min_side=40, max_side=80, seed=4, val_per_class=4)
    pack(tmp_path / "img", tmp_path / "p", block_bytes=32 << 10)
    runs = {name: _train(ds) for name, ds in (("folder", ImageFolder(tmp_path / "img")),
                                              ("fully", DtsImages(tmp_path / "p")),
                                              ("partial", DtsImages(tmp_path / "p", mode="partial",
                                                                    buffer_blocks=2)))}
    for name, hist in runs.items():
        losses = [loss for loss, _ in hist]
        assert len(hist) == 3 and np.isfinite(losses).all(), (name, hist)
        assert all(0.0 <= top1 <= 1.0 for _, top1 in hist)
    assert _train(ImageFolder(tmp_path / "img")) == runs["folder"]  # the same bytes again
