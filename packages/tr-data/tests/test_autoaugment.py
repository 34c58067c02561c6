"""RandAugment and TrivialAugmentWide against torchvision.transforms.v2 (tensor kernels, CPU).

Per op: tr's pixels equal torchvision's for the same op at the same magnitude, at every bin of both magnitude
tables with both signs, on grey and RGB images of odd and square sizes, with fills (exact: the kernels repeat
torchvision's float32 steps, csrc/autoaugment_ops.cpp). The tables: every entry torch's. End to end: the steps
tr drew for a sample (Compose.params), replayed with torchvision's op, give tr's image. Worker counts 1, 2 and 7
give byte-identical epochs; bad arguments are ConfigErrors at construction."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, ShapeError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    Compose,
    Preprocessor,
    PreprocessorSettings,
    RandAugment,
    RandomCrop,
    TransferStation,
    TrivialAugmentWide,
    _native,
)
from tr.data.transforms_autoaugment import AUGMENT_OPS, MAX_AUGMENT_OPS, apply_augment_op

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")

TABLES = {False: v2.RandAugment, True: v2.TrivialAugmentWide}  # wide: TrivialAugmentWide's ranges
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}


def tv_op(img: np.ndarray, name: str, magnitude: float, fill) -> np.ndarray:
    """torchvision's op (the method RandAugment.forward calls) on the CHW tensor of ``img``."""
    ra = v2.RandAugment(fill=fill)
    t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()
    out = ra._apply_image_or_video_transform(t, name, magnitude, interpolation=ra.interpolation, fill=ra._fill)
    return out.permute(1, 2, 0).contiguous().numpy()


def tv_table(name: str, bins: int, wide: bool, h: int, w: int) -> list[float] | None:
    fn, _ = TABLES[wide]._AUGMENTATION_SPACE[name]
    m = fn(bins, h, w)
    return None if m is None else [float(v) for v in m]


