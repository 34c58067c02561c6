"""tr.data.jpeg_plan: the host's half of decoding on the device. The geometry is the CPU chain's own draws (the
RandomResizedCrop box of Compose.params, the flip and erase box that change the CPU chain's pixels), the regions
are packed without overlap in the decode buffer within the planner's capacity, the CPU decode fills each region
with the whole decode's pixels, and what the device path cannot run is refused by name. (The resize of those
regions against the CPU chain's bytes: tests-integration/test_jpeg_device_chain.py.)"""

from __future__ import annotations

import io

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, ShapeError
from tr.data import ImageFolder, _native
from tr.data.dataset import Split
from tr.data.fused import NormMode
from tr.data.jpeg_plan import (
    COL,
    GEOM,
    GEOM_COLS,
    SLOT_ALIGN,
    JpegPlanner,
    decode_regions,
    decode_regions_at,
    region_bytes,
)
from tr.data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    TrivialAugmentWide,
)


@pytest.fixture(scope="module")
def split(jpeg_folder):
    return ImageFolder(jpeg_folder).load("train")


def chain(size=48, erase=0.5):
    ts = [RandomResizedCrop(size), RandomHorizontalFlip()] + ([RandomErasing(erase)] if erase else [])
    return Compose(ts, NormMode.IMAGENET, "float16")


def test_the_geometry_is_the_cpu_chain_s_draws(split):
    comp = chain()
    planner = JpegPlanner(split, comp)
    idx = np.arange(len(split))[::-1].copy()
    b = planner.plan(idx, seed=11, epoch=2)
    assert b.geom.shape == (len(idx), GEOM_COLS) and len(GEOM) <= GEOM_COLS
    flips = 0
    for k, i in enumerate(idx):
        img = _native.decode_jpeg(split.encoded_bytes(int(i)), False, 8)
        assert tuple(b.shapes[k]) == img.shape
        rrc = comp.params(img.shape, seed=11, epoch=2, index=int(i))[0]["params"]
        g = b.geom[k]
        assert (g[COL["roi_y"]], g[COL["roi_x"]], g[COL["roi_h"]], g[COL["roi_w"]]) == \
            (rrc["top"], rrc["left"], rrc["height"], rrc["width"])
        assert (g[COL["top"]], g[COL["left"]], g[COL["crop_h"]], g[COL["crop_w"]]) == \
            (0, 0, rrc["height"], rrc["width"])
        # the flip and the erase box: the CPU chain's uint8 output is the unflipped, unerased one changed so
        ref = comp.apply_uint8(img, seed=11, epoch=2, index=int(i))
        plain = Compose([RandomResizedCrop(48)], NormMode.IMAGENET, "float16").apply_uint8(
            img, seed=11, epoch=2, index=int(i))
        if g[COL["flip"]]:
            plain = plain[:, ::-1]
            flips += 1
        keep = np.ones(ref.shape[:2], bool)
        if g[COL["erase_h"]]:
            ey, ex, eh, ew = (int(g[COL[c]]) for c in ("erase_y", "erase_x", "erase_h", "erase_w"))
            keep[ey:ey + eh, ex:ex + ew] = False
        np.testing.assert_array_equal(ref[keep], plain[keep])
    assert 0 < flips < len(idx)


def test_regions_are_packed_aligned_and_within_the_capacity(split):
    planner = JpegPlanner(split, chain())
    rng = np.random.default_rng(0)
    for _ in range(20):
        idx = rng.choice(len(split), 8, replace=False)
        b = planner.plan(idx, seed=int(rng.integers(1 << 30)), epoch=int(rng.integers(100)))
        slots = b.geom[:, COL["slot"]].astype(np.int64)
        ends = slots + b.geom[:, COL["roi_h"]].astype(np.int64) * b.geom[:, COL["roi_w"]] * 3
        assert (slots % SLOT_ALIGN == 0).all() and (slots[1:] >= ends[:-1]).all()
        assert ends[-1] <= b.decode_bytes <= planner.capacity(8)


