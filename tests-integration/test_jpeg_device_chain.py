"""Decoding on the device, its CPU twin end to end (issue [13]): tr.data's planner writes the geometry of a batch of
real JPEGs, the CPU decodes the regions (libjpeg-turbo, the fallback of the device decoder), and the CPU backend's
image_resample turns them into the normalised batch. That batch is the CPU pipeline's, byte for byte: the same
crop boxes, flips and erase boxes, the same resize to the bit, the same normalisation, FP16 and FP32. On the GPU
the same op is the CPU backend's to the bit (packages/tr-backend/tests/test_cuda_image.py), so the device path
differs from the CPU pipeline only where nvJPEG's pixels differ from libjpeg-turbo's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core.norm import NormMode
from tr.data import ImageFolder, _native
from tr.data.jpeg_plan import GEOM as PLAN_GEOM
from tr.data.jpeg_plan import GEOM_COLS as PLAN_COLS
from tr.data.jpeg_plan import JpegPlanner, decode_regions
from tr.data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests"))
from backend_testkit import SimpleArena, op  # noqa: E402
from photos import make_photos  # noqa: E402

from tr.backend.rules.image import GEOM, GEOM_COLS  # noqa: E402


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    # sizes around and far from the outputs below: crops shrink and grow
    return make_photos(tmp_path_factory, "photos", classes=3, per_class=6, min_side=40, max_side=420, seed=4,
                       val_per_class=1)


def test_the_planner_and_the_op_share_the_geometry_table():
    assert PLAN_GEOM == GEOM and PLAN_COLS == GEOM_COLS


def _train(size):
    return [RandomResizedCrop(size), RandomHorizontalFlip(), RandomErasing(0.5, value=0.5)]


def _val(size):  # ImageNet's evaluation: the short side to 8/7 of the crop, then the centre
    return [Resize(size * 8 // 7), CenterCrop(size)]


def _jitter(size):  # torchvision's ImageNet recipe with its colour jitter (0.4 each, hue 0.1)
    return [RandomResizedCrop(size), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(), RandomErasing(0.3)]


def _jitter_parts(size):  # contrast alone, then without contrast (one pass in color.cpp), hue alone
    return [RandomResizedCrop(size), ColorJitter(contrast=0.5), RandomHorizontalFlip()]


CHAINS = [
    (_train, 64, "float16", 4), (_train, 224, "float32", None), (_train, 33, "float16", None),
    (_val, 56, "float16", 4), (_val, 224, "float32", None),
    (lambda s: [Resize((s, s + 9)), RandomHorizontalFlip()], 40, "float16", None),
    (_jitter, 48, "float16", 4), (_jitter, 224, "float32", None), (_jitter_parts, 40, "float32", None),
    (lambda s: [RandomResizedCrop(s), ColorJitter(0.3, 0, 0.6)], 32, "float16", None),
    (lambda s: [Resize(s + 5), CenterCrop(s), ColorJitter(hue=0.3)], 36, "float32", None),
]


@pytest.mark.parametrize("chain, size, dtype, pad", CHAINS)
def test_the_cpu_twin_is_the_cpu_pipeline_byte_for_byte(photos, chain, size, dtype, pad):
    split = ImageFolder(photos).load("train")
    ts = chain(size)
    for k, t in enumerate(ts):  # (the erasing value of the op, in normalised space, is the chain's)
        if isinstance(t, RandomErasing):
            ts[k] = RandomErasing(t.p, value=0.5)
    comp = Compose(ts, NormMode.IMAGENET, dtype, pad_channels_to=pad)
    planner = JpegPlanner(split, comp)
    batch = len(split)
    c_out = pad or 3
    a = SimpleArena()
    t = {"src": a.add("src", (planner.capacity(batch),), "uint8"),
         "geom": a.add("geom", (batch, 1, 1, GEOM_COLS), "int32"),
         "y": a.add("y", (batch, *planner.out_hw, c_out), "fp16" if dtype == "float16" else "fp32")}
    if planner.jitter:  # the resized pixels, then the colour jitter, flip, erasing and normalisation
        t["u8"] = a.add("u8", (batch, *planner.out_hw, 3), "uint8")
    be = a.allocate()
    attrs = {"mean": comp.mean, "std": comp.std, "erase_value": (0.5,)}
    calls = ([op("image_resample", src=t["src"], geom=t["geom"], y=t["u8"]),
              op("image_jitter", x=t["u8"], geom=t["geom"], y=t["y"], **attrs)] if planner.jitter
             else [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], **attrs)])
    g = be.capture("decode", calls)
    order = np.random.default_rng(0).permutation(batch)
    for epoch in (0, 1):
        plan = planner.plan(order, seed=5, epoch=epoch)
        src = np.zeros(planner.capacity(batch), np.uint8)
        decode_regions(split, plan, src)
        be.write(t["src"], src)
        be.write(t["geom"], plan.geom.reshape(batch, 1, 1, GEOM_COLS))
        be.launch(g)
        got = be.read(t["y"])
        for k, i in enumerate(order):
            img = _native.decode_jpeg(split.encoded_bytes(int(i)), False, 8)
            want = comp(img, seed=5, epoch=epoch, index=int(i))
            np.testing.assert_array_equal(got[k].view(np.uint8), want.view(np.uint8), err_msg=f"sample {i}")
