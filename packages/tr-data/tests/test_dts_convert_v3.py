"""tr-dts convert: seed DTS v3 files (built here from the seed's layout, python/scripts/make_dataset.py)
converted into tr DTS v4 packs and read back sample by sample; damaged seed files refused by name, with
no file left behind."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tr.core.errors import DataError
from tr.data.dts import DtsDataset, DtsFile, convert
from tr.data.dts.cli import main as cli
from tr.data.dts.format import KIND_JPEG, KIND_RAW

# the seed's 144-byte header, field for field (make_dataset.py's struct format)
SEED = struct.Struct("<4sBBBB8sIIII4sIII4sIIIIIQIQIIIIIfffffffI")
MIB16 = 16 << 20


def raw_v3(images: np.ndarray, labels: np.ndarray, classes: int, train: bool = True, dataset: bytes = b"   MNIST",
           mnist_block_bytes: bool = False) -> bytearray:
    """A seed MNIST/CIFAR file: 256-byte header region, labels (u8), then NHWC images. ``mnist_block_bytes``:
    block_bytes as the seed's make_dataset.py wrote it for MNIST (N x (28 x 28 x 3 + 1))."""
    n, h, w, c = images.shape
    body = labels.astype(np.uint8).tobytes() + images.tobytes()
    block = n * (h * w * 3 + 1) if mnist_block_bytes else len(body)
    head = SEED.pack(b".DTS", 3, 0, 0, 0, dataset, int(train), 0, 0, classes, b"NHWC", w, h, c,
                     b"GRAY" if c == 1 else b" RGB", n, 1, 0, 1, 1, 256 + block, 256, block, block, 0, 0, h * w, n,
                     1.0, 0, 0, 0, 0, 0, 0, zlib.crc32(body))
    return bytearray(head + bytes(256 - SEED.size) + body)


