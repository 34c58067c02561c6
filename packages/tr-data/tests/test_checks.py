"""Transform parameters are checked when constructed, in Python and again in C++: sizes computed in 64
bits against one set of limits, and every bad value a ConfigError naming the parameter and the value."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, ShapeError
from tr.data import (
    CenterCrop,
    Compose,
    FusedNormalization,
    GaussianBlur,
    Pad,
    RandomCrop,
    RandomResizedCrop,
    RandomScale,
    Resize,
    _native,
    checks,
)

FUSED = _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=None, erase=None)
PAD = {"left": 0, "top": 0, "right": 0, "bottom": 0, "padding_mode": 0, "fill": [0.0]}
INF = float("inf")


def test_python_and_native_limits_agree():
    assert _native.limits() == {
        "max_side": checks.MAX_SIDE,
        "max_image_bytes": checks.MAX_IMAGE_BYTES,
        "max_kernel": checks.MAX_KERNEL,
        "max_scale": checks.MAX_SCALE,
        "max_magnitude": checks.MAX_MAGNITUDE,
        "max_workers": checks.MAX_WORKERS,
    }


def test_pad_2_31_is_refused_instead_of_giving_a_1x1_image():
    with pytest.raises(ConfigError, match=r"Pad: padding must be <= 1048576, got 2147483648"):
        Pad(2**31)
    with pytest.raises(ConfigError, match=r"Pad: padding must be >= 0, got -1"):
        Pad((1, -1))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: GaussianBlur(2**31 - 1), r"GaussianBlur: kernel_size must be <= 1023, got 2147483647"),
        (lambda: GaussianBlur((3, 2**40 + 1)), r"kernel_size must be <= 1023, got 1099511627777"),
        (lambda: RandomCrop(2**31), r"RandomCrop: size must be <= 1048576, got 2147483648"),
        (lambda: RandomCrop((4, 0)), r"RandomCrop: width must be >= 1, got 0"),
        (lambda: CenterCrop(-5), r"CenterCrop: size must be >= 1, got -5"),
        (lambda: Resize(2**63), r"Resize: size must be <= 1048576, got 9223372036854775808"),
        (lambda: Resize(10, max_size=2**32), r"Resize: max_size must be <= 1048576, got 4294967296"),
        (lambda: RandomResizedCrop(2**31), r"RandomResizedCrop: size must be <= 1048576"),
        (lambda: RandomResizedCrop(8, ratio=(1e-30, 1.0)), r"RandomResizedCrop: ratio must be >= 0.0001"),
        (lambda: RandomScale(1.0, 1e300), r"RandomScale: max_scale must lie in \[-10000, 10000\], got 1e\+300"),
        (lambda: Compose([], pad_channels_to=2**31), r"Compose: pad_channels_to must be <= 64, got 2147483648"),
        (lambda: FusedNormalization(pad_channels_to=2**31), r"pad_channels_to must be <= 64, got 2147483648"),
    ],
)
def test_out_of_range_parameters_name_the_parameter_and_value(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_outputs_over_the_limit_are_refused_before_anything_is_allocated():
    img = np.zeros((28, 28, 1), np.uint8)
    c = Compose([Pad(checks.MAX_SIDE // 2)])
    with pytest.raises(ConfigError, match=r"Pad: a 28x28x1 image would become 1048604x1048604x1, over the limit"):
        c.out_shape(img.shape)
    with pytest.raises(DataError, match=r"would produce a 1048604x1048604x1 image, over the limit"):
        c.apply_uint8(img)
    with pytest.raises(DataError, match="over the limit"):
        Compose([Resize(1000)]).apply_uint8(np.zeros((1, 5000, 1), np.uint8))  # long side 5 000 000
    with pytest.raises(DataError, match="over the side limit"):
        Compose([RandomScale(5000.0)]).apply_uint8(np.zeros((300, 2, 1), np.uint8))


@pytest.mark.parametrize(
    "name, make, message",
    [
        ("Pad", lambda: _native.PadParams(**{**PAD, "left": 2**31}),
         r"Pad: padding must be in \[0, 1048576\], got 2147483648"),
        ("Pad", lambda: _native.PadParams(**{**PAD, "right": -1}), r"Pad: padding must be in \[0, 1048576\], got -1"),
        ("Pad", lambda: _native.PadParams(**{**PAD, "left": 2**64}), r"Pad: a parameter .* is not a number in range"),
        ("B", lambda: _native.GaussianBlurParams(kernel_x=2**31 - 1, kernel_y=3, sigma_lo=1.0, sigma_hi=1.0),
         r"B: kernel_size must be in \[1, 1023\], got 2147483647"),
        ("Blur", lambda: _native.GaussianBlurParams(kernel_x=4, kernel_y=3, sigma_lo=1.0, sigma_hi=1.0),
         r"Blur: kernel_size must be odd, got 4"),
        ("CC", lambda: _native.CenterCropParams(height=0, width=5), r"CC: height must be in \[1, 1048576\], got 0"),
        ("Rs", lambda: _native.ResizeParams(mode=1, height=0, width=0, size=2**40, max_size=0),
         r"Rs: size must be in \[1, 1048576\], got 1099511627776"),
        ("Sc", lambda: _native.RandomScaleParams(scale_lo=1.0, scale_hi=INF, fill=[0.0]),
         r"Sc: scale must be a finite number"),
        ("N", lambda: _native.GaussianNoiseParams(mean=0.0, sigma=1e300), r"N: sigma must be a finite number in"),
        ("P", lambda: _native.PadParams(**{**PAD, "fill": [300.0]}),
         r"P: fill must be a finite number in \[0.000000, 255.000000\]"),
    ],
)
def test_native_specs_are_checked_too(name, make, message):
    # past the Python checks: the parameter records convert each value, the Pipeline checks the ranges
    with pytest.raises(ConfigError, match=message):
        _native.Pipeline([_native.OpSpec(params=make(), slot=1, name=name)], FUSED)


def test_erase_rectangles_that_overflow_int32_are_shape_errors():
    fn = FusedNormalization()
    img = np.zeros((1, 4, 4, 1), np.uint8)
    # top + height used to overflow int inside the native check (UBSan, module.cpp)
    with pytest.raises(ShapeError, match="erase rectangle 0 lies outside the image"):
        fn(img, erase=np.array([[2**31 - 1, 0, 2**31 - 1, 1]]))
    with pytest.raises(ShapeError, match="must fit in int32, got min 0, max 4294967297"):
        fn(img, erase=np.array([[2**32 + 1, 0, 1, 1]]))
    with pytest.raises(ShapeError, match="one integer .* row per image"):
        fn(img, erase=np.array([[0.5, 0, 1, 1]]))


def test_huge_native_shapes_and_images_are_refused():
    c = Compose([CenterCrop(4)])
    with pytest.raises(ShapeError, match=r"sample shape sides must be in \[1, 1048576\]"):
        c._native.out_shape((2**31, 4, 1), 0)
    with pytest.raises(ShapeError, match="a sample shape holds integers"):
        c._native.out_shape((2**70, 4, 1), 0)
