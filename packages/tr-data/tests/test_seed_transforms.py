"""The seed's placeholder transform DoNothing."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.data import (
    Compose,
    DoNothing,
    PreprocessorSettings,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
)


def test_do_nothing_is_dropped_and_leaves_every_draw_alone(rng):
    image = rng.integers(0, 256, (37, 45, 3), dtype=np.uint8)
    plain = [RandomRotation(20), RandomResizedCrop(16), RandomHorizontalFlip(), RandomErasing(1.0)]
    padded = [DoNothing(), RandomRotation(20), DoNothing(), RandomResizedCrop(16), RandomHorizontalFlip(),
              DoNothing(), RandomErasing(1.0), DoNothing()]
    a, b = Compose(plain, NormMode.IMAGENET), Compose(padded, NormMode.IMAGENET)
    assert b.transforms == a.transforms
    for index in range(6):  # the later transforms keep their Philox slots: the same samples
        assert np.array_equal(a(image, seed=3, epoch=1, index=index), b(image, seed=3, epoch=1, index=index))
        assert a.params(image.shape, seed=3, index=index) == b.params(image.shape, seed=3, index=index)


def test_a_chain_of_only_do_nothing_is_the_identity(rng):
    image = rng.integers(0, 256, (9, 7, 1), dtype=np.uint8)
    assert np.array_equal(Compose([DoNothing()]).apply_uint8(image, index=4), image)
    assert Compose([DoNothing(), DoNothing()]).out_shape((9, 7, 1)) == (9, 7, 1)


def test_settings_record_the_chain_without_the_placeholder():
    s = PreprocessorSettings().train_transforms(DoNothing(), RandomResizedCrop(8)).val_transforms(DoNothing())
    assert s.train == (RandomResizedCrop(8),) and s.val == ()
    assert repr(DoNothing()) == "DoNothing()" and DoNothing() == DoNothing()
    with pytest.raises(ConfigError, match="DoNothing has no native step"):
        DoNothing().native(1)
