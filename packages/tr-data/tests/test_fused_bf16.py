"""bfloat16 output of the fused normalisation and staging: uint16 bit patterns that are, bit for bit, the float32
output rounded by tr.core.bf16 (the one definition of the rounding, CUDA's __float2bfloat16_rn)."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core import bf16
from tr.core.bf16 import bf16_bits, bf16_values, round_bf16
from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.data import (
    ArrayDataset,
    CenterCrop,
    ColorJitter,
    Compose,
    FusedNormalization,
    ImageFolder,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandomCrop,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    TransferStation,
    _native,
)
from tr.data.fused import finite_max, out_dtype, storage_dtype
from tr.data.station import Batch


def _f32(bits: list[int]) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


# ---- the native conversion --------------------------------------------------------------------------------------
def test_native_rounding_is_tr_core_s_on_specials_ties_and_every_exponent(rng):
    specials = _f32([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7F808000, 0x7FBFFFFF,  # NaNs, payloads low and high
        0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000,  # MAX, just below / at / past the tie to inf
        0x00000001, 0x00008000, 0x00018000, 0x0000FFFF, 0x807FFFFF,  # subnormals (ties to even at 0x8000)
        0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF,  # ties to even (down, up) and off the tie
    ])
    rand = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every exponent
    vals = np.concatenate([specials, rand, rng.normal(0, 3, 10_000).astype(np.float32)])
    got = _native.f32_to_bf16(vals)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, bf16_bits(vals))
    want = [0x0000, 0x8000, 0x7F80, 0xFF80, *[0x7FC0] * 6, 0x7F7F, 0x7F7F, 0x7F80, 0x7F80, 0xFF80,
            0x0000, 0x0000, 0x0002, 0x0001, 0x8080, 0x3F80, 0x3F82, 0x3F81, 0x3F81]
    np.testing.assert_array_equal(got[: len(specials)], np.array(want, np.uint16))


# ---- FusedNormalization -------------------------------------------------------------------------------------------
@pytest.fixture(params=[True, False], ids=["f16c", "software"])
def f16c(request):
    """The F16C switch must not reach bfloat16 (its fast branch is FP16's only)."""
    had = _native.f16c_enabled()
    _native.set_f16c_enabled(request.param)
    yield request.param
    _native.set_f16c_enabled(had)


def _case(rng: np.random.Generator, n: int, h: int, w: int, c: int):
    imgs = rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)
    flip = rng.integers(0, 2, n).astype(bool)
    erase = np.zeros((n, 4), np.int32)
    for i in range(0, n, 2):  # every other image erased, a rectangle inside it
        t, left = int(rng.integers(0, h)), int(rng.integers(0, w))
        erase[i] = (t, left, int(rng.integers(1, h - t + 1)), int(rng.integers(1, w - left + 1)))
    return imgs, flip, erase


@pytest.mark.parametrize("mode", list(NormMode))
@pytest.mark.parametrize("pad", [None, 4])
def test_bf16_is_the_fp32_output_rounded_bit_for_bit(mode, pad, rng, f16c):
    c = 1 if mode in (NormMode.MNIST, NormMode.NO_NORM) else 3
    ev = 0.3 if c == 1 else (0.5, -1.0, 2.0)
    for w in (1, 5, 13, 16, 23):  # rows of every length modulo the vector width, flipped or not
        imgs, flip, erase = _case(rng, 4, 6, w, c)
        f32 = FusedNormalization(mode, "float32", pad)(imgs, flip=flip, erase=erase, erase_value=ev)
        out = FusedNormalization(mode, "bfloat16", pad)(imgs, flip=flip, erase=erase, erase_value=ev)
        assert out.dtype == np.uint16 and out.shape == f32.shape
        np.testing.assert_array_equal(out, bf16_bits(f32), err_msg=f"{mode} width {w}")
        if pad:
            assert (out[..., c:] == 0).all()  # padded channels hold +0


def test_every_byte_value_of_every_preset():
    imgs = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=3)
    for mode in NormMode:
        f32 = FusedNormalization(mode)(imgs)
        out = FusedNormalization(mode, "bfloat16")(imgs)
        np.testing.assert_array_equal(out, bf16_bits(f32))
        np.testing.assert_array_equal(bf16_values(out), round_bf16(f32))


