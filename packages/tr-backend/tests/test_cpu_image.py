"""image_resample on the CPU backend: the resize weights are tr.data's build_axis (checked here against a plain
transcription of it and the properties that pin them: a shift is a copy, a constant stays constant, weights sum to
2^14 within rounding), flip, erase, normalisation and padded channels as FusedNormalization writes them (FP32, or
rounded once to FP16 or BF16: exactly), and bad geometry or shapes are named. Against tr.data's CPU chain on real
JPEGs, byte for byte: tests-integration/test_jpeg_device_chain.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backend_testkit import SimpleArena, assert_rounded, op, rounded, run, values

from tr.backend.cpu.ops.image import resize_crop
from tr.backend.rules.image import COL, GEOM_COLS, PREC, axis, vertical_first
from tr.core.errors import BackendError, DataError, ShapeError


def build_axis_scalar(in0: int, in_len: int, out: int) -> tuple[list[int], list[int], list[list[int]]]:
    """csrc/resample.cpp build_axis, line by line in Python floats (IEEE doubles)."""
    if in_len == out:
        return [in0 + k for k in range(out)], [1] * out, [[1 << PREC] for _ in range(out)]
    scale = in_len / out
    support = max(scale, 1.0)
    inv = 1.0 / support
    ksize = math.ceil(support) * 2 + 1
    starts, ns, ws = [], [], []
    for k in range(out):
        center = (k + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_len)
        n = min(xmax - xmin, ksize)
        tmp = [max(0.0, 1.0 - abs((j + xmin - center + 0.5) * inv)) for j in range(n)]
        total = 0.0
        for v in tmp:
            total += v
        ws.append([int((v / total if total > 0 else 0.0) * (1 << PREC) + 0.5) for v in tmp])
        starts.append(in0 + xmin)
        ns.append(n)
    return starts, ns, ws


@pytest.mark.parametrize("in0, in_len, out", [(0, 224, 224), (5, 500, 224), (3, 97, 224), (0, 1, 7), (11, 4321, 64),
                                              (0, 225, 224), (2, 223, 224), (0, 3, 2)])
def test_axis_is_tr_data_s_build_axis(in0, in_len, out):
    a = axis(in0, in_len, out)
    starts, ns, ws = build_axis_scalar(in0, in_len, out)
    assert a.start.tolist() == starts and a.ntaps.tolist() == ns
    for k in range(out):
        assert a.w[k, :ns[k]].tolist() == ws[k] and not a.w[k, ns[k]:].any()
        assert abs(int(a.w[k].sum()) - (1 << PREC)) <= ns[k]  # normalised, each rounded once


def test_a_shift_is_a_copy_and_a_constant_stays_constant():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    np.testing.assert_array_equal(resize_crop(img, 3, 7, 20, 30, 20, 30), img[3:23, 7:37])
    flat = np.full((90, 70, 3), 173, np.uint8)
    assert (resize_crop(flat, 1, 2, 80, 61, 32, 45) == 173).all()
    assert (resize_crop(flat, 0, 0, 9, 11, 40, 50) == 173).all()


def test_a_window_of_the_resize_is_its_crop():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (90, 70, 3), dtype=np.uint8)
    whole = resize_crop(img, 0, 0, 90, 70, 60, 47)
    np.testing.assert_array_equal(resize_crop(img, 0, 0, 90, 70, 60, 47, (7, 3, 40, 40)), whole[7:47, 3:43])
    up = resize_crop(img, 5, 5, 30, 30, 64, 64)
    np.testing.assert_array_equal(resize_crop(img, 5, 5, 30, 30, 64, 64, (10, 20, 32, 32)), up[10:42, 20:52])


def test_the_pass_order_follows_the_sizes():
    assert vertical_first(axis(0, 300, 224), 224)  # fewer output rows than source rows read
    assert not vertical_first(axis(0, 100, 224), 224)
    assert not vertical_first(axis(0, 224, 224), 224)


def _geom(rows: list[dict]) -> np.ndarray:
    g = np.zeros((len(rows), GEOM_COLS), np.int32)
    for k, r in enumerate(rows):
        for name, v in r.items():
            g[k, COL[name]] = v
    return g


def _arena(src_bytes: int, batch: int, oh: int, ow: int, c_out: int, ydt: str):
    a = SimpleArena()
    t = {"src": a.add("src", (src_bytes,), "uint8"), "geom": a.add("geom", (batch, 1, 1, GEOM_COLS), "int32"),
         "y": a.add("y", (batch, oh, ow, c_out), ydt)}
    return a.allocate(), t


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize("ydt, c_out", [("fp32", 3), ("fp16", 4), ("bf16", 4), ("bf16", 3)])
def test_the_op_flips_erases_and_normalises_as_fused_normalization(ydt, c_out):
    """A 16-bit y holds the float32 values rounded once (CUDA's from_f on store): exactly; BF16 as its bits."""
    rng = np.random.default_rng(1)
    r0 = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    r1 = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    src = np.zeros(30 * 40 * 3 + 256 + 16 * 16 * 3, np.uint8)
    src[:r0.size] = r0.ravel()
    src[3840:3840 + r1.size] = r1.ravel()
    geom = _geom([dict(slot=0, roi_h=30, roi_w=40, top=2, left=5, crop_h=25, crop_w=33, flip=1, erase_y=3,
                       erase_x=4, erase_h=5, erase_w=6),
                  dict(slot=3840, roi_h=16, roi_w=16, top=0, left=0, crop_h=16, crop_w=16)])
    be, t = _arena(src.size, 2, 16, 16, c_out, ydt)
    be.write(t["src"], src)
    be.write(t["geom"], geom.reshape(2, 1, 1, GEOM_COLS))
    run(be, op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], mean=MEAN, std=STD, erase_value=(0.0,)))
    y = values(be.read(t["y"]))
    a = np.array([1.0 / (255.0 * s) for s in STD], np.float32)
    b = np.array([-m / s for m, s in zip(MEAN, STD)], np.float32)
    px0 = resize_crop(r0, 2, 5, 25, 33, 16, 16)[:, ::-1]
    want0 = px0.astype(np.float32) * a + b
    want0[3:8, 4:10] = 0.0
    want1 = r1.astype(np.float32) * a + b  # a shift: the pixels themselves
    np.testing.assert_array_equal(y[0, ..., :3], rounded(want0, ydt))
    np.testing.assert_array_equal(y[1, ..., :3], rounded(want1, ydt))
    assert (be.read(t["y"])[..., 3:] == 0).all()  # +0.0: zero bits in every dtype