def jpeg_v3(blocks: list[list[tuple[bytes, int]]], level: int, classes: int, block: int = MIB16,
            train: bool = True) -> bytearray:
    """A seed ImageNet file: a one-block header region, then blocks (index LV<level>B, block_id, num_pics,
    offsets, sizes, labels padded to 4 KiB at level 0 / 16 KiB at 1-3; JPEGs 64-byte aligned; every block
    padded to its full size)."""
    index = 4096 if level == 0 else 16384
    body = bytearray(block * len(blocks))
    for i, samples in enumerate(blocks):
        base, off, offs, sizes, labels = i * block, index, [], [], []
        for data, label in samples:
            body[base + off:base + off + len(data)] = data
            offs.append(off)
            sizes.append(len(data))
            labels.append(label)
            off += -(-len(data) // 64) * 64
        assert off <= block
        n = len(samples)
        struct.pack_into(f"<4sII{3 * n}I", body, base, f"LV{level}B".encode(), i, n, *offs, *sizes, *labels)
    n = sum(len(b) for b in blocks)
    head = SEED.pack(b".DTS", 3, 0, 0, 0, b"IMAGENET", int(train), level, 0, classes, b"NHWC", 0, 0, 3, b" RGB", n,
                     1, 0, len(blocks), len(blocks), block * (1 + len(blocks)), block, block * len(blocks), block,
                     index, 64, 0, max(len(b) for b in blocks), 1.0, 0, 0, 0, 0, 0, 0, zlib.crc32(body))
    return bytearray(head) + bytes(block - SEED.size) + body


def fix_crc(raw: bytearray, header_bytes: int) -> bytearray:
    """crc_code recomputed over the body, as the seed's writer does: the damage is then only structural."""
    struct.pack_into("<I", raw, 140, zlib.crc32(raw[header_bytes:]))
    return raw


def tiny_jpegs(n: int, classes: int, seed: int = 0) -> list[tuple[bytes, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(8, 40, 2))
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
        out.append((buf.getvalue(), i % classes))
    return out


def write(path: Path, raw: bytes) -> Path:
    path.write_bytes(bytes(raw))
    return path


def only(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- round trips ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mnist_block_bytes", [False, True])
def test_mnist_like_raw_converts_and_reads_back_every_sample(tmp_path, mnist_block_bytes):
    rng = np.random.default_rng(1)
    sets = {}
    for split, n in (("train", 70), ("val", 30)):
        x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
        y = rng.integers(0, 10, n)
        sets[split] = (x, y)
        old = write(tmp_path / f"mnist_{split}.dts", raw_v3(x, y, 10, split == "train",
                                                             mnist_block_bytes=mnist_block_bytes))
        c = convert(old, tmp_path / "packed" / f"{split}.dts")
        assert (c.split, c.kind, c.samples) == (split, "raw", n)
    for split, (x, y) in sets.items():
        with DtsFile(tmp_path / "packed" / f"{split}.dts") as f:
            h = f.header
            assert (h.kind, h.split, h.dataset, h.num_classes, h.height, h.width, h.channels) == (
                KIND_RAW, split, "MNIST", 10, 28, 28, 1)
            assert h.meta["converted_from"] == "seed DTS 3.0.0" and h.classes == [str(i) for i in range(10)]
            assert f.verify().ok
            images, labels = f.arrays()
        np.testing.assert_array_equal(images, x)
        np.testing.assert_array_equal(labels, y)
    ds = DtsDataset(tmp_path / "packed")  # the pair loads as tr-dts pack's would
    assert ds.name == "mnist" and ds.image_shape == (28, 28, 1)
    np.testing.assert_array_equal(ds.load("val").images, sets["val"][0])


def test_cifar_like_raw_converts(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 100, 40)
    old = write(tmp_path / "cifar100_test.dts", raw_v3(x, y, 100, False, b"CIFAR100"))
    convert(old, tmp_path / "val.dts")
    with DtsFile(tmp_path / "val.dts") as f:
        assert (f.header.dataset, f.header.split, f.header.color) == ("CIFAR100", "val", " RGB")
        images, labels = f.arrays()
    np.testing.assert_array_equal(images, x)
    np.testing.assert_array_equal(labels, y)


@pytest.fixture(scope="module")
def imagenet_v3():
    """A level-0 seed ImageNet pack with the seed's own sizes: a 16 MiB header region, two 16 MiB blocks."""
    samples = tiny_jpegs(23, 7)
    blocks = [samples[:15], samples[15:]]
    return samples, blocks, jpeg_v3(blocks, 0, 7)


def test_imagenet_like_jpeg_pack_converts_and_reads_back_every_sample(tmp_path, imagenet_v3):
    samples, _, raw = imagenet_v3
    old = write(tmp_path / "imagenet_train_lv0.dts", raw)
    c = convert(old, tmp_path / "train.dts")
    assert (c.split, c.kind, c.samples) == ("train", "jpeg", 23)
    with DtsFile(tmp_path / "train.dts") as f:
        h = f.header
        assert (h.kind, h.level, h.dataset, h.num_classes, h.num_samples) == (KIND_JPEG, 0, "IMAGENET", 7, 23)
        got = [(bytes(d), label) for d, label in f.samples()]
    assert got == samples  # the seed's order, byte for byte
    want = np.asarray(Image.open(io.BytesIO(samples[5][0])))
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(got[5][0]))), want)


@pytest.mark.parametrize("level", [1, 3])
def test_levels_1_to_3_keep_their_level(tmp_path, level):
    samples = tiny_jpegs(9, 3, seed=level)
    old = write(tmp_path / "old.dts", jpeg_v3([samples[:4], samples[4:]], level, 3, block=1 << 16, train=False))
    convert(old, tmp_path / "val.dts", block_bytes=1 << 16)
    with DtsFile(tmp_path / "val.dts") as f:
        assert (f.header.level, f.header.split, f.header.meta["level"]) == (level, "val", level)
        assert [(bytes(d), label) for d, label in f.samples()] == samples


# --- damage -------------------------------------------------------------------------------------------------

def _small_jpeg_v3() -> bytearray:
    samples = tiny_jpegs(10, 4, seed=5)
    return jpeg_v3([samples[:6], samples[6:]], 2, 4, block=1 << 16)


