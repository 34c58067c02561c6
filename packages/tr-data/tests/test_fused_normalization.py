"""FusedNormalization: uint8 NHWC -> normalised FP32 / FP16 in one pass, compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, ShapeError
from tr.core.norm import NormMode
from tr.data import Compose, FusedNormalization, RandomErasing, RandomHorizontalFlip, _native


def coefficients(mode: NormMode, c: int) -> tuple[np.ndarray, np.ndarray]:
    mean = np.broadcast_to(np.array(mode.mean, np.float64), (c,))
    std = np.broadcast_to(np.array(mode.std, np.float64), (c,))
    return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


def numpy_fp32(images: np.ndarray, mode: NormMode) -> np.ndarray:
    """The documented formula: float32(x) * a_c + b_c, a_c = float32(1/(255 std)), b_c = float32(-mean/std)."""
    a, b = coefficients(mode, images.shape[-1])
    return images.astype(np.float32) * a + b


@pytest.mark.parametrize("mode", list(NormMode))
def test_fp32_is_the_documented_formula_and_close_to_the_definition(mode, rng):
    c = 1 if mode is NormMode.MNIST else 3
    imgs = rng.integers(0, 256, (5, 7, 9, c), dtype=np.uint8)
    out = FusedNormalization(mode)(imgs)
    assert out.dtype == np.float32 and out.shape == imgs.shape
    np.testing.assert_array_equal(out, numpy_fp32(imgs, mode))
    exact = (imgs / 255.0 - np.array(mode.mean)) / np.array(mode.std)
    np.testing.assert_allclose(out, exact, rtol=3e-7, atol=3e-7 * np.abs(exact).max())


@pytest.fixture(params=[True, False], ids=["f16c", "software"])
def f16c(request):
    had = _native.f16c_enabled()
    _native.set_f16c_enabled(request.param)
    yield request.param
    _native.set_f16c_enabled(had)


@pytest.mark.parametrize("mode", [NormMode.IMAGENET, NormMode.CIFAR, NormMode.MLPERF, NormMode.NO_NORM])
def test_fp16_is_the_fp32_value_rounded_to_nearest_even(mode, rng, f16c):
    imgs = rng.integers(0, 256, (4, 16, 13, 3), dtype=np.uint8)  # 39 values a row: SIMD body and tail
    flip = np.array([False, True, False, True])
    erase = np.array([[0, 0, 0, 0], [1, 2, 3, 4], [0, 0, 16, 13], [5, 0, 1, 1]], np.int32)
    out = FusedNormalization(mode, "float16")(imgs, flip=flip, erase=erase, erase_value=0.3)
    assert out.dtype == np.float16
    ref = numpy_fp32(np.where(flip[:, None, None, None], imgs[:, :, ::-1], imgs), mode)
    for i, (t, left, h, w) in enumerate(erase):
        ref[i, t : t + h, left : left + w] = 0.3
    np.testing.assert_array_equal(out.view(np.uint16), ref.astype(np.float16).view(np.uint16))


def test_every_byte_value_of_every_preset(rng):
    imgs = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=3)
    for mode in NormMode:
        for dt in ("float32", "float16"):
            out = FusedNormalization(mode, dt)(imgs)
            np.testing.assert_array_equal(out, numpy_fp32(imgs, mode).astype(dt))


def test_f16c_and_software_conversion_agree_bit_for_bit(rng):
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            65504,
            65519.99,
            65520,
            1e-8,
            6e-8,
            5.96e-8,
            2.98e-8,
            6.1e-5,
            6.103515625e-05,
            -6.1e-5,
            1 + 2**-11,
            1 + 3 * 2**-11,
            0.1,
            1e5,
        ],
        np.float32,
    )
    vals = np.concatenate(
        [specials, rng.normal(0, 3, 4000).astype(np.float32), (rng.normal(0, 1, 2000) * 1e-5).astype(np.float32)]
    )
    # exact ties of float16 rounding: halfway between neighbours
    ties = (np.arange(1, 2000, dtype=np.float32) * 2**-10 + 2**-11 + 1).astype(np.float32)
    vals = np.concatenate([vals, ties, -ties])
    with np.errstate(over="ignore"):
        want = vals.astype(np.float16).view(np.uint16)
    had = _native.f16c_enabled()
    try:
        _native.set_f16c_enabled(False)
        np.testing.assert_array_equal(_native.f32_to_f16(vals), want)
        _native.set_f16c_enabled(True)
        np.testing.assert_array_equal(_native.f32_to_f16(vals), want)
        assert _native.f16c_enabled() == _native.cpu_has_f16c()
    finally:
        _native.set_f16c_enabled(had)
    nan = _native.f32_to_f16(np.array([np.nan], np.float32)).view(np.float16)
    assert np.isnan(nan[0])


def test_flip_and_erasing_are_folded_in(rng):
    imgs = rng.integers(0, 256, (3, 6, 8, 3), dtype=np.uint8)
    flip = np.array([True, False, True])
    erase = np.array([[1, 2, 3, 4], [0, 0, 0, 0], [5, 7, 1, 1]], np.int32)
    out = FusedNormalization(NormMode.CIFAR, "float32")(imgs, flip=flip, erase=erase, erase_value=(0.5, 1.0, -2.0))
    ref = numpy_fp32(np.where(flip[:, None, None, None], imgs[:, :, ::-1], imgs), NormMode.CIFAR)
    ref[0, 1:4, 2:6] = (0.5, 1.0, -2.0)
    ref[2, 5:6, 7:8] = (0.5, 1.0, -2.0)
    np.testing.assert_array_equal(out, ref)


def test_channels_are_padded_with_zeros(rng):
    imgs = rng.integers(0, 256, (2, 5, 5, 3), dtype=np.uint8)
    out = FusedNormalization(NormMode.IMAGENET, "float16", pad_channels_to=4)(imgs)
    assert out.shape == (2, 5, 5, 4)
    np.testing.assert_array_equal(out[..., :3], numpy_fp32(imgs, NormMode.IMAGENET).astype(np.float16))
    assert (out[..., 3] == 0).all()
    chain = Compose([RandomHorizontalFlip(1.0), RandomErasing(1.0)], NormMode.IMAGENET, "float16", pad_channels_to=4)
    one = chain(imgs[0])
    assert one.shape == (5, 5, 4) and (one[..., 3] == 0).all()


@pytest.mark.parametrize("channels", [1, 3])
def test_padded_fp16_rows_of_every_width_flipped_or_not(rng, f16c, channels):
    # the SIMD widening takes four pixels at a time where its 16-byte load stays in the row: every width and
    # both directions must give the formula's value in the real channels and +0 in the padding
    for w in range(1, 23):
        imgs = rng.integers(0, 256, (2, 3, w, channels), dtype=np.uint8)
        flip = np.array([True, False])
        out = FusedNormalization(NormMode.IMAGENET if channels == 3 else NormMode.MNIST, "float16",
                                 pad_channels_to=4)(imgs, flip=flip)
        ref = numpy_fp32(np.where(flip[:, None, None, None], imgs[:, :, ::-1], imgs),
                         NormMode.IMAGENET if channels == 3 else NormMode.MNIST).astype(np.float16)
        np.testing.assert_array_equal(out[..., :channels].view(np.uint16), ref.view(np.uint16), err_msg=f"width {w}")
        assert (out[..., channels:].view(np.uint16) == 0).all()


def test_writes_into_a_caller_buffer(rng):
    imgs = rng.integers(0, 256, (2, 4, 4, 1), dtype=np.uint8)
    out = np.full((2, 4, 4, 1), 7, np.float32)
    res = FusedNormalization(NormMode.MNIST)(imgs, out=out)
    assert res is out
    np.testing.assert_array_equal(out, numpy_fp32(imgs, NormMode.MNIST))


def test_bad_inputs():
    fn = FusedNormalization(NormMode.CIFAR)
    with pytest.raises(ShapeError, match="3 channels but the images have 1"):
        fn(np.zeros((1, 4, 4, 1), np.uint8))
    with pytest.raises(ShapeError, match="uint8"):
        fn(np.zeros((1, 4, 4, 3), np.float32))
    with pytest.raises(ShapeError, match="out must have shape"):
        fn(np.zeros((1, 4, 4, 3), np.uint8), out=np.zeros((1, 4, 5, 3), np.float32))
    with pytest.raises(ConfigError, match="out must be float32"):
        fn(np.zeros((1, 4, 4, 3), np.uint8), out=np.zeros((1, 4, 4, 3), np.float16))
    with pytest.raises(ShapeError, match="outside the image"):
        fn(np.zeros((1, 4, 4, 3), np.uint8), erase=np.array([[2, 2, 3, 3]]))
    with pytest.raises(ConfigError, match="float32, float16 or bfloat16, got float64"):
        FusedNormalization(NormMode.CIFAR, "float64")
