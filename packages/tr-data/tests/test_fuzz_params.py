"""Integer extremes (2^31 and up, negatives, 0, the limits and one past them) in every transform
parameter, in the settings and the TransferStation, and in every field of the native parameter records
directly (past the Python checks; float extremes and values of the wrong type too). Each case is a ConfigError
naming the parameter and the value, or a valid object whose samples come out right or fail as a tr error: no
crash, no hang, no wrapped-around size.
tools/asan_test.sh runs this file under AddressSanitizer + UBSan."""

from __future__ import annotations

import time

import numpy as np
from parser_fuzz import one_process, print_total, record

from tr.core.errors import ConfigError, DataError, ShapeError
from tr.data import (
    CenterCrop,
    ColorJitter,
    Compose,
    FusedNormalization,
    GaussianBlur,
    GaussianNoise,
    Pad,
    PreprocessorSettings,
    RandAugment,
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
    TrivialAugmentWide,
    _native,
)
from tr.data.checks import MAX_KERNEL, MAX_SIDE

FIXED = [0, 1, 3, -1, -3, -(2**31), 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63,
         2**64, 2**64 + 1, -(2**63), -(2**64), 2**100, MAX_SIDE, MAX_SIDE + 1, MAX_KERNEL, MAX_KERNEL + 2, 1025]