def test_decode_regions_holds_the_whole_decode_s_pixels(split):
    b = JpegPlanner(split, chain()).plan([0, 3, 5], seed=1, epoch=0)
    buf = decode_regions(split, b)
    for k, i in enumerate(b.indices):
        g = b.geom[k]
        y0, x0, h, w, slot = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
        img = _native.decode_jpeg(split.encoded_bytes(int(i)), False, 8)
        np.testing.assert_array_equal(buf[slot:slot + h * w * 3].reshape(h, w, 3), img[y0:y0 + h, x0:x0 + w])
    with pytest.raises(DataError, match="at least"):
        decode_regions(split, b, np.zeros(b.decode_bytes - 1, np.uint8))


@pytest.mark.parametrize("threads", [1, 3, 64])
@pytest.mark.parametrize("window", [True, False])
@pytest.mark.parametrize("interpolate", [True, False])
def test_regions_decoded_packed_on_threads_are_the_whole_decode_s(split, threads, window, interpolate):
    """decode_regions_at (the device feeder's CPU share): any rows, packed anywhere, on native threads; the window
    decode around each region gives the whole decode's pixels (progressive, gray and 4:4:4 files among them),
    with either chroma upsampling."""
    b = JpegPlanner(split, chain()).plan(np.arange(len(split)), seed=5, epoch=1)
    rows = np.arange(len(split))[::-2].copy()
    sizes = region_bytes(b, rows)
    at = np.concatenate([[7], 7 + np.cumsum(sizes + 5)[:-1]]).astype(np.int64)  # unaligned, with gaps
    out = np.full(int(at[-1] + sizes[-1] + 3), 0xAB, np.uint8)
    was = _native.window_decode()
    _native.set_window_decode(window)
    try:
        decode_regions_at(split, b, rows, out, at, threads, interpolate_chroma=interpolate)
    finally:
        _native.set_window_decode(was)
    for r, a, n in zip(rows, at, sizes, strict=True):
        g = b.geom[r]
        y0, x0, h, w = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w"))
        img = _native.decode_jpeg(split.encoded_bytes(int(b.indices[r])), False, 8, interpolate)
        np.testing.assert_array_equal(out[a:a + n].reshape(h, w, 3), img[y0:y0 + h, x0:x0 + w])
    assert (out[:7] == 0xAB).all() and (out[at[0] + sizes[0]:at[1]] == 0xAB).all() and (out[-3:] == 0xAB).all()