def _block_index(raw: bytearray, block: int, field: int, j: int, value: int, block_size: int = 1 << 16) -> None:
    """Set index entry ``j`` of ``field`` (0 offsets, 1 sizes, 2 labels) of block ``block``."""
    base = block_size * (1 + block)
    n = struct.unpack_from("<I", raw, base + 8)[0]
    struct.pack_into("<I", raw, base + 12 + 4 * (field * n + j), value)


def _damaged(name: str) -> tuple[bytearray, str]:
    raw = _small_jpeg_v3()
    hb = 1 << 16
    if name == "bad magic":
        raw[0:4] = b"XDTS"
        return raw, r"not a DTS file \(magic b'XDTS' at byte 0"
    if name == "bad version":
        raw[4] = 2
        return raw, r"DTS version 2\.0\.0\.0 at byte 4 is not the seed's 3\.0\.0\.0"
    if name == "bad crc":
        raw[hb + (1 << 16) + 16384 + 100] ^= 0x40  # a byte of block 1's first JPEG
        return raw, r"body's checksum does not match the header's crc_code"
    if name == "truncated block":
        return raw[:hb + (1 << 16) + 20000], r"truncated in block 1 \(bytes 131072-\)"
    if name == "offset out of block":
        _block_index(raw, 1, 0, 2, (1 << 16) - 64)
        return fix_crc(raw, hb), r"block 1 \(bytes 131072-196608\): sample 2 of the block \(sample 8 of the " \
                                 r"file\) .* lies outside the block's samples"
    if name == "label out of range":
        _block_index(raw, 0, 2, 3, 4)
        return fix_crc(raw, hb), r"block 0 .*: sample 3 of the block .* label 4: its label is outside \[0, 4\)"
    if name == "block id":
        struct.pack_into("<I", raw, hb + (1 << 16) + 4, 0)
        return fix_crc(raw, hb), r"block 1 .*: its header says block_id 0"
    if name == "too many pics":
        struct.pack_into("<I", raw, hb + 8, 1365)
        return fix_crc(raw, hb), r"block 0 .*: num_pics 1365, expected 1-1364"
    if name == "block magic":
        raw[hb:hb + 4] = b"LV0B"
        return fix_crc(raw, hb), r"block 0 .*: magic b'LV0B', expected b'LV2B'"
    if name == "unaligned":
        _block_index(raw, 0, 0, 1, struct.unpack_from("<I", raw, hb + 12 + 4)[0] + 4)
        return fix_crc(raw, hb), r"sample 1 of the block .*: its offset is not a multiple of pic_alignment 64"
    if name == "num_samples":
        struct.pack_into("<I", raw, 52, 11)
        return raw, r"the blocks hold 10 samples, the header's num_samples \(byte 52\) says 11"
    raise AssertionError(name)


DAMAGE = ["bad magic", "bad version", "bad crc", "truncated block", "offset out of block", "label out of range",
          "block id", "too many pics", "block magic", "unaligned", "num_samples"]


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_seed_pack_is_refused_by_name_and_leaves_nothing(tmp_path, name):
    raw, message = _damaged(name)
    old = write(tmp_path / "old.dts", raw)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError, match=message) as e:
        convert(old, out / "train.dts", block_bytes=1 << 16)
    assert str(old) in str(e.value)
    assert only(out) == []  # no NEW, no temporary file


def test_the_16_mib_pack_damaged_after_its_last_sample_is_refused(tmp_path, imagenet_v3):
    raw = bytearray(imagenet_v3[2])
    raw[-1] ^= 1  # the last block's zero padding: only the checksum sees it
    old = write(tmp_path / "old.dts", raw)
    with pytest.raises(DataError, match="crc_code"):
        convert(old, tmp_path / "train.dts")
    assert only(tmp_path) == ["old.dts"]


