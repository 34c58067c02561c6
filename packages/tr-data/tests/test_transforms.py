"""Every transform against torchvision (tensor functional, CPU) on the same input with the parameters our
Philox draws picked: exact where the definitions match, within 1 grey level where the interpolation
arithmetic differs (fixed-point vs float), and statistical checks for the random parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tr.core import philox
from tr.core.errors import ConfigError, DataError, ShapeError
from tr.core.norm import NormMode
from tr.data import (
    CenterCrop,
    ColorJitter,
    Compose,
    GaussianBlur,
    GaussianNoise,
    Pad,
    RandomAutocontrast,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    Resize,
    sample_seed,
)

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")
from torchvision.transforms import InterpolationMode  # noqa: E402

BILINEAR = InterpolationMode.BILINEAR


def to_t(img: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


def from_t(t) -> np.ndarray:
    return t.permute(1, 2, 0).contiguous().numpy()


def run1(t, img, index=0, seed=0):
    c = Compose([t])
    out = c.apply_uint8(img, seed=seed, index=index)
    params = c.params(img.shape, seed=seed, index=index)
    return out, (params[0]["params"] if params else {})


def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    assert a.shape == b.shape, (a.shape, b.shape)
    return np.abs(a.astype(np.int32) - b.astype(np.int32))


# Resampling runs in fixed point with a uint8 intermediate (as PIL and torchvision's own uint8 path do);
# torchvision's v1 functional resamples in float. Both are within 1 of the exact value, so they differ
# by at most 1, in 15-20 % of the values (torchvision's uint8 and float paths differ as much).
RESAMPLE_MISMATCH = 0.25


def assert_resampled_close(out: np.ndarray, ref: np.ndarray) -> None:
    d = diff(out, ref)
    assert d.max() <= 1, d.max()
    assert d.mean() < RESAMPLE_MISMATCH, d.mean()


# ---- Pad ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [2, (1, 3), (0, 1, 2, 3)])
def test_pad_matches_torchvision(mode, padding, rng):
    img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    out = Compose([Pad(padding, fill=17, padding_mode=mode)]).apply_uint8(img)
    pad = list(padding) if isinstance(padding, tuple) else padding
    ref = from_t(F.pad(to_t(img), pad, fill=17, padding_mode=mode))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric"])
def test_pad_wider_than_the_image_follows_numpy(mode, rng):
    img = rng.integers(0, 256, (3, 4, 1), dtype=np.uint8)
    out = Compose([Pad((9, 7, 5, 11), padding_mode=mode)]).apply_uint8(img)
    ref = np.pad(img, ((7, 11), (9, 5), (0, 0)), mode=mode)
    np.testing.assert_array_equal(out, ref)


def test_pad_per_channel_fill(rng):
    img = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    out = Compose([Pad(1, fill=(10, 20, 30))]).apply_uint8(img)
    np.testing.assert_array_equal(out[0, 0], [10, 20, 30])
    np.testing.assert_array_equal(out[1:-1, 1:-1], img)


# ---- RandomCrop --------------------------------------------------------------------------------
def test_random_crop_is_a_crop_at_the_philox_offsets(rng, pystream):
    img = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    for i in range(20):
        out, p = run1(RandomCrop((12, 17)), img, index=i, seed=5)
        s = pystream(sample_seed(5, 0, i), 1)
        assert (p["top"], p["left"]) == (s.randint(0, 8), s.randint(0, 13))
        ref = from_t(F.crop(to_t(img), p["top"], p["left"], 12, 17))
        np.testing.assert_array_equal(out, ref)


def test_random_crop_offsets_are_uniform():
    c = Compose([RandomCrop(4)])
    tops = np.array([c.params((12, 12, 1), index=i)[0]["params"]["top"] for i in range(1800)])
    counts = np.bincount(tops.astype(int), minlength=9)
    assert counts.sum() == 1800 and len(counts) == 9
    chi2 = ((counts - 200) ** 2 / 200).sum()
    assert chi2 < 26.1  # chi-square, 8 degrees of freedom, p = 0.001


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_random_crop_with_padding_matches_torchvision(mode, rng):
    img = rng.integers(0, 256, (28, 28, 1), dtype=np.uint8)
    for i in range(6):
        out, p = run1(RandomCrop(32, padding=4, fill=9, padding_mode=mode), img, index=i)
        padded = F.pad(to_t(img), 4, fill=9, padding_mode=mode)
        np.testing.assert_array_equal(out, from_t(F.crop(padded, p["top"], p["left"], 32, 32)))


def test_pad_then_random_crop_is_fused_without_changing_results(rng):
    img = rng.integers(0, 256, (28, 28, 1), dtype=np.uint8)
    chain = Compose([Pad(2), RandomCrop(28)])
    assert len(chain.params(img.shape)) == 1  # one native step
    for i in range(8):
        p = chain.params(img.shape, index=i)[0]["params"]
        ref = np.pad(img, ((2, 2), (2, 2), (0, 0)))[p["top"] : p["top"] + 28, p["left"] : p["left"] + 28]
        np.testing.assert_array_equal(chain.apply_uint8(img, index=i), ref)


def test_random_crop_pad_if_needed_matches_torchvision(rng):
    img = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    out, p = run1(RandomCrop(24, pad_if_needed=True, fill=7), img, index=3)
    padded = F.pad(to_t(img), [0, 4], fill=7)  # torchvision pads top and bottom by the shortfall
    np.testing.assert_array_equal(out, from_t(F.crop(padded, p["top"], p["left"], 24, 24)))


def test_image_smaller_than_its_crop_is_a_clear_error():
    img = np.zeros((28, 28, 1), np.uint8)
    with pytest.raises(DataError, match=r"28x28, smaller than the crop 32x32"):
        Compose([RandomCrop(32)]).apply_uint8(img)
    with pytest.raises(ConfigError, match=r"28x28.*smaller than the crop 32x32"):
        RandomCrop(32).out_shape((28, 28, 1))
    with pytest.raises(DataError, match=r"32x32 after padding.*smaller than the crop 40x40"):
        Compose([RandomCrop(40, padding=2)]).apply_uint8(img)


# ---- CenterCrop / Resize -------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(5, 5), (6, 7), (8, 9), (9, 10), (12, 12), (3, 14)])
def test_center_crop_matches_torchvision(size, rng):
    img = rng.integers(0, 256, (9, 10, 3), dtype=np.uint8)
    out = Compose([CenterCrop(size)]).apply_uint8(img)
    np.testing.assert_array_equal(out, from_t(F.center_crop(to_t(img), list(size))))


@pytest.mark.parametrize(
    "src,size",
    [((60, 80), (30, 40)), ((60, 80), (45, 50)), ((37, 53), (80, 100)), ((90, 70), (20, 64)), ((64, 48), 32)],
)
def test_resize_within_one_level_of_torchvision(src, size, rng, smooth):
    img = smooth(rng, *src)
    out = Compose([Resize(size)]).apply_uint8(img)
    sz = size if isinstance(size, int) else list(size)
    assert_resampled_close(out, from_t(F.resize(to_t(img), sz, antialias=True)))
    exact = from_t(F.resize(to_t(img).float(), sz, antialias=True))  # unrounded
    assert np.abs(out - exact).max() <= 1.0


def test_resize_short_side_and_max_size_shapes():
    c = Compose([Resize(32)])
    assert c.out_shape((60, 80, 3)) == (32, 42, 3)
    assert c.out_shape((80, 60, 3)) == (42, 32, 3)
    assert Compose([Resize(32, max_size=40)]).out_shape((60, 80, 3)) == (30, 40, 3)
    img = np.zeros((61, 83, 3), np.uint8)
    assert Compose([Resize(31)]).apply_uint8(img).shape == tuple(F.resize(to_t(img), 31).permute(1, 2, 0).shape)


def test_resize_square_crop_is_the_seed_resize(rng, smooth):
    img = smooth(rng, 60, 90)
    out = Compose([Resize(40, square_crop=True)]).apply_uint8(img)
    assert_resampled_close(out, from_t(F.resize(F.center_crop(to_t(img), [60, 60]), [40, 40], antialias=True)))


def test_resampling_paths_agree_across_channel_counts(rng, smooth):
    """RGB (SIMD kernels where the CPU has AVX2) and five channels (the generic path) give the same bytes."""
    rgb = smooth(rng, 50, 70)
    five = np.concatenate([rgb, rgb[..., :2]], axis=2)
    for size in [(20, 30), (90, 110), (50, 33)]:
        a = Compose([Resize(size)]).apply_uint8(rgb)
        b = Compose([Resize(size)]).apply_uint8(five)
        np.testing.assert_array_equal(a, b[..., :3])
    grey = rgb[..., :1]
    np.testing.assert_array_equal(
        Compose([Resize((23, 31))]).apply_uint8(grey),
        Compose([Resize((23, 31))]).apply_uint8(np.repeat(grey, 5, axis=2))[..., :1],
    )


# ---- RandomResizedCrop ---------------------------------------------------------------------------
def py_rrc(key: int, slot: int, H: int, W: int, scale, ratio, pystream) -> tuple[int, int, int, int]:
    """torchvision's get_params with our draws, in Python."""
    s = pystream(key, slot)
    area = H * W
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        ta = area * s.uniform(*scale)
        ar = math.exp(s.uniform(*lr))
        w, h = round(math.sqrt(ta * ar)), round(math.sqrt(ta / ar))
        if 0 < w <= W and 0 < h <= H:
            return s.randint(0, H - h), s.randint(0, W - w), h, w
    in_ratio = W / H
    if in_ratio < min(ratio):
        w, h = W, round(W / min(ratio))
    elif in_ratio > max(ratio):
        h, w = H, round(H * max(ratio))
    else:
        w, h = W, H
    return (H - h) // 2, (W - w) // 2, h, w