def _chroma_spread(rgb: np.ndarray) -> np.ndarray:
    """Per aligned 2x2 block without a clipped byte (0 or 255), the largest spread of JFIF Cb or Cr over its four
    pixels."""
    x = rgb.astype(np.float64)
    cb = -0.168736 * x[..., 0] - 0.331264 * x[..., 1] + 0.5 * x[..., 2]
    cr = 0.5 * x[..., 0] - 0.418688 * x[..., 1] - 0.081312 * x[..., 2]
    h, w = (rgb.shape[0] // 2) * 2, (rgb.shape[1] // 2) * 2

    def blocks(a: np.ndarray) -> np.ndarray:
        return a[:h, :w].reshape(h // 2, 2, w // 2, 2)

    clipped = blocks(((rgb == 0) | (rgb == 255)).any(-1)).any((1, 3))
    spread = np.maximum(*(blocks(c).max((1, 3)) - blocks(c).min((1, 3)) for c in (cb, cr)))
    return spread[~clipped]


def test_replicated_chroma_is_one_chroma_sample_a_2x2_block_of_a_4_2_0_file(split):
    """interpolate_chroma=False (the device feeder's default, nvJPEG's engine at full speed): each chroma sample of a
    4:2:0 file covers its 2x2 block unchanged (up to the rounding and clipping of the RGB bytes), where libjpeg's
    interpolated upsampling blends neighbours; a 4:4:4 or gray file decodes the same either way."""
    from PIL import Image, JpegImagePlugin

    seen = {0: 0, 2: 0}
    for i in range(len(split)):
        data = split.encoded_bytes(i)
        with Image.open(io.BytesIO(data)) as im:
            sampling = JpegImagePlugin.get_sampling(im) if im.mode == "RGB" else 0
        smooth = _native.decode_jpeg(data, False, 8, True)
        sharp = _native.decode_jpeg(data, False, 8, False)
        if sampling == 0:  # (4:4:4 or gray: nothing to upsample)
            np.testing.assert_array_equal(sharp, smooth)
        elif sampling == 2:
            spread, blended = _chroma_spread(sharp), _chroma_spread(smooth)
            assert spread.max() <= 1.5, (i, spread.max())  # (the rounding of the RGB bytes)
            assert np.mean(blended <= 1.5) < 0.9, (i, np.mean(blended <= 1.5))
        seen[sampling] = seen.get(sampling, 0) + 1
    assert seen[0] and seen[2]  # both kinds are in the folder


def test_decode_regions_at_names_a_damaged_file_and_writes_the_others(split):
    b = JpegPlanner(split, chain()).plan([0, 1, 2, 3], seed=1, epoch=0)
    data = split.images.copy()
    o, n = int(split.offsets[2]), int(split.sizes[2])
    data[o + n // 2:o + n] = 0  # the entropy-coded data of sample 2 garbled
    bad = Split(data, split.labels, offsets=split.offsets, sizes=split.sizes)
    sizes = region_bytes(b, np.arange(4))
    at = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.zeros(int(sizes.sum()), np.uint8)
    with pytest.raises(DataError, match=r"sample 2 \(img_2\.jpg\): corrupt JPEG"):
        decode_regions_at(bad, b, np.arange(4), out, at, 2, names=[f"img_{i}.jpg" for i in range(len(split))])
    img = _native.decode_jpeg(split.encoded_bytes(3), False, 8)
    g = b.geom[3]
    y0, x0, h, w = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w"))
    np.testing.assert_array_equal(out[at[3]:].reshape(h, w, 3), img[y0:y0 + h, x0:x0 + w])  # the others written


def test_decode_jpeg_regions_refuses_bad_arguments_before_decoding(split):
    b = JpegPlanner(split, chain()).plan([0, 1], seed=1, epoch=0)
    g = b.geom
    regions = np.stack([g[:, COL["roi_y"]], g[:, COL["roi_x"]], g[:, COL["roi_h"]], g[:, COL["roi_w"]]], 1)
    sizes = region_bytes(b, np.arange(2))
    at = np.array([0, sizes[0]], np.int64)
    out = np.zeros(int(sizes.sum()), np.uint8)
    args = (split.images, b.offsets, b.sizes)
    with pytest.raises(ShapeError, match="does not fit the output"):
        _native.decode_jpeg_regions(*args, regions, out[:-1], at, 1)
    with pytest.raises(ShapeError, match="outside the"):
        _native.decode_jpeg_regions(split.images, b.offsets + split.images.size, b.sizes, regions, out, at, 1)
    with pytest.raises(ConfigError, match="writable"):
        ro = out.copy()
        ro.flags.writeable = False
        _native.decode_jpeg_regions(*args, regions, ro, at, 1)
    with pytest.raises(ConfigError, match="writable uint8"):
        _native.decode_jpeg_regions(*args, regions, out.view(np.int8), at, 1)
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        _native.decode_jpeg_regions(*args, regions, out, at, 0)
    with pytest.raises(ShapeError, match=r"regions \(n, 4\)"):
        _native.decode_jpeg_regions(*args, regions[:, :3], out, at, 1)
    far = regions.copy()
    far[1, 0] = int(b.shapes[1, 0])  # the region starts below the image
    (k, why), = _native.decode_jpeg_regions(*args, far, out, at, 1)
    assert k == 1 and "lies outside the" in why


def test_a_chain_the_device_path_cannot_run_is_refused_by_name(split):
    with pytest.raises(ConfigError, match="starts with RandomResizedCrop or Resize, got CenterCrop"):
        JpegPlanner(split, Compose([CenterCrop(32)], NormMode.IMAGENET))
    with pytest.raises(ConfigError, match="samples of one size"):
        JpegPlanner(split, Compose([Resize(32)], NormMode.IMAGENET))
    with pytest.raises(ConfigError, match="RandomRotation needs the CPU pipeline"):
        JpegPlanner(split, Compose([RandomResizedCrop(32), RandomRotation(10)], NormMode.IMAGENET))
    for t in (RandAugment(), TrivialAugmentWide()):  # no device kernel: named, at the planner's construction
        with pytest.raises(ConfigError, match=f"{type(t).__name__} needs the CPU pipeline"):
            JpegPlanner(split, Compose([RandomResizedCrop(32), t], NormMode.IMAGENET))
    with pytest.raises(ConfigError, match="ColorJitter needs the CPU pipeline"):  # one, right after the resize
        JpegPlanner(split, Compose([RandomResizedCrop(32), ColorJitter(0.4), ColorJitter(0.2)], NormMode.IMAGENET))
    # (the flip runs after every other transform wherever it is listed: a jitter after it is right after the resize)
    assert JpegPlanner(split, Compose([RandomResizedCrop(32), RandomHorizontalFlip(), ColorJitter(0.4)],
                                      NormMode.IMAGENET)).jitter
    pixels = Split(np.zeros((2, 4, 4, 3), np.uint8), np.zeros(2, np.int32))
    with pytest.raises(ConfigError, match="encoded"):
        JpegPlanner(pixels, chain())
    with pytest.raises(DataError, match="dataset indices"):
        JpegPlanner(split, chain()).plan([0, len(split)], seed=0, epoch=0)


def test_a_resize_and_centre_crop_give_the_window_of_the_resize(split):
    comp = Compose([Resize(40), CenterCrop(32)], NormMode.IMAGENET)
    b = JpegPlanner(split, comp).plan(np.arange(len(split)), seed=0, epoch=0, train=False)
    for k, i in enumerate(b.indices):
        h, w, c = b.shapes[k]
        recs = comp.params((int(h), int(w), int(c)), seed=0, epoch=0, index=int(i), train=False)
        rh, rw = recs[0]["out_shape"][:2]
        g = b.geom[k]
        assert (g[COL["out_h"]], g[COL["out_w"]]) == (rh, rw) and min(rh, rw) == 40
        assert (g[COL["out_y"]], g[COL["out_x"]]) == (recs[1]["params"]["y0"], recs[1]["params"]["x0"])
        assert (g[COL["roi_h"]], g[COL["roi_w"]]) == (h, w)  # torchvision's Resize reads the whole image
    with pytest.raises(DataError, match="smaller than the 200x200 CenterCrop"):
        JpegPlanner(split, Compose([Resize(40), CenterCrop(200)], NormMode.IMAGENET)).plan([0], seed=0, epoch=0)


def test_a_colour_jitter_after_the_resize_is_planned_with_its_draws(split):
    comp = Compose([RandomResizedCrop(32), ColorJitter(0.4, 0.4, 0.4, 0.1)], NormMode.IMAGENET)
    planner = JpegPlanner(split, comp)
    assert planner.jitter
    b = planner.plan([1, 2], seed=9, epoch=4)
    for k, i in enumerate(b.indices):
        rec = comp.params(tuple(int(v) for v in b.shapes[k]), seed=9, epoch=4, index=int(i))[1]["params"]
        g = b.geom[k]
        f = g[[COL[c] for c in ("jit_b", "jit_c", "jit_s", "jit_h")]].astype(np.int32).view(np.float32)
        want = np.float32([rec["brightness"], rec["contrast"], rec["saturation"], rec["hue"]])
        np.testing.assert_array_equal(f, want)
        order = [(int(g[COL["jit_order"]]) >> (2 * n)) & 3 for n in range(4)]
        assert order == [rec[f"order{n}"] for n in range(4)] and int(g[COL["jit_order"]]) >> 8 == 0b1111


def test_a_damaged_header_is_named_when_the_planner_is_made(split):
    data = split.images.copy()
    o = int(split.offsets[2])
    data[o:o + 2] = 0  # no SOI marker
    bad = Split(data, split.labels, offsets=split.offsets, sizes=split.sizes)
    with pytest.raises(DataError, match="sample 2"):
        JpegPlanner(bad, chain())
