"""Training with the JPEG decode on the device (issue [13]), on the CPU backend: PREPROCESSOR_SETTING.device_decode
gives a DeviceJpegFeeder, the plan's transfer graphs resample the decoded regions (tr.graph.jpeg_input), and the
run is the CPU pipeline's to the bit: the same batches in the same order, so the same losses, accuracies and
weights, for a folder and a DTS pack, with a short last batch and validation's Resize + CenterCrop. A chain the
device cannot run is refused at compile naming the transform; a damaged file stops the epoch naming it."""

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


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    from tr.data import _native

    if not _native.jpeg_available():
        pytest.skip("tr-data built without libjpeg-turbo")
    root = tmp_path_factory.mktemp("photos")
    make_image_folder(root / "img", classes=3, per_class=7, min_side=40, max_side=90, seed=6, val_per_class=3)
    return root / "img"


def _task(ds, device_decode: bool, train=None, amp: bool = False, interpolate_chroma: bool = True):
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.norm import NormMode
    from tr.core.settings import Settings
    from tr.data import (
        PREPROCESSOR_SETTING,
        CenterCrop,
        RandomErasing,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        reset_preprocessor_settings,
    )
    from tr.graph.blueprint import bn, conv, fc, flatten, maxpool, relu, seq
    from tr.task.deep_learning import DeepLearningTask

    reset_preprocessor_settings()
    train = train or (RandomResizedCrop(24, scale=(0.3, 1.0)), RandomHorizontalFlip(), RandomErasing(0.5))
    PREPROCESSOR_SETTING.dataset(ds).preprocess_workers(2).normalization(NormMode.IMAGENET) \
        .train_transforms(*train).val_transforms(Resize(28), CenterCrop(24)) \
        .device_decode(device_decode, interpolate_chroma=interpolate_chroma)
    if amp:
        PREPROCESSOR_SETTING.pad_channels_to(4)
    settings = Settings().manual_seed(5).global_batch_size(8)
    if amp:
        settings.amp(True)
    return (DeepLearningTask(settings).device("cpu").quiet()
            .model(seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2), conv(8, 3, 1, 1), bn(), relu(), maxpool(2),
                       flatten(), fc(ds.num_classes)))
            .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.05)).total_epochs(2))


def _run(task):
    result = task.compile().run()
    return [(r.train_loss, r.val_loss, r.top1) for r in result.history], task.weights()


@pytest.mark.parametrize("amp", [False, True])
def test_device_decode_trains_as_the_cpu_pipeline_to_the_bit(photos, amp):
    from tr.data import ImageFolder
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    ds = ImageFolder(photos)
    task = _task(ds, True, amp=amp)
    hist, weights = _run(task)
    assert isinstance(task._feeder, DeviceJpegFeeder)  # (21 training images, batch 8: a last batch of 5)
    assert task._feeder.steps(True) == 3 and task._feeder.last_batch(True) == 5
    ref_hist, ref_weights = _run(_task(ds, False, amp=amp))
    assert hist == ref_hist
    assert task._feeder.decoded_on_cpu() is None  # (the CPU backend decodes every image with libjpeg-turbo)
    for name, w in ref_weights.items():
        np.testing.assert_array_equal(weights[name], w, err_msg=name)


def test_device_decode_with_a_colour_jitter_trains_as_the_cpu_pipeline_to_the_bit(photos):
    from tr.data import ColorJitter, ImageFolder, RandomErasing, RandomHorizontalFlip, RandomResizedCrop

    chain = (RandomResizedCrop(24, scale=(0.3, 1.0)), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(),
             RandomErasing(0.5))
    ds = ImageFolder(photos)
    task = _task(ds, True, train=chain)
    hist, weights = _run(task)
    ops = [c.op for c in task.program.step("transfer_a").calls]
    assert ops == ["h2d_copy", "image_resample", "image_jitter"]
    ref_hist, ref_weights = _run(_task(ds, False, train=chain))
    assert hist == ref_hist
    for name, w in ref_weights.items():
        np.testing.assert_array_equal(weights[name], w, err_msg=name)


def test_a_dts_pack_decodes_on_the_device_too(photos, tmp_path):
    from tr.data import DtsImages
    from tr.data.dts import pack

    pack(photos, tmp_path / "p", block_bytes=32 << 10)
    hist, _ = _run(_task(DtsImages(tmp_path / "p"), True))
    ref, _ = _run(_task(DtsImages(tmp_path / "p"), False))
    assert hist == ref


def test_a_chain_the_device_cannot_run_is_refused_at_compile(photos):
    from tr.core.errors import ConfigError
    from tr.data import ImageFolder, RandomResizedCrop, RandomRotation

    task = _task(ImageFolder(photos), True, train=(RandomResizedCrop(24), RandomRotation(10)))
    with pytest.raises(ConfigError, match="RandomRotation needs the CPU pipeline"):
        task.compile()


def test_a_damaged_file_stops_the_epoch_naming_it(photos, tmp_path):
    import shutil

    from tr.core.errors import DataError
    from tr.data import ImageFolder

    root = tmp_path / "img"
    shutil.copytree(photos, root)
    victim = sorted((root / "train").rglob("*.JPEG"))[4]
    data = bytearray(victim.read_bytes())
    mid = len(data) // 2
    data[mid:-2] = np.random.default_rng(0).integers(0, 255, len(data) - 2 - mid, dtype=np.uint8).tobytes()
    victim.write_bytes(bytes(data))  # entropy data garbled, the header and the end marker whole: the scan passes it
    task = _task(ImageFolder(root), True).compile()
    with pytest.raises(DataError, match=victim.name):
        task.run()


def test_replicated_chroma_trains_the_same_run_after_run_and_differs_from_the_cpu_pipeline(photos):
    """device_decode's default, interpolate_chroma=False (nvJPEG's engine at full speed; libjpeg-turbo set to match
    on the CPU backend): the run repeats to the bit, and is not the CPU pipeline's (interpolated chroma), whose
    pixels the subsampled files change along colour edges."""
    from tr.data import ImageFolder

    ds = ImageFolder(photos)
    hist, weights = _run(_task(ds, True, interpolate_chroma=False))
    again, weights_again = _run(_task(ds, True, interpolate_chroma=False))
    assert hist == again
    for name, w in weights.items():
        np.testing.assert_array_equal(weights_again[name], w, err_msg=name)
    ref, _ = _run(_task(ds, False))
    assert hist != ref
    assert all(abs(a[0] - b[0]) < 0.1 * abs(b[0]) for a, b in zip(hist, ref, strict=True))  # (the same data)