def test_rrc_parameters_follow_the_documented_draws(pystream):
    for scale, ratio, shape in [((0.08, 1.0), (3 / 4, 4 / 3), (75, 100)), ((0.9, 1.0), (2.0, 3.0), (50, 50))]:
        c = Compose([RandomResizedCrop(32, scale=scale, ratio=ratio)])
        for i in range(40):
            p = c.params((*shape, 3), seed=9, index=i)[0]["params"]
            got = (p["top"], p["left"], p["height"], p["width"])
            assert got == py_rrc(sample_seed(9, 0, i), 1, *shape, scale, ratio, pystream)


def test_rrc_falls_back_to_a_centre_crop():
    # an aspect of 2-3 at 90-100 % of a square's area never fits (w = sqrt(area * aspect) > 40): 10 failed draws
    p = Compose([RandomResizedCrop(16, scale=(0.9, 1.0), ratio=(2.0, 3.0))]).params((40, 40, 3))[0]["params"]
    assert p["attempts"] == 10
    assert (p["height"], p["width"], p["top"], p["left"]) == (20, 40, 10, 0)


def test_rrc_within_one_level_of_torchvision(rng, smooth):
    img = smooth(rng, 75, 100)
    t = RandomResizedCrop((48, 40))
    for i in range(8):
        out, p = run1(t, img, index=i)
        ref = F.resized_crop(to_t(img), p["top"], p["left"], p["height"], p["width"], [48, 40], antialias=True)
        assert_resampled_close(out, from_t(ref))


