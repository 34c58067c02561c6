"""Training on CUDA with the JPEG decode on the device (issue [13], GPU tests): the whole path (the planner, nvJPEG on
the transfer stream, libjpeg-turbo's share copied up from pinned memory, image_resample in the transfer graph, the
step) trains to finite losses, a run with a fixed CPU share repeats to the bit, and nvJPEG alone (share 0) trains as
libjpeg-turbo alone (share 1) up to the decoders' difference (replicated chroma: the H200's engine gave
libjpeg-turbo's pixels, test_gpu_jpeg_decode.py). A race between the decode, the copies and the steps would break
the repeat."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from photos import make_photos  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory, "train_photos", classes=4, per_class=24, min_side=200, max_side=500, seed=7,
                       val_per_class=4)


def _run(ds, share: float, amp: bool) -> tuple[list[tuple[float, float, float]], dict[str, np.ndarray]]:
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
    from tr.graph.blueprint import fc, flatten, relu, seq
    from tr.task.deep_learning import DeepLearningTask

    reset_preprocessor_settings()
    PREPROCESSOR_SETTING.dataset(ds).normalization(NormMode.IMAGENET).seed(2) \
        .train_transforms(RandomResizedCrop(32), RandomHorizontalFlip()).val_transforms(Resize(36), CenterCrop(32)) \
        .device_decode(True, cpu_share=share, cpu_threads=4)
    if amp:
        PREPROCESSOR_SETTING.pad_channels_to(4)
    settings = Settings().manual_seed(3).global_batch_size(16).amp(amp)
    task = (DeepLearningTask(settings).device("cuda").quiet()
            .model(seq(flatten(), fc(64), relu(), fc(ds.num_classes)))
            .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.02)).total_epochs(3))
    try:
        result = task.compile().run()
        return [(r.train_loss, r.val_loss, r.top1) for r in result.history], task.weights()
    finally:
        reset_preprocessor_settings()


@pytest.mark.parametrize("amp", [False, True])
def test_device_decode_trains_on_cuda_the_same_run_after_run(photos, amp):
    from tr.data import ImageFolder

    ds = ImageFolder(photos)
    hist, weights = _run(ds, 0.5, amp)
    assert all(math.isfinite(v) for row in hist for v in row), hist
    again, weights_again = _run(ds, 0.5, amp)
    assert hist == again
    for name, w in weights.items():
        np.testing.assert_array_equal(weights_again[name], w, err_msg=name)
    engine, _ = _run(ds, 0.0, amp)
    cpu, _ = _run(ds, 1.0, amp)
    print(f"\namp {amp}: share 0.5 {hist}\n  nvJPEG alone {engine}\n  libjpeg-turbo alone {cpu}")
    for a, b in zip(engine, cpu, strict=True):
        assert abs(a[0] - b[0]) <= 1e-3 * abs(b[0]) and abs(a[1] - b[1]) <= 1e-3 * abs(b[1]), (engine, cpu)
