"""augment_affine (tr-backend) against tr.data's worker pipeline on the same MNIST digits, seed, epoch and
sample indices: every random parameter is the workers' (exactly), and the pixels differ only by the
interpolation (the workers resample three times and round to uint8 between; the op samples once in float)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tr.backend.cpu.ops.augment import augment, draws
from tr.backend.rules.augment import AugmentSpec
from tr.core.norm import NormMode
from tr.data import MNIST, Compose, Pad, RandomCrop, RandomErasing, RandomHorizontalFlip, RandomRotation, RandomScale
from tr.data.seeds import seed_prefix

ROOT = Path(__file__).resolve().parents[1]
CHAIN = [Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomScale(0.8, 1.2), RandomErasing(0.5),
         RandomHorizontalFlip()]
SPEC = AugmentSpec(pad=2, degrees=20.0, scale=(0.8, 1.2), erase_p=0.5, flip_p=0.5, mean=(0.1307,), std=(0.3081,),
                   crop_slot=2, rotation_slot=3, scale_slot=4)  # the slots of CHAIN's transforms


def test_every_draw_is_the_workers_draw():
    compose = Compose(CHAIN, NormMode.MNIST)
    for seed, epoch in ((11, 0), (11, 3), (2**40 + 5, 7)):
        index = np.arange(0, 3000, 7)
        d = draws(SPEC, seed_prefix(seed, epoch), index, 28, 28)
        for k, i in enumerate(index):
            rec = {r["name"].split("(")[0]: r for r in compose.params((28, 28, 1), seed=seed, epoch=epoch,
                                                                      index=int(i))}
            crop = rec["RandomCrop"]["params"]
            assert (d["dy"][k], d["dx"][k]) == (crop["top"] - 2, crop["left"] - 2)
            assert d["angle"][k] == rec["RandomRotation"]["params"]["angle"]
            sc = rec["RandomScale"]["params"]
            assert (d["scale"][k], d["nh"][k], d["nw"][k], d["oy"][k], d["ox"][k]) == \
                (sc["scale"], sc["height"], sc["width"], sc["y0"], sc["x0"])
            er = rec["RandomErasing"]
            got = (d["ei"][k], d["ej"][k], d["eh"][k], d["ew"][k]) if d["eh"][k] and d["ew"][k] else None
            want = (er["params"]["top"], er["params"]["left"], er["params"]["height"], er["params"]["width"]) \
                if er["applied"] else None
            assert got == want, (seed, epoch, i)
            assert bool(d["flip"][k]) == rec["RandomHorizontalFlip"]["applied"]


def test_the_pixels_are_the_workers_up_to_the_interpolation():
    images = MNIST(ROOT / "data" / "mnist").load("val").images[:400]
    index = np.arange(400)
    seed, epoch = 11, 2
    ours = augment(images, index, seed_prefix(seed, epoch), SPEC, 1)
    compose = Compose(CHAIN, NormMode.MNIST)
    theirs = np.stack([compose(images[i], seed=seed, epoch=epoch, index=int(i)) for i in index])
    diff = np.abs(ours - theirs)
    span = float(theirs.max() - theirs.min())  # about 3.2 in MNIST's normalisation
    assert diff.mean() < 0.02 * span, diff.mean()
    assert np.percentile(diff, 99) < 0.35 * span
    # the erased rectangles are exactly the same pixels (the erase value, 0 after normalising)
    d = draws(SPEC, seed_prefix(seed, epoch), index, 28, 28)
    k = int(np.flatnonzero((d["eh"] > 0) & (d["ew"] > 0))[0])
    r = slice(d["ei"][k], d["ei"][k] + d["eh"][k]), slice(d["ej"][k], d["ej"][k] + d["ew"][k])
    assert (ours[k][r] == 0).all() and (theirs[k][r] == 0).all()