def test_rrc_statistics():
    c = Compose([RandomResizedCrop(8, scale=(0.25, 0.75), ratio=(0.8, 1.25))])
    ps = [c.params((400, 400, 3), index=i)[0]["params"] for i in range(600)]
    assert all(p["attempts"] == 0 for p in ps)  # everything fits in a large square image
    area = np.array([p["height"] * p["width"] / 160000 for p in ps])
    logr = np.array([math.log(p["width"] / p["height"]) for p in ps])
    assert area.min() > 0.24 and area.max() < 0.76 and abs(area.mean() - 0.5) < 0.02
    assert abs(logr.mean()) < 0.02 and logr.min() > -0.23 and logr.max() < 0.23
    assert abs(logr.std() - 2 * math.log(1.25) / math.sqrt(12)) < 0.02  # uniform in log-ratio


# ---- RandomRotation / RandomScale ------------------------------------------------------------------
def test_rotation_matches_torchvision_inside_the_image(rng, smooth):
    img = smooth(rng, 40, 50)
    for i in range(6):
        out, p = run1(RandomRotation(35, fill=0), img, index=i)
        angle = p["angle"]
        ref = from_t(F.rotate(to_t(img), angle, interpolation=BILINEAR, fill=[0.0, 0.0, 0.0]))
        # where all four bilinear taps are inside the image, both are plain bilinear interpolation
        ones = F.rotate(torch.ones(1, 40, 50), angle, interpolation=BILINEAR, fill=[0.0])[0].numpy()
        inside = ones > 1 - 1e-6
        assert inside.mean() > 0.5
        d = diff(out, ref)[inside]
        assert d.max() <= 1 and d.mean() < 0.05