def test_overflow_and_nan_round_as_tr_core_does(rng):
    imgs = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    # The native entry point, below the Python range checks: a std that sends the top pixels past bfloat16's
    # range (inf) but not float32's, one that makes a = 1 / (255 std) inf (0 * inf: NaN at x = 0), NaN erasing.
    for std, ev in ((1 / 3.4e38, 0.0), (1e-45, 0.0), (1.0, float("nan"))):
        erase = np.array([[0, 0, 1, 3]], np.int32)
        f32 = np.empty(imgs.shape, np.float32)
        out = np.empty(imgs.shape, np.uint16)
        with np.errstate(all="ignore"):
            for o in (f32, out):
                _native.fused_normalize(imgs, o, [0.0], [std], 0, None, erase, [ev])
        np.testing.assert_array_equal(out, bf16_bits(f32))
    assert (out[0, 0, :3] == bf16.QUIET_NAN).all()
    # The Python checks hold each dtype to its own finite range: what float32 holds, bfloat16 may not.
    FusedNormalization(((0.0,), (1 / 3.4e38,)), "float32")
    with pytest.raises(ConfigError, match=r"beyond bfloat16's largest finite value 3\.38953e\+38"):
        FusedNormalization(((0.0,), (1 / 3.4e38,)), "bfloat16")
    one = FusedNormalization(NormMode.NO_NORM, "bfloat16")(imgs[:, :2, :2], erase=np.array([[0, 0, 1, 1]]),
                                                          erase_value=-1e6)  # the largest erase value there is
    assert one[0, 0, 0, 0] == bf16_bits(np.float32(-1e6)) == 0xC974
    assert finite_max("bfloat16") == bf16.MAX and finite_max("float16") == 65504.0


def test_a_compose_chain_in_bf16_is_its_fp32_chain_rounded(rng):
    ts = [Pad(2), RandomCrop(12), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(),
          RandomErasing(0.7, value=1.5)]
    f32 = Compose(ts, NormMode.IMAGENET, "float32", pad_channels_to=4)
    for dt in ("bfloat16", "bf16", DType.BF16):
        chain = Compose(ts, NormMode.IMAGENET, dt, pad_channels_to=4)
        assert chain.dtype == "bfloat16"
        for i in range(12):
            img = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            got = chain(img, seed=3, epoch=1, index=i)
            assert got.dtype == np.uint16 and got.shape == (12, 12, 4)
            np.testing.assert_array_equal(got, bf16_bits(f32(img, seed=3, epoch=1, index=i)))


def test_dtype_names_storage_and_caller_buffers(rng):
    assert [out_dtype(d) for d in ("bfloat16", "BFloat16", "bf16", DType.BF16, DType.FP16, np.float32)] == [
        "bfloat16", "bfloat16", "bfloat16", "bfloat16", "float16", "float32"]
    assert storage_dtype("bfloat16") == np.uint16 and storage_dtype("float16") == np.float16
    imgs = rng.integers(0, 256, (2, 3, 4, 3), dtype=np.uint8)
    fn = FusedNormalization(NormMode.CIFAR, "bfloat16")
    out = np.full((2, 3, 4, 3), 7, np.uint16)
    assert fn(imgs, out=out) is out
    np.testing.assert_array_equal(out, bf16_bits(FusedNormalization(NormMode.CIFAR)(imgs)))
    np.testing.assert_array_equal(fn(imgs[0]), out[0])  # one image (h, w, c)
    with pytest.raises(ConfigError, match=r"out must be bfloat16 \(uint16 bit patterns\), got float16"):
        fn(imgs, out=np.zeros((2, 3, 4, 3), np.float16))
    with pytest.raises(ConfigError, match="out must be float16, got uint16"):
        FusedNormalization(NormMode.CIFAR, "float16")(imgs, out=np.zeros((2, 3, 4, 3), np.uint16))


@pytest.mark.parametrize("bad", ["float64", "uint16", np.int8, DType.INT8, "bfloat", object()])
def test_an_unknown_output_dtype_names_the_allowed_ones(bad):
    with pytest.raises(ConfigError, match="output dtype must be float32, float16 or bfloat16, got"):
        FusedNormalization(NormMode.CIFAR, bad)
    with pytest.raises(ConfigError, match="output dtype must be float32, float16 or bfloat16, got"):
        Compose([], NormMode.CIFAR, bad)


# ---- TransferStation and the Preprocessor ---------------------------------------------------------------------
def test_a_bf16_station_stores_uint16_and_knows_it_is_bf16():
    for dt in ("bfloat16", "bf16", DType.BF16):
        st = TransferStation(3, (4, 5, 3), dt)
        assert st.sample_dtype is DType.BF16 and st.dtype == np.uint16 and st.dtype_name == "bfloat16"
        assert st.sample_bytes == 4 * 5 * 3 * 2 and st.zone(1)[1].dtype == np.uint16
        assert "dtype=bfloat16" in repr(st)
    assert TransferStation.layout(3, (4, 5, 3), "bfloat16") == TransferStation.layout(3, (4, 5, 3), "float16")
    assert TransferStation(3, (4, 5, 3), np.float16).sample_dtype is DType.FP16
    pairs = [(np.zeros(2, np.int32), np.zeros((2, 4, 4, 1), np.uint16)) for _ in range(2)]
    assert TransferStation(2, (4, 4, 1), "bfloat16", buffers=pairs).zone(0)[1] is pairs[0][1]
    with pytest.raises(ConfigError, match=r"data must be C-contiguous uint16 \(bfloat16 bit patterns\)"):
        TransferStation(2, (4, 4, 1), "bfloat16", buffers=[(p[0], p[1].view(np.float16)) for p in pairs])
    with pytest.raises(ConfigError, match=r"float32, float16 or bfloat16, got uint16 \(bfloat16's bit patterns"):
        TransferStation(2, (4, 4, 1), np.uint16)  # the storage alone does not say bfloat16
    with pytest.raises(ConfigError, match="float32, float16 or bfloat16, got int8"):
        TransferStation(2, (4, 4, 1), DType.INT8)