def image(rng: np.random.Generator, shape: tuple[int, int, int]) -> np.ndarray:
    """Random pixels over a smooth ramp: flat regions, edges and a histogram that is not uniform."""
    h, w, c = shape
    ramp = np.add.outer(np.linspace(20, 140, h), np.linspace(0, 90, w))[:, :, None]
    return np.clip(ramp + rng.integers(-25, 26, shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("name", AUGMENT_OPS)
def test_each_op_equals_torchvision_at_every_bin_and_sign(name):
    rng = np.random.default_rng(AUGMENT_OPS.index(name))
    cases = [((33, 47, 3), 0), ((32, 32, 1), 9), ((40, 40, 3), (10, 200, 30))]
    checked = 0
    for shape, fill in cases:
        img = image(rng, shape)
        for wide in (False, True):
            table = tv_table(name, 31, wide, shape[0], shape[1]) or [0.0]
            for m in table:
                for sign in ((1.0, -1.0) if name in SIGNED else (1.0,)):
                    want = tv_op(img, name, sign * m, fill)
                    got = apply_augment_op(img, name, sign * m, fill)
                    assert got.shape == img.shape
                    assert np.array_equal(got, want), (name, shape, fill, wide, sign * m,
                                                       int((got != want).sum()))
                    checked += 1
    assert checked >= 3 * (2 if name in SIGNED else 1)


@pytest.mark.parametrize("shape", [(224, 224, 3), (375, 500, 3), (97, 61, 1)])
def test_geometric_and_colour_ops_on_large_and_odd_images(shape):
    """Sizes where torch's grid, linspace and reductions take their other paths (wide rows, non-square)."""
    rng = np.random.default_rng(shape[0])
    img = image(rng, shape)
    for name in AUGMENT_OPS:
        table = tv_table(name, 31, True, shape[0], shape[1]) or [0.0]
        for m in table[::5] + table[-1:]:
            for sign in ((1.0, -1.0) if name in SIGNED else (1.0,)):
                got, want = apply_augment_op(img, name, sign * m, 3), tv_op(img, name, sign * m, 3)
                assert np.array_equal(got, want), (name, sign * m, int((got != want).sum()))


@pytest.mark.parametrize("bins", [2, 3, 7, 10, 31, 64, 101])
def test_magnitude_tables_are_torchvisions(bins):
    for wide in (False, True):
        for h, w in ((32, 32), (224, 224), (37, 500)):
            for k, name in enumerate(AUGMENT_OPS):
                table = tv_table(name, bins, wide, h, w)
                got = [_native.augment_magnitude(k, b, bins, wide, h, w) for b in range(bins)]
                assert got == (table or [0.0] * bins), (name, bins, wide, h, w)


def replay(img: np.ndarray, params: dict, fill) -> tuple[np.ndarray, list[str]]:
    out, names = img, []
    for k in range(len(params) // 3):
        name, m = AUGMENT_OPS[params[f"op{k}"]], params[f"magnitude{k}"]
        names.append(name)
        out = tv_op(out, name, m, fill)
    return out, names


def drawn_steps(t, shape, n, seed=5):
    c = Compose([t])
    return c, [c.params(shape, seed=seed, index=i)[0]["params"] for i in range(n)]


@pytest.mark.parametrize("t, shape, fill", [
    (RandAugment(), (32, 32, 3), 0),
    (RandAugment(num_ops=4, magnitude=30, fill=(255, 0, 128)), (29, 41, 3), (255, 0, 128)),
    (RandAugment(num_ops=1, magnitude=0, num_magnitude_bins=5), (28, 28, 1), 0),
    (TrivialAugmentWide(), (32, 32, 3), 0),
    (TrivialAugmentWide(num_magnitude_bins=8, fill=17), (30, 45, 1), 17),
])
def test_the_drawn_steps_replayed_with_torchvision_give_trs_image(t, shape, fill):
    rng = np.random.default_rng(3)
    c, steps = drawn_steps(t, shape, 120)
    ops_seen = set()
    for i, p in enumerate(steps):
        img = image(rng, shape)
        want, names = replay(img, p, fill)
        ops_seen.update(names)
        assert np.array_equal(c.apply_uint8(img, seed=5, index=i), want), (i, p)
        # the magnitudes are torchvision's table entries, signed where torchvision signs them
        for k, name in enumerate(names):
            wide = isinstance(t, TrivialAugmentWide)
            table = tv_table(name, t.num_magnitude_bins, wide, shape[0], shape[1])
            expect = 0.0 if table is None else table[p[f"bin{k}"]]
            assert abs(p[f"magnitude{k}"]) == expect and (name in SIGNED or p[f"magnitude{k}"] >= 0)
            if not wide:
                assert p[f"bin{k}"] == t.magnitude
    assert len(ops_seen) >= 12  # the draws reach (nearly) every op in 120 samples


def test_draws_are_uniform_over_ops_bins_and_signs():
    n = 3000
    _, steps = drawn_steps(TrivialAugmentWide(), (16, 16, 3), n, seed=9)
    ops = np.bincount([p["op0"] for p in steps], minlength=14)
    bins = np.bincount([p["bin0"] for p in steps], minlength=31)
    signed = [p["magnitude0"] for p in steps if AUGMENT_OPS[p["op0"]] in SIGNED and p["magnitude0"] != 0]
    assert ops.min() > n / 14 * 0.75 and ops.max() < n / 14 * 1.25
    assert bins.min() > n / 31 * 0.6 and bins.max() < n / 31 * 1.4
    assert 0.45 < np.mean(np.array(signed) < 0) < 0.55
    _, ra = drawn_steps(RandAugment(num_ops=MAX_AUGMENT_OPS), (16, 16, 3), 50)
    assert all(len(p) == 3 * MAX_AUGMENT_OPS for p in ra)


def test_num_ops_zero_and_identity_steps_pass_the_image_through():
    img = image(np.random.default_rng(1), (20, 20, 3))
    assert np.array_equal(Compose([RandAugment(num_ops=0)]).apply_uint8(img, index=3), img)
    c, steps = drawn_steps(TrivialAugmentWide(), (20, 20, 3), 200)
    i = next(i for i, p in enumerate(steps) if p["op0"] == 0)  # an Identity draw
    assert c.params((20, 20, 3), seed=5, index=i)[0]["applied"] is False
    assert np.array_equal(c.apply_uint8(img, seed=5, index=i), img)


def test_worker_counts_1_2_7_give_byte_identical_epochs():
    r = np.random.default_rng(4)
    train = (np.stack([image(r, (28, 30, 3)) for _ in range(150)]), r.integers(0, 10, 150))
    ds = ArrayDataset(train, (train[0][:20], train[1][:20]))
    outs = []
    for w in (1, 2, 7):
        s = (PreprocessorSettings().dataset(ds).preprocess_workers(w).normalization(NormMode.CIFAR).seed(3)
             .train_transforms(RandAugment(num_ops=2, magnitude=15, fill=128), RandomCrop(24), TrivialAugmentWide())
             .val_transforms(CenterCrop(24)))
        st = TransferStation(32, (24, 24, 3), "float32")
        with Preprocessor(s, st) as pre:
            epochs = []
            for e in (0, 1):
                with pre.epoch(e, True) as run:
                    epochs.append(np.concatenate([b.valid_data.copy() for b in run.batches(0)]))
        outs.append(epochs)
    for other in outs[1:]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(outs[0], other))
    assert not np.array_equal(outs[0][0], outs[0][1])  # the epochs draw differently


@pytest.mark.parametrize("make, match", [
    (lambda: RandAugment(magnitude=31), r"RandAugment: magnitude must be in \[0, num_magnitude_bins - 1\] = "
                                        r"\[0, 30\], got 31"),
    (lambda: RandAugment(magnitude=-1), r"magnitude must be in \[0, num_magnitude_bins - 1\] = \[0, 30\], got -1"),
    (lambda: RandAugment(magnitude=5, num_magnitude_bins=5), r"= \[0, 4\], got 5"),
    (lambda: RandAugment(magnitude=2.5), r"RandAugment: magnitude must be an integer bin, got 2\.5"),
    (lambda: RandAugment(magnitude=True), r"magnitude must be an integer bin, got True"),
    (lambda: RandAugment(num_ops=-1), r"RandAugment: num_ops must be >= 0, got -1"),
    (lambda: RandAugment(num_ops=17), r"RandAugment: num_ops must be <= 16, got 17"),
    (lambda: RandAugment(num_magnitude_bins=1, magnitude=0), r"RandAugment: num_magnitude_bins must be >= 2, got 1"),
    (lambda: TrivialAugmentWide(num_magnitude_bins=1), r"TrivialAugmentWide: num_magnitude_bins must be >= 2, got 1"),
    (lambda: TrivialAugmentWide(num_magnitude_bins="31"), r"num_magnitude_bins must be an integer, got '31'"),
    (lambda: RandAugment(fill=256), r"RandAugment: fill values are pixel values in \[0, 255\], got 256"),
    (lambda: TrivialAugmentWide(fill=-1), r"TrivialAugmentWide: fill values are pixel values in \[0, 255\], got -1"),
    (lambda: RandAugment(fill=1.5), r"fill values are whole pixel values"),
    (lambda: RandAugment(fill=()), r"RandAugment: fill needs 1 to 16 values"),
])
def test_bad_arguments_are_config_errors_at_the_call(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_fill_or_channels_that_do_not_fit_the_images_are_refused():
    with pytest.raises(ConfigError, match=r"RandAugment: fill has 2 values but the image has 3 channels"):
        Compose([RandAugment(fill=(1, 2))]).out_shape((32, 32, 3))
    with pytest.raises(ConfigError, match=r"TrivialAugmentWide needs 1 \(grey\) or 3 \(RGB\) channels"):
        Compose([TrivialAugmentWide()]).out_shape((32, 32, 4))
    s = PreprocessorSettings().dataset(ArrayDataset((np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4))))
    with pytest.raises(ConfigError, match="fill has 2 values"):
        s.train_transforms(RandAugment(fill=(1, 2))).commit()


def test_the_native_core_checks_the_same_ranges():
    fused = _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=None, erase=None)

    def pipeline(params):
        return _native.Pipeline([_native.OpSpec(params=params, slot=1, name="RA")], fused)

    with pytest.raises(ConfigError, match=r"RA: magnitude must be in \[0, num_magnitude_bins - 1\] = \[0, 30\], "
                                          r"got 31"):
        pipeline(_native.RandAugmentParams(num_ops=2, magnitude=31, num_magnitude_bins=31, fill=[0.0]))
    with pytest.raises(ConfigError, match=r"RA: num_ops must be in \[0, 16\], got 17"):
        pipeline(_native.RandAugmentParams(num_ops=17, magnitude=3, num_magnitude_bins=31, fill=[0.0]))
    with pytest.raises(ConfigError, match=r"RA: num_magnitude_bins must be in \[2, 1048576\], got 1"):
        pipeline(_native.TrivialAugmentWideParams(num_magnitude_bins=1, fill=[0.0]))
    with pytest.raises(ConfigError, match=r"RA: fill"):
        pipeline(_native.TrivialAugmentWideParams(num_magnitude_bins=31, fill=[300.0]))


def test_apply_augment_op_refuses_what_torchvision_refuses():
    img = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ConfigError, match="op must be one of"):
        apply_augment_op(img, "Invert", 0.0)
    with pytest.raises(ConfigError, match=r"Posterize: bits must be in \[0, 8\]"):
        apply_augment_op(img, "Posterize", 9.0)
    with pytest.raises(ConfigError, match=r"Solarize: the threshold 255 \* magnitude must be <= 255"):
        apply_augment_op(img, "Solarize", 1.5)
    with pytest.raises(ConfigError, match=r"Brightness: the factor 1 \+ magnitude must be >= 0"):
        apply_augment_op(img, "Brightness", -1.5)
    with pytest.raises(ShapeError, match="Equalize needs 1 or 3 channels"):
        apply_augment_op(np.zeros((8, 8, 2), np.uint8), "Equalize", 0.0)
    with pytest.raises(ShapeError, match="uint8"):
        apply_augment_op(img.astype(np.float32), "Equalize", 0.0)