def test_rotation_fills_outside_and_identity_at_zero(rng):
    img = rng.integers(0, 256, (20, 40, 3), dtype=np.uint8)
    np.testing.assert_array_equal(Compose([RandomRotation((0, 0))]).apply_uint8(img), img)
    out = Compose([RandomRotation((90, 90), fill=(77, 78, 79))]).apply_uint8(img)
    np.testing.assert_array_equal(out[:, :8], np.broadcast_to([77, 78, 79], (20, 8, 3)))
    # a 90 degree turn maps the image's middle columns onto its rows exactly
    ref = from_t(F.rotate(to_t(img), 90.0, interpolation=BILINEAR, fill=[77.0, 78.0, 79.0]))
    np.testing.assert_array_equal(out[1:-1, 11:29], ref[1:-1, 11:29])


def test_rotation_grey_simd_path_equals_the_rgb_path(rng, smooth):
    grey = smooth(rng, 33, 47, 1)
    for i in range(5):
        a = Compose([RandomRotation(40, fill=5)]).apply_uint8(grey, index=i)
        b = Compose([RandomRotation(40, fill=5)]).apply_uint8(np.repeat(grey, 3, axis=2), index=i)
        np.testing.assert_array_equal(a[..., 0], b[..., 0])


@pytest.mark.parametrize("shape", [(2, 2), (2, 9), (9, 2), (3, 17), (28, 28), (31, 45)])
def test_rotation_grey_simd_border_pixels_equal_the_rgb_path(rng, shape):
    # the grey kernel runs whole rows 8 pixels at a time, border taps (fill) included
    grey = rng.integers(0, 256, (*shape, 1), dtype=np.uint8)
    for fill, deg in ((0, 20), (200, 180), (37.6, 90)):
        c = Compose([RandomRotation(deg, fill=fill)])
        for i in range(6):
            a = c.apply_uint8(grey, index=i)
            b = c.apply_uint8(np.repeat(grey, 3, axis=2), index=i)
            np.testing.assert_array_equal(a[..., 0], b[..., 0])


def test_scale_grey_simd_path_equals_the_rgb_path(rng):
    # the grey horizontal pass reduces four outputs at once: the same integer sums as the RGB path
    for h, w in ((28, 28), (13, 37), (40, 9)):
        grey = rng.integers(0, 256, (h, w, 1), dtype=np.uint8)
        for lo, hi in ((0.8, 1.2), (0.3, 3.0), (0.1, 0.5)):
            c = Compose([RandomScale(lo, hi, fill=9)])
            for i in range(8):
                a = c.apply_uint8(grey, index=i)
                b = c.apply_uint8(np.repeat(grey, 3, axis=2), index=i)
                np.testing.assert_array_equal(a[..., 0], b[..., 0])