def _ragged() -> ArrayDataset:
    r = np.random.default_rng(5)
    imgs = [r.integers(0, 256, (int(r.integers(20, 40)), int(r.integers(20, 40)), 3), dtype=np.uint8)
            for _ in range(90)]
    return ArrayDataset((imgs, r.integers(0, 10, 90)), (imgs[:30], np.arange(30)))


def _epochs(s: PreprocessorSettings, dtype: str, batch: int = 16) -> list[tuple[np.ndarray, np.ndarray]]:
    """Training epochs 0 and 1, then validation twice (the second pass replays the CPVS cache)."""
    out = []
    with Preprocessor(s, TransferStation(batch, (24, 24, 4), dtype)) as pre:
        assert pre.chains["train"].dtype == dtype
        for e, train in ((0, True), (1, True), (0, False), (1, False)):
            with pre.epoch(e, train) as run:
                bs = [(b.valid_data.copy(), b.valid_labels.copy()) for b in run.batches()]
            out.append((np.concatenate([d for d, _ in bs]), np.concatenate([y for _, y in bs])))
    return out


def test_a_preprocessor_epoch_in_bf16_is_the_fp32_epoch_rounded():
    ds = _ragged()
    chain = [RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomErasing(0.5)]

    def settings() -> PreprocessorSettings:
        return (PreprocessorSettings().dataset(ds).preprocess_workers(3).normalization(NormMode.IMAGENET)
                .train_transforms(*chain).val_transforms(Resize(28), CenterCrop(24)).pad_channels_to(4).seed(9))

    ref, got = _epochs(settings(), "float32"), _epochs(settings(), "bfloat16")
    for (d32, y32), (d16, y16) in zip(ref, got):
        assert d16.dtype == np.uint16 and d16.shape == d32.shape
        np.testing.assert_array_equal(y16, y32)
        np.testing.assert_array_equal(d16, bf16_bits(d32))
        np.testing.assert_array_equal(bf16_values(d16), round_bf16(d32))  # what the model reads, widened
        assert (d16[..., 3] == 0).all()


def test_stations_of_another_dtype_are_refused():
    s = PreprocessorSettings().dataset(_ragged()).preprocess_workers(1).train_transforms(RandomCrop(20)) \
        .val_transforms(CenterCrop(20))
    bf = TransferStation(8, (20, 20, 3), "bfloat16")
    with pytest.raises(ConfigError, match="all TransferStations must match"):
        Preprocessor(s, [bf, TransferStation(8, (20, 20, 3), "float16")])  # same bytes, another type
    with Preprocessor(s, bf) as pre:
        with pytest.raises(ConfigError, match="differs .* in sample shape or dtype"):
            pre.replace_stations(TransferStation(8, (20, 20, 3), "float16"))
        pre.replace_stations(TransferStation(4, (20, 20, 3), DType.BF16))


def test_a_jpeg_folder_with_sdmp_in_bf16_is_the_fp32_run_rounded(jpeg_folder):
    def run(dtype: str) -> list[np.ndarray]:
        s = (PreprocessorSettings().dataset(ImageFolder(jpeg_folder)).preprocess_workers(2)
             .normalization(NormMode.IMAGENET).train_transforms(RandomResizedCrop(32), RandomHorizontalFlip())
             .val_transforms(Resize(36), CenterCrop(32)).sdmp_factor(2).seed(5))
        out = []
        with Preprocessor(s, TransferStation(6, (32, 32, 3), dtype)) as pre:
            for e in range(3):  # epoch 1 is the one SDMP computed during epoch 0
                with pre.epoch(e, True) as r:
                    out.append(np.concatenate([b.valid_data.copy() for b in r.batches(0)]))
        return out

    for d32, d16 in zip(run("float32"), run("bfloat16")):
        np.testing.assert_array_equal(d16, bf16_bits(d32))


def test_a_bf16_batch_as_torch_is_a_bfloat16_view(rng):
    torch = pytest.importorskip("torch")
    st = TransferStation(2, (3, 3, 1), "bfloat16")
    labels, data = st.zone(0)
    data[:] = bf16_bits(rng.normal(0, 2, data.shape))
    x, y = Batch(0, 0, 2, data, labels).torch()
    assert x.dtype == torch.bfloat16 and x.data_ptr() == data.ctypes.data  # the zone's memory, not a copy
    np.testing.assert_array_equal(x.float().numpy(), bf16_values(data))