def test_damaged_raw_files_are_refused_by_name(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (12, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, 12)
    good = raw_v3(x, y, 10)
    cases = {
        "truncated": (good[:-5], r"the header's 12 labels and 28x28x1 images take 9676: truncated"),
        "label": (fix_crc(_set(good, 256 + 7, 10), 256), r"sample 7's label 10 \(byte 263\) is outside \[0, 10\)"),
        "crc": (_set(good, 2000, good[2000] ^ 1), "crc_code"),
        "color": (_put(good, 48, b" RGB"), r"num_channels \(byte 44\) is 1: color_type ' RGB' has 3"),
        "padding": (_set(good, 200, 1), r"padding is not zero at byte 200"),
        "volumes": (_put(good, 56, struct.pack("<I", 2)), r"volume 0 of 2"),
        "total_bytes": (_put(good, 72, struct.pack("<Q", 99)), r"total_bytes \(byte 72\) is 99"),
    }
    for what, (raw, message) in cases.items():
        old = write(tmp_path / f"{what}.dts", raw)
        with pytest.raises(DataError, match=message):
            convert(old, tmp_path / "new" / "train.dts")
    assert only(tmp_path / "new") == []


def _set(raw: bytearray, at: int, value: int) -> bytearray:
    out = bytearray(raw)
    out[at] = value
    return out


def _put(raw: bytearray, at: int, data: bytes) -> bytearray:
    out = bytearray(raw)
    out[at:at + len(data)] = data
    return out


# --- the target ------------------------------------------------------------------------------------------

def test_an_existing_new_is_never_replaced(tmp_path):
    x = np.zeros((3, 28, 28, 1), np.uint8)
    old = write(tmp_path / "old.dts", raw_v3(x, np.zeros(3), 10))
    new = write(tmp_path / "train.dts", b"the user's file")
    with pytest.raises(DataError, match="exists"):
        convert(old, new)
    assert new.read_bytes() == b"the user's file"
    assert only(tmp_path) == ["old.dts", "train.dts"]


def test_a_tr_pack_is_not_converted_again(tmp_path):
    x = np.zeros((3, 28, 28, 1), np.uint8)
    convert(write(tmp_path / "old.dts", raw_v3(x, np.zeros(3), 10)), tmp_path / "train.dts")
    with pytest.raises(DataError, match=r"already a tr DTS file \(version 4\)"):
        convert(tmp_path / "train.dts", tmp_path / "again.dts")


def test_cli_convert(tmp_path, capsys):
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (5, 28, 28, 1), dtype=np.uint8)
    old = write(tmp_path / "mnist_test.dts", raw_v3(x, np.arange(5), 10, train=False))
    assert cli(["convert", str(old), str(tmp_path / "p" / "val.dts")]) == 0
    assert "5 RAW samples (val split)" in capsys.readouterr().out
    assert cli(["convert", str(old), str(tmp_path / "p" / "val.dts")]) == 1
    assert "exists" in capsys.readouterr().err
    bad = write(tmp_path / "bad.dts", _damaged("label out of range")[0])
    assert cli(["convert", str(bad), str(tmp_path / "p" / "train.dts")]) == 1
    assert "its label is outside [0, 4)" in capsys.readouterr().err
    assert only(tmp_path / "p") == ["val.dts"]


# --- fuzzing ------------------------------------------------------------------------------------------------

def _read_all(path: Path) -> int:
    from tr.data.dts import V3File

    with V3File(path) as f:
        return sum(len(d) for d, _ in f.samples())


def test_fuzz_v3_reader(tmp_path, fuzz):
    """Seeded mutations of small seed files (RAW and JPEG, the header region first): each reads whole or is
    a DataError naming the file, never another exception. Only the informational fields (max_pic_area,
    compression_ratio, normalize_mean/std) are under no check, so few mutations load."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 256, (6, 5, 4, 3), dtype=np.uint8)
    seeds = [(write(tmp_path / "raw.dts", raw_v3(x, rng.integers(0, 4, 6), 4, dataset=b" CIFAR10")), None),
             (write(tmp_path / "jpeg.dts", _small_jpeg_v3()), None)]
    seeds = [(p, p.read_bytes()) for p, _ in seeds]
    out = fuzz("dts v3", seeds, _read_all, 600, seed=12, header=256)
    assert out.rejected > 0.8 * out.cases