def test_scale_weights_cache_survives_eviction(rng):
    # the per-thread cache of resampling weights holds 64 axes: many sizes evict and rebuild them
    c = Compose([RandomScale(0.5, 2.0)])
    img = rng.integers(0, 256, (28, 28, 1), dtype=np.uint8)
    first = [c.apply_uint8(img, index=i) for i in range(4)]
    for h in range(5, 90):
        c.apply_uint8(rng.integers(0, 256, (h, h + 3, 1), dtype=np.uint8), index=h)
    for i in range(4):
        np.testing.assert_array_equal(c.apply_uint8(img, index=i), first[i])


def test_rotation_angles_are_uniform_in_range():
    c = Compose([RandomRotation((-20, 10))])
    a = np.array([c.params((8, 8, 1), index=i)[0]["params"]["angle"] for i in range(2000)])
    assert a.min() >= -20 and a.max() < 10
    assert abs(a.mean() + 5) < 0.6 and abs(a.std() - 30 / math.sqrt(12)) < 0.5


def test_random_scale_is_resize_then_centre_crop_or_pad(rng, smooth):
    img = smooth(rng, 30, 40)
    seen = set()
    for i in range(12):
        out, p = run1(RandomScale(0.6, 1.4), img, index=i)
        nh, nw = int(p["height"]), int(p["width"])
        assert (nh, nw) == (round(30 * p["scale"]), round(40 * p["scale"]))
        seen.add(nh > 30)
        ref = F.center_crop(F.resize(to_t(img), [nh, nw], antialias=True), [30, 40])
        assert_resampled_close(out, from_t(ref))
    assert seen == {True, False}


# ---- flips and colour -----------------------------------------------------------------------------
def test_horizontal_flip(rng):
    img = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    np.testing.assert_array_equal(Compose([RandomHorizontalFlip(1.0)]).apply_uint8(img), img[:, ::-1])
    np.testing.assert_array_equal(Compose([RandomHorizontalFlip(0.0)]).apply_uint8(img), img)
    c = Compose([RandomHorizontalFlip(0.3)])
    rate = np.mean([c.params(img.shape, index=i)[0]["applied"] for i in range(2000)])
    assert abs(rate - 0.3) < 0.035


@pytest.mark.parametrize("which", ["brightness", "contrast", "saturation"])
def test_color_jitter_matches_torchvision_exactly(which, rng, smooth):
    img = smooth(rng, 32, 40)
    adjust = getattr(F, f"adjust_{which}")
    for i in range(12):
        out, p = run1(ColorJitter(**{which: 0.6}), img, index=i)
        assert 0.4 <= p[which] <= 1.6
        np.testing.assert_array_equal(out, from_t(adjust(to_t(img), p[which])))


def test_color_jitter_hue_within_one_level(rng, smooth):
    img = smooth(rng, 32, 40)
    for i in range(8):
        out, p = run1(ColorJitter(hue=0.4), img, index=i)
        assert -0.4 <= p["hue"] <= 0.4
        d = diff(out, from_t(F.adjust_hue(to_t(img), p["hue"])))
        assert d.max() <= 1 and d.mean() < 0.01


def test_color_kernels_do_not_depend_on_pixel_position(rng, smooth):
    """Pixels land in SIMD lanes or scalar tails depending on where they are; the bytes must not change
    (so results are the same on CPUs with and without AVX2)."""
    img = smooth(rng, 29, 37)
    for t in (ColorJitter(hue=0.5), ColorJitter(0.5, 0.5, 0.5), RandomGrayscale(1.0)):
        c = Compose([t])
        for i in range(3):
            a = c.apply_uint8(img, index=i)
            b = c.apply_uint8(np.ascontiguousarray(img.transpose(1, 0, 2)), index=i).transpose(1, 0, 2)
            np.testing.assert_array_equal(a, b)


def test_color_jitter_order_and_all_factors(rng, smooth):
    img = smooth(rng, 24, 28)
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    orders = set()
    for i in range(12):
        out, p = run1(ColorJitter(0.5, 0.5, 0.5, 0.2), img, index=i)
        order = [int(p[f"order{k}"]) for k in range(4)]
        orders.add(tuple(order))
        factors = [p["brightness"], p["contrast"], p["saturation"], p["hue"]]
        x = to_t(img)
        for k in order:
            x = fns[k](x, factors[k])
        d = diff(out, from_t(x))
        assert d.max() <= 2 and d.mean() < 0.05
    assert len(orders) > 4


