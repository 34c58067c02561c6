"""Hundreds of random transform chains over random image sizes: the native core never crashes, every
failure is a clean tr error, and shapes are what the Python shape inference predicts.

No torch here: tools/asan_test.sh runs this file against an AddressSanitizer build of the extension.
"""

from __future__ import annotations

import numpy as np
import pytest
from parser_fuzz import record

from tr.core.errors import ConfigError, DataError, ShapeError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    ColorJitter,
    Compose,
    GaussianBlur,
    GaussianNoise,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandomAutocontrast,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    Resize,
    TransferStation,
)

MODES = ["constant", "edge", "reflect", "symmetric"]


def random_transform(r: np.random.Generator):
    k = int(r.integers(0, 16))
    size = lambda: (int(r.integers(1, 70)), int(r.integers(1, 70)))  # noqa: E731
    if k == 0:
        return Pad(
            tuple(int(x) for x in r.integers(0, 12, 4)),
            fill=int(r.integers(0, 256)),
            padding_mode=MODES[r.integers(0, 4)],
        )
    if k == 1:
        return RandomCrop(
            size(),
            padding=None if r.random() < 0.5 else int(r.integers(0, 8)),
            pad_if_needed=bool(r.random() < 0.5),
            padding_mode=MODES[r.integers(0, 4)],
        )
    if k == 2:
        return CenterCrop(size())
    if k == 3:
        return Resize(size() if r.random() < 0.5 else int(r.integers(1, 70)), square_crop=False)
    if k == 4:
        return Resize(int(r.integers(1, 70)), square_crop=True)
    if k == 5:
        lo = float(r.uniform(0.01, 1.0))
        return RandomResizedCrop(size(), scale=(lo, float(r.uniform(lo, 1.0))), ratio=(0.2, float(r.uniform(0.2, 5))))
    if k == 6:
        return RandomRotation(float(r.uniform(0, 360)), fill=int(r.integers(0, 256)))
    if k == 7:
        lo = float(r.uniform(0.05, 3.0))
        return RandomScale(lo, float(r.uniform(lo, 3.0)), fill=int(r.integers(0, 256)))
    if k == 8:
        return RandomHorizontalFlip(float(r.random()))
    if k == 9:
        return ColorJitter(
            float(r.uniform(0, 2)), float(r.uniform(0, 2)), float(r.uniform(0, 2)), float(r.uniform(0, 0.5))
        )
    if k == 10:
        return GaussianBlur(int(r.integers(0, 6)) * 2 + 1, (0.05, float(r.uniform(0.1, 5))))
    if k == 11:
        return GaussianNoise(float(r.uniform(-20, 20)), float(r.uniform(0, 60)))
    if k == 12:
        return RandomGrayscale(float(r.random()))
    if k == 13:
        return RandomAutocontrast(float(r.random()))
    if k == 14:
        return RandomErasing(
            float(r.random()), scale=(0.0, float(r.uniform(0, 1))), ratio=(0.1, float(r.uniform(0.1, 10)))
        )
    return RandomResizedCrop(int(r.integers(1, 40)))


def random_chain(r: np.random.Generator) -> list:
    ts, seen = [], set()
    for _ in range(int(r.integers(0, 6))):
        t = random_transform(r)
        if isinstance(t, (RandomHorizontalFlip, RandomErasing)):
            if type(t) in seen:
                continue
            seen.add(type(t))
        ts.append(t)
    return ts


def test_random_chains_never_crash():
    r = np.random.default_rng(2024)
    ok = failed = 0
    for case in range(400):
        chain = random_chain(r)
        c = int(r.choice([1, 3, 3, 4]))
        h, w = int(r.integers(1, 80)), int(r.integers(1, 80))
        img = r.integers(0, 256, (h, w, c), dtype=np.uint8)
        norm = NormMode.MNIST if r.random() < 0.5 else ((0.5,), (0.25,))
        dtype = "float16" if r.random() < 0.5 else "float32"
        pad = None if r.random() < 0.7 else int(r.integers(c, 6))
        comp = Compose(chain, norm, dtype, pad)
        try:
            expect = comp.out_shape(img.shape)
        except ConfigError:
            expect = None  # the chain cannot take this image: the native side must say so too
        for index in range(2):
            try:
                out = comp(img, seed=case, index=index)
                u8 = comp.apply_uint8(img, seed=case, index=index)
            except (DataError, ShapeError) as e:
                assert str(e)
                failed += 1
                continue
            ok += 1
            assert expect is not None and out.shape == expect, (chain, img.shape, out.shape, expect)
            assert u8.shape[:2] == out.shape[:2] and u8.dtype == np.uint8
            assert np.isfinite(out.astype(np.float32)).all()
            np.testing.assert_array_equal(out, comp(img, seed=case, index=index))  # deterministic
    print(f"[fuzz] random transform chains: {ok + failed} cases, {ok} ok, {failed} clean failures")
    record("random transform chains", ok + failed)
    assert ok > 300 and failed > 10


def test_degenerate_images():
    for shape in [(1, 1, 1), (1, 1, 3), (1, 9, 3), (9, 1, 1), (2, 2, 4)]:
        img = np.full(shape, 200, np.uint8)
        for t in [
            Pad(5, padding_mode="reflect"),
            Pad(3, padding_mode="symmetric"),
            RandomRotation(180),
            RandomScale(0.01, 4.0),
            Resize((1, 1)),
            Resize((50, 3)),
            RandomResizedCrop(7),
            GaussianBlur(9),
            RandomCrop(4, pad_if_needed=True, padding_mode="reflect"),
            CenterCrop(5),
            GaussianNoise(),
        ]:
            for i in range(3):
                out = Compose([t]).apply_uint8(img, index=i)
                assert out.dtype == np.uint8 and out.ndim == 3


def test_huge_downscale_and_upscale():
    r = np.random.default_rng(5)
    img = r.integers(0, 256, (600, 700, 3), dtype=np.uint8)
    assert Compose([Resize((3, 2))]).apply_uint8(img).shape == (3, 2, 3)
    assert Compose([Resize((2, 400))]).apply_uint8(img[:1, :1]).shape == (2, 400, 3)


@pytest.mark.parametrize("workers", [1, 3])
def test_random_chains_through_the_preprocessor(workers):
    r = np.random.default_rng(77 + workers)
    imgs = [r.integers(0, 256, (int(r.integers(8, 50)), int(r.integers(8, 50)), 3), dtype=np.uint8) for _ in range(60)]
    for _ in range(8):
        chain = [t for t in random_chain(r) if not isinstance(t, (RandomCrop, CenterCrop))] + [CenterCrop(16)]
        ds = ArrayDataset((imgs, np.arange(60)), (imgs[:10], np.arange(10)))
        s = (
            PreprocessorSettings()
            .dataset(ds)
            .preprocess_workers(workers)
            .train_transforms(*chain)
            .val_transforms(CenterCrop(16))
        )
        st = TransferStation(7, (16, 16, 3), "float16")
        with Preprocessor(s, st) as pre:
            for e in range(2):
                try:
                    with pre.epoch(e) as run:
                        for b in run.batches():
                            assert np.isfinite(b.valid_data.astype(np.float32)).all()
                except (DataError, ShapeError):
                    pass