def test_geometry_outside_src_or_its_region_is_named_at_launch():
    be, t = _arena(1000, 1, 8, 8, 3, "fp32")
    call = op("image_resample", src=t["src"], geom=t["geom"], y=t["y"])
    g = be.capture("g", [call])
    be.write(t["geom"], _geom([dict(slot=900, roi_h=10, roi_w=10, crop_h=10, crop_w=10)]).reshape(1, 1, 1, -1))
    with pytest.raises(DataError, match=r"sample 0: its decoded region \(10x10 at byte 900\) does not lie in src"):
        be.launch(g)
    be.write(t["geom"], _geom([dict(roi_h=10, roi_w=10, top=4, crop_h=8, crop_w=10)]).reshape(1, 1, 1, -1))
    with pytest.raises(DataError, match="crop box"):
        be.launch(g)


def test_bad_calls_are_refused_at_capture():
    be, t = _arena(64, 2, 8, 8, 3, "fp32")
    with pytest.raises(BackendError, match="std must be > 0"):
        be.capture("g", [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], std=(0.0,))])
    with pytest.raises(BackendError, match="needs 1 or 3 values"):
        be.capture("g", [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], mean=(0.1, 0.2))])
    a = SimpleArena()
    s = {"src": a.add("src", (64,), "uint8"), "geom": a.add("geom", (3, 1, 1, GEOM_COLS), "int32"),
         "y": a.add("y", (2, 8, 8, 3), "fp32")}
    with pytest.raises(ShapeError, match="geom"):
        a.allocate().capture("g", [op("image_resample", **s)])


@pytest.mark.parametrize("ydt", ["fp32", "fp16", "bf16"])
def test_a_jitter_with_no_op_on_only_flips_erases_and_normalises(ydt):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (2, 6, 5, 3), dtype=np.uint8)
    geom = _geom([dict(flip=1, erase_y=1, erase_x=2, erase_h=2, erase_w=2, jit_order=0b11100100), dict()])
    a = SimpleArena()
    t = {"x": a.add("x", x.shape, "uint8"), "geom": a.add("geom", (2, 1, 1, GEOM_COLS), "int32"),
         "y": a.add("y", (2, 6, 5, 3), ydt)}
    be = a.allocate()
    be.write(t["x"], x)
    be.write(t["geom"], geom.reshape(2, 1, 1, GEOM_COLS))
    run(be, op("image_jitter", x=t["x"], geom=t["geom"], y=t["y"], mean=MEAN, std=STD))
    y = be.read(t["y"])
    a_, b_ = (np.array([1.0 / (255.0 * s) for s in STD], np.float32),
              np.array([-m / s for m, s in zip(MEAN, STD, strict=True)], np.float32))
    want0 = x[0, :, ::-1].astype(np.float32) * a_ + b_
    want0[1:3, 2:4] = 0.0
    assert_rounded(y[0], want0, ydt)
    assert_rounded(y[1], x[1].astype(np.float32) * a_ + b_, ydt)