def test_color_jitter_on_grey_images(rng, smooth):
    img = smooth(rng, 20, 20, 1)
    out, p = run1(ColorJitter(0.5, 0.5, 0.5, 0.3), img, index=2)
    x = F.adjust_contrast(F.adjust_brightness(to_t(img), p["brightness"]), p["contrast"])
    y = F.adjust_brightness(F.adjust_contrast(to_t(img), p["contrast"]), p["brightness"])
    b_first = [int(p[f"order{k}"]) for k in range(4)].index(0) < [int(p[f"order{k}"]) for k in range(4)].index(1)
    np.testing.assert_array_equal(out, from_t(x if b_first else y))


def test_gaussian_blur_within_one_level(rng, smooth):
    img = smooth(rng, 30, 36)
    for ks in (3, 5, (3, 7)):
        out, p = run1(GaussianBlur(ks, (0.3, 2.0)), img, index=1)
        k = [ks, ks] if isinstance(ks, int) else list(ks)
        ref = from_t(F.gaussian_blur(to_t(img), k, [p["sigma"], p["sigma"]]))
        assert diff(out, ref).max() <= 1


def test_gaussian_noise_is_philox_normal(rng):
    img = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
    out, p = run1(GaussianNoise(2.0, 12.0), img, index=4)
    key = int(p["key_lo"]) | (int(p["key_hi"]) << 32)
    noise = philox.normal(key, 0, img.size, mean=2.0, std=12.0).reshape(img.shape)
    ref = np.clip(np.rint(img.astype(np.float32) + noise), 0, 255)
    d = diff(out, ref.astype(np.uint8))
    assert d.max() <= 1 and (d == 0).mean() > 0.995


def test_grayscale_matches_torchvision(rng, smooth):
    img = smooth(rng, 10, 12)
    out = Compose([RandomGrayscale(1.0)]).apply_uint8(img)
    np.testing.assert_array_equal(out, from_t(F.rgb_to_grayscale(to_t(img), num_output_channels=3)))
    grey = img[..., :1]
    np.testing.assert_array_equal(Compose([RandomGrayscale(1.0)]).apply_uint8(grey), grey)
    c = Compose([RandomGrayscale(0.25)])
    rate = np.mean([c.params(img.shape, index=i)[0]["applied"] for i in range(2000)])
    assert abs(rate - 0.25) < 0.035


def test_autocontrast_matches_torchvision(rng):
    img = rng.integers(40, 200, (10, 12, 3), dtype=np.uint8)
    img[..., 2] = 90  # a flat channel stays as it is
    out = Compose([RandomAutocontrast(1.0)]).apply_uint8(img)
    np.testing.assert_array_equal(out, from_t(F.autocontrast(to_t(img))))


# ---- RandomErasing (in normalised space) ----------------------------------------------------------
def py_erase(key: int, H: int, W: int, p: float, scale, ratio, pystream):
    s = pystream(key, 0, start=16)
    if not s.uniform() < p:
        return None
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        ea = H * W * s.uniform(*scale)
        ar = math.exp(s.uniform(*lr))
        h, w = round(math.sqrt(ea * ar)), round(math.sqrt(ea / ar))
        if h < H and w < W:
            return s.randint(0, H - h), s.randint(0, W - w), h, w
    return None