def extremes(seed: int, n: int = 8) -> list[int]:
    r = np.random.default_rng(seed)
    big = [int(2 ** int(r.integers(31, 90))) + int(r.integers(-2, 3)) for _ in range(n)]
    return FIXED + big + [-b for b in big[: n // 2]]


# (label, parameter named in the error, constructor of a value)
BUILDERS = [
    ("Pad(v)", "padding", lambda v: Pad(v)),
    ("Pad((1, v))", "padding", lambda v: Pad((1, v))),
    ("Pad((1, 2, v, 3), reflect)", "padding", lambda v: Pad((1, 2, v, 3), padding_mode="reflect")),
    ("RandomCrop(v)", "size", lambda v: RandomCrop(v)),
    ("RandomCrop((v, 4))", "height", lambda v: RandomCrop((v, 4))),
    ("RandomCrop(2, padding=v)", "padding", lambda v: RandomCrop(2, padding=v)),
    ("RandomCrop((2, v), pad_if_needed)", "width", lambda v: RandomCrop((2, v), pad_if_needed=True)),
    ("CenterCrop(v)", "size", lambda v: CenterCrop(v)),
    ("CenterCrop((4, v))", "width", lambda v: CenterCrop((4, v))),
    ("Resize(v)", "size", lambda v: Resize(v)),
    ("Resize((v, 4))", "height", lambda v: Resize((v, 4))),
    ("Resize(4, max_size=v)", "max_size", lambda v: Resize(4, max_size=v)),
    ("Resize(v, square_crop)", "size", lambda v: Resize(v, square_crop=True)),
    ("RandomResizedCrop(v)", "size", lambda v: RandomResizedCrop(v)),
    ("RandomResizedCrop((3, v))", "width", lambda v: RandomResizedCrop((3, v))),
    ("RandomResizedCrop(4, scale=(0, v))", "scale", lambda v: RandomResizedCrop(4, scale=(0, v))),
    ("RandomResizedCrop(4, ratio=(1, v))", "ratio", lambda v: RandomResizedCrop(4, ratio=(1, v))),
    ("GaussianBlur(v)", "kernel_size", lambda v: GaussianBlur(v)),
    ("GaussianBlur((3, v))", "kernel_size", lambda v: GaussianBlur((3, v))),
    ("GaussianBlur(3, sigma=v)", "sigma", lambda v: GaussianBlur(3, sigma=v)),
    ("RandomRotation(v)", "degrees", lambda v: RandomRotation(v)),
    ("RandomScale(v)", "min_scale", lambda v: RandomScale(v)),
    ("RandomScale(0.5, v)", "max_scale", lambda v: RandomScale(0.5, v)),
    ("ColorJitter(brightness=v)", "brightness", lambda v: ColorJitter(brightness=v)),
    ("ColorJitter(hue=v)", "hue", lambda v: ColorJitter(hue=v)),
    ("GaussianNoise(v)", "mean", lambda v: GaussianNoise(v)),
    ("GaussianNoise(0, v)", "sigma", lambda v: GaussianNoise(0, v)),
    ("RandomGrayscale(v)", "p", lambda v: RandomGrayscale(v)),
    ("RandomAutocontrast(v)", "p", lambda v: RandomAutocontrast(v)),
    ("RandAugment(num_ops=v)", "num_ops", lambda v: RandAugment(num_ops=v)),
    ("RandAugment(magnitude=v)", "magnitude", lambda v: RandAugment(magnitude=v)),
    ("RandAugment(bins=v)", "num_magnitude_bins", lambda v: RandAugment(magnitude=0, num_magnitude_bins=v)),
    ("RandAugment(fill=v)", "fill", lambda v: RandAugment(fill=v)),
    ("TrivialAugmentWide(v)", "num_magnitude_bins", lambda v: TrivialAugmentWide(v)),
    ("RandomHorizontalFlip(v)", "p", lambda v: RandomHorizontalFlip(v)),
    ("RandomErasing(ratio=(1, v))", "ratio", lambda v: RandomErasing(1.0, ratio=(1, v))),
    ("RandomErasing(value=v)", "value", lambda v: RandomErasing(1.0, value=v)),
    ("Pad(1, fill=v)", "fill", lambda v: Pad(1, fill=v)),
    ("RandomRotation(5, fill=v)", "fill", lambda v: RandomRotation(5, fill=v)),
    ("Compose(pad_channels_to=v)", "pad_channels_to", lambda v: Compose([], pad_channels_to=v)),
    ("FusedNormalization(pad_channels_to=v)", "pad_channels_to", lambda v: FusedNormalization(pad_channels_to=v)),
    ("preprocess_workers(v)", "preprocess_workers", lambda v: PreprocessorSettings().preprocess_workers(v)),
    ("load_workers(v)", "load_workers", lambda v: PreprocessorSettings().load_workers(v)),
    ("pad_channels_to(v) setting", "pad_channels_to", lambda v: PreprocessorSettings().pad_channels_to(v)),
    ("TransferStation(v, ...)", "batch_size", lambda v: TransferStation(v, (2, 2, 1))),
]
IMAGES = [np.arange(5 * 6 * 3, dtype=np.uint8).reshape(5, 6, 3), np.full((1, 1, 1), 7, np.uint8)]
SLOW_CASE_S = 10.0
PLANNED_PY = len(BUILDERS) * len(extremes(0))
counts: dict[str, int] = {}


def _run_chain(t) -> None:
    """A valid transform on small images: the shape Python predicts, or a tr error from both sides."""
    for img in IMAGES:
        comp = Compose([t])
        try:
            expect = comp.uint8_shape(img.shape)
        except ConfigError:
            expect = None
        try:
            out = comp.apply_uint8(img, index=1)
        except (DataError, ShapeError) as e:
            assert str(e)
            continue
        assert expect is not None and out.shape == expect, (t, img.shape, out.shape, expect)


def test_integer_extremes_in_every_parameter():
    n = rejected = 0
    values = extremes(0)
    for label, name, make in BUILDERS:
        for v in values:
            t0 = time.perf_counter()
            try:
                obj = make(v)
            except (ConfigError, ShapeError) as e:
                msg = str(e)
                assert name in msg and (str(v) in msg or f"{float(v)!r}" in msg), f"{label}, v={v}: {msg}"
                rejected += 1
            else:
                if isinstance(obj, (Pad, RandomCrop, CenterCrop, Resize, RandomResizedCrop, GaussianBlur,
                                    RandomRotation, RandomScale, ColorJitter, GaussianNoise, RandomGrayscale,
                                    RandomAutocontrast, RandomHorizontalFlip, RandomErasing, RandAugment,
                                    TrivialAugmentWide)):
                    _run_chain(obj)
            dt = time.perf_counter() - t0
            assert dt < SLOW_CASE_S, f"{label}, v={v}: {dt:.1f} s"
            n += 1
    print(f"[fuzz] parameter extremes: {n} cases, {rejected} ConfigError")
    record("parameter extremes", n)
    assert n >= PLANNED_PY and rejected > n // 2
    counts["python"] = n


FUSED = _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=None, erase=None)
FILL = {"fill": [0.0]}
JITTER = {f"{k}_{e}": v for k in ("brightness", "contrast", "saturation", "hue")
          for e, v in (("on", True), ("lo", 0.5 if k != "hue" else -0.1), ("hi", 1.5 if k != "hue" else 0.1))}
# a valid native parameter record per op kind (tools/gen_op_params.py declares them), by keyword
SPECS = [
    (_native.PadParams, dict(left=1, top=1, right=1, bottom=1, padding_mode=0, **FILL)),
    (_native.PadParams, dict(left=1, top=2, right=3, bottom=4, padding_mode=2, **FILL)),
    (_native.RandomCropParams, dict(height=3, width=3, pad_left=0, pad_top=0, pad_right=0, pad_bottom=0, padding_mode=0,
                                    pad_if_needed=False, **FILL)),
    (_native.RandomCropParams, dict(height=3, width=3, pad_left=1, pad_top=1, pad_right=1, pad_bottom=1, padding_mode=3,
                                    pad_if_needed=True, **FILL)),
    (_native.CenterCropParams, dict(height=3, width=3)),
    (_native.ResizeParams, dict(mode=0, height=4, width=4, size=0, max_size=0)),
    (_native.ResizeParams, dict(mode=1, height=0, width=0, size=4, max_size=9)),
    (_native.ResizeParams, dict(mode=2, height=0, width=0, size=4, max_size=0)),
    (_native.RandomResizedCropParams, dict(height=4, width=4, scale_lo=0.08, scale_hi=1.0, ratio_lo=0.75,
                                           ratio_hi=1.33)),
    (_native.RandomRotationParams, dict(degrees_lo=-10.0, degrees_hi=10.0, **FILL)),
    (_native.RandomScaleParams, dict(scale_lo=0.5, scale_hi=1.5, **FILL)),
    (_native.ColorJitterParams, JITTER),
    (_native.GaussianBlurParams, dict(kernel_x=3, kernel_y=3, sigma_lo=0.1, sigma_hi=2.0)),
    (_native.GaussianNoiseParams, dict(mean=0.0, sigma=10.0)),
    (_native.RandomGrayscaleParams, dict(p=0.5)),
    (_native.RandomAutocontrastParams, dict(p=0.5)),
    (_native.RandAugmentParams, dict(num_ops=2, magnitude=9, num_magnitude_bins=31, **FILL)),
    (_native.TrivialAugmentWideParams, dict(num_magnitude_bins=31, **FILL)),
]
FLOATS = [float("inf"), -float("inf"), float("nan"), 1e308, -1e308, 1e30, -1e30, 0.0, -0.0, 5e-324, 2.0**31, 2.0**64]
# what goes into a field of each type: the wrong types too (a str, a bool for a number, a number for a bool)
VALUES = {
    "int": extremes(1) + [True, 1.0, "3", None],
    "float": FLOATS + [2**1024, True, "1", None],
    "bool": [True, False, 0, 1, 2**64, None, "yes"],
    "floats": [[v] for v in FLOATS] + [[], [0.0] * 17, [1.0, 2.0, 3.0], "0", 0.0, [True], None],
}
SLOTS = [*extremes(1), True, 1.5]
PLANNED_NATIVE = sum(sum(len(VALUES[t]) for _, t in cls.fields()) + len(SLOTS) for cls, _ in SPECS)


def _native_case(cls: type, fields: dict, slot: object = 1) -> bool:
    """Builds and runs one native op: False when refused with a ConfigError starting with the kind's name."""
    name = cls.kind
    try:
        pipe = _native.Pipeline([_native.OpSpec(params=cls(**fields), slot=slot, name=name)], FUSED)
    except ConfigError as e:
        assert str(e).startswith(name), str(e)
        return False
    for img in IMAGES:
        try:
            out = pipe.apply_uint8(img, 5)
            assert out.dtype == np.uint8 and out.ndim == 3
        except (DataError, ShapeError) as e:
            assert str(e)
    return True


def test_integer_and_float_extremes_in_every_native_spec_field():
    # The C++ conversions and checks on their own: what reaches them when the Python layer is bypassed.
    n = accepted = 0
    for cls, base in SPECS:
        assert [f for f, _ in cls.fields()] == list(base), cls  # every field of the kind is set (and fuzzed)
        cases = [(dict(base, **{field: v}), 1) for field, t in cls.fields() for v in VALUES[t]]
        cases += [(base, slot) for slot in SLOTS]
        for fields, slot in cases:
            t0 = time.perf_counter()
            accepted += _native_case(cls, fields, slot)
            assert time.perf_counter() - t0 < SLOW_CASE_S, (cls.kind, fields, slot)
            n += 1
    print(f"[fuzz] native spec extremes: {n} cases, {accepted} accepted and run")
    record("native spec extremes", n)
    assert n >= PLANNED_NATIVE and 0 < accepted < n
    counts["native"] = n


def test_erase_rectangle_extremes():
    fn = FusedNormalization()
    img = np.zeros((2, 4, 4, 1), np.uint8)
    n = 0
    for v in extremes(2):
        for slot in range(4):
            rows = [[1, 1, 2, 2], [0, 0, 0, 0]]
            rows[0][slot] = v
            e = np.array(rows, np.int64) if -(2**63) <= v < 2**63 else rows  # what numpy makes of the rest
            try:
                out = fn(img, erase=e)
                assert out.shape == (2, 4, 4, 1)
            except (ShapeError, ConfigError) as err:
                assert "erase" in str(err)
            n += 1
    print(f"[fuzz] erase rectangle extremes: {n} cases")
    record("erase rectangle extremes", n)
    counts["erase"] = n
    assert n >= 4 * len(FIXED)


@one_process
def test_fuzz_params_ran_every_planned_case():
    print_total("tr.data parameters", counts)
    assert counts.get("python", 0) >= PLANNED_PY and counts.get("native", 0) >= PLANNED_NATIVE
