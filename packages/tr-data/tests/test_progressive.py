"""Progressive resizing in the pipeline: Preprocessor.train_side makes the training samples of another side with
the same draws, packed at the start of the same zones, for any worker count; validation is untouched."""

import numpy as np
import pytest

from tr.core.errors import ConfigError, PhaseError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    Compose,
    Preprocessor,
    PreprocessorSettings,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    TransferStation,
)
from tr.data.progressive import resized_transforms

RNG = np.random.default_rng(5)
DS = ArrayDataset((RNG.integers(0, 256, (21, 40, 36, 3), dtype=np.uint8), np.arange(21) % 3),
                  (RNG.integers(0, 256, (6, 40, 36, 3), dtype=np.uint8), np.arange(6) % 3), num_classes=3)


def _settings(side: int, workers: int = 2, last=None) -> PreprocessorSettings:
    crop = last or RandomResizedCrop(side, scale=(0.3, 1.0))
    return (PreprocessorSettings().dataset(DS).preprocess_workers(workers).seed(11)
            .train_transforms(crop, RandomHorizontalFlip()).val_transforms(Resize(side, square_crop=True))).commit()


def _epoch(pre: Preprocessor, epoch: int, train: bool) -> list[tuple[bytes, bytes]]:
    out = []
    with pre.epoch(epoch, train) as run:
        for b in run.batches():
            out.append((b.valid_labels.tobytes(), b.valid_data.tobytes()))
    return out


def test_a_side_gives_the_bytes_of_a_chain_built_at_that_side_for_any_worker_count():
    want = {e: _epoch(Preprocessor(_settings(16), TransferStation(4, (16, 16, 3))), e, True) for e in (0, 1)}
    for workers in (1, 3):
        station = TransferStation(4, (32, 32, 3))
        pre = Preprocessor(_settings(32, workers), station)
        full = _epoch(pre, 0, True)
        pre.train_side(16)
        for e in (0, 1):
            got = _epoch(pre, e, True)
            assert got == want[e], (workers, e)
        # packed at the zone's start: the last batch written (batch 5, 1 sample) sits in zone B's first elements
        _, data = station.zone(1)
        assert data.reshape(-1)[:16 * 16 * 3].tobytes() == got[-1][1]
        assert _epoch(pre, 0, False) == _epoch(Preprocessor(_settings(32), TransferStation(4, (32, 32, 3))), 0,
                                               False)  # validation: the compiled side
        pre.train_side(None)  # the compiled side again: the same bytes as before
        assert _epoch(pre, 0, True) == full
        pre.train_side(32)
        assert _epoch(pre, 0, True) == full


def test_the_crop_box_does_not_depend_on_the_side():
    a, b = (RandomResizedCrop(s, scale=(0.3, 1.0)) for s in (16, 32))
    pa, pb = (Compose([t], NormMode.IMAGENET).params((40, 36, 3), seed=11, epoch=2, index=5) for t in (a, b))
    assert {"top", "left", "height", "width"} <= set(pa[0]["params"])  # the box in the image's pixels
    assert pa[0]["params"] == pb[0]["params"] and pa[0]["out_shape"] == (16, 16, 3) != pb[0]["out_shape"]


def test_resized_transforms():
    flip = RandomHorizontalFlip()
    out = resized_transforms([Resize(48), RandomResizedCrop(32, scale=(0.2, 0.9), ratio=(0.5, 2.0)), flip], 16)
    assert out[1].size == (16, 16) and out[1].scale == (0.2, 0.9) and out[1].ratio == (0.5, 2.0)
    assert out[0].size == 48 and out[2] is flip  # only the last size-setting transform follows the side
    assert resized_transforms([Resize(32, square_crop=True)], 16)[0].size == 16
    assert resized_transforms([Resize((32, 32))], 16)[0].size == (16, 16)
    for chain, msg in (([flip], "set no size"), ([Resize(40), CenterCrop(32)], "CenterCrop"),
                       ([RandomCrop(32, padding=4)], "RandomCrop"), ([Resize(32)], "Resize")):
        with pytest.raises(ConfigError, match=f"progressive resizing.*{msg}"):
            resized_transforms(chain, 16)


def test_bad_sides_are_refused():
    pre = Preprocessor(_settings(32), TransferStation(4, (32, 32, 3)))
    with pytest.raises(ConfigError, match=r"train_side must be an integer in \[1, 32\] .* the compiled maximum\), "
                                          r"got 48"):
        pre.train_side(48)
    with pytest.raises(ConfigError, match="CenterCrop"):
        Preprocessor(_settings(32, last=CenterCrop(32)), TransferStation(4, (32, 32, 3))).train_side(16)
    sdmp = _settings(32).copy().sdmp_factor(2).commit()
    with pytest.raises(ConfigError, match=r"sdmp_factor\(2\)"):
        Preprocessor(sdmp, TransferStation(4, (32, 32, 3))).train_side(16)
    with pre.epoch(0, True):
        with pytest.raises(PhaseError, match=r"train_side\(\) during an epoch"):
            pre.train_side(16)