def test_random_erasing_matches_torchvision_erase(rng, pystream):
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    c = Compose([RandomErasing(0.7, value=(0.5, -1.0, 2.0))], NormMode.CIFAR)
    mean, std = np.array(NormMode.CIFAR.mean), np.array(NormMode.CIFAR.std)
    hits = 0
    for i in range(30):
        out = c(img, index=i)
        rec = c.params(img.shape, index=i)[-1]
        want = py_erase(sample_seed(0, 0, i), 32, 32, 0.7, (0.02, 0.33), (0.3, 3.3), pystream)
        norm = F.normalize(to_t(img).float() / 255, mean.tolist(), std.tolist())
        if want is None:
            assert not rec["applied"]
            ref = norm
        else:
            hits += 1
            p = rec["params"]
            assert (p["top"], p["left"], p["height"], p["width"]) == want
            ref = F.erase(norm, *want, v=torch.tensor([0.5, -1.0, 2.0])[:, None, None])
        np.testing.assert_allclose(out, from_t(ref), rtol=0, atol=2e-6)
    assert 10 < hits < 30


# ---- validation -------------------------------------------------------------------------------------
class Normalize:  # a user's own normalisation transform: must be rejected
    pass


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: RandomHorizontalFlip(-0.1), r"p must be in \[0, 1\], got -0.1"),
        (lambda: RandomErasing(p=1.5), r"got 1.5"),
        (lambda: RandomGrayscale(p=float("nan")), r"finite number"),
        (lambda: RandomCrop(0), r"size must be >= 1, got 0"),
        (lambda: CenterCrop((3, -1)), r"width must be >= 1, got -1"),
        (lambda: GaussianBlur(4), r"odd, got 4"),
        (lambda: GaussianBlur(3, sigma=0), r"sigma must be > 0"),
        (lambda: ColorJitter(brightness=-1), r"brightness must be >= 0, got -1"),
        (lambda: ColorJitter(hue=0.7), r"hue must lie in \[-0.5, 0.5\]"),
        (lambda: RandomResizedCrop(224, scale=(0.5, 0.1)), r"min <= max"),
        (lambda: Pad(-1), r"padding must be >= 0, got -1"),
        (lambda: Pad(1, padding_mode="wrap"), r"'wrap'"),
        (lambda: Pad(1, fill=300), r"\[0, 255\], got 300"),
        (lambda: RandomScale(0), r"min_scale must be > 0, got 0"),
        (lambda: RandomScale(1.2, 0.8), r"max_scale must be >= min_scale"),
        (lambda: RandomRotation(-5), r"degrees must be >= 0"),
        (lambda: GaussianNoise(sigma=-1), r"sigma must be >= 0"),
        (lambda: Resize(0), r"size must be >= 1, got 0"),
        (lambda: Compose([Pad(1)], dtype="int8"), r"float32, float16 or bfloat16, got int8"),
        (lambda: Compose([object()]), r"not a tr.data transform"),
        (lambda: Compose([Normalize()]), r"Normalize cannot be a transform"),
        (lambda: Compose([RandomHorizontalFlip(), RandomHorizontalFlip()]), r"at most one RandomHorizontalFlip"),
        (lambda: Compose([], normalization=((0.5,), (0.0,))), r"std must be > 0"),
    ],
)
def test_bad_arguments_raise_config_errors_naming_the_value(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_bad_images_raise():
    c = Compose([Pad(1)])
    with pytest.raises(Exception, match="uint8"):
        c.apply_uint8(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(DataError, match="fill has 3 values but the image has 1 channels"):
        Compose([Pad(1, fill=(1, 2, 3))]).apply_uint8(np.zeros((4, 4, 1), np.uint8))
    with pytest.raises(ShapeError, match="RandomErasing has 3 values but the image has 1 channels"):
        Compose([RandomErasing(1.0, value=(1, 2, 3))]).apply_uint8(np.zeros((8, 8, 1), np.uint8))
    with pytest.raises(ConfigError, match="value has 3 numbers but the image has 1 channels"):
        Compose([RandomErasing(1.0, value=(1, 2, 3))]).out_shape((8, 8, 1))
    with pytest.raises(DataError, match=r"ColorJitter needs 1 \(grey\) or 3 \(RGB\) channels, got an image of "
                                         r"shape \(4, 4, 2\)"):
        Compose([ColorJitter(0.5)]).apply_uint8(np.zeros((4, 4, 2), np.uint8))
