"""DTS packs: round trips (MNIST, CIFAR, JPEG folders at every level), damage named at the file, block and
sample, header fields and metadata no writer writes, atomic writes, the tr-dts command line, and a fuzzed
reader."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dts_mutations import edited, fake_jpeg_pack

from tr.core.errors import ConfigError, DataError
from tr.data.dts import DtsDataset, DtsFile, DtsWriter, pack, raw_header
from tr.data.dts.cli import main as cli
from tr.data.dts.format import HEADER, VERSION, crc32


def _raw_pack(path: Path, n: int = 300, shape=(5, 7, 3), classes: int = 4, block: int = 16384, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    y = rng.integers(0, classes, n)
    with DtsWriter(path, raw_header("TEST", "train", shape, classes, {"classes": list("abcd")[:classes]},
                                    block)) as w:
        for a, b in zip(x, y):
            w.add(a, int(b))
    return x, y


# --- round trips ------------------------------------------------------------------------------------------

def test_mnist_packs_and_reads_back_the_same_bytes_and_labels(mnist_dir, tmp_path):
    from tr.data import MNIST

    done = pack(mnist_dir, tmp_path / "p")
    assert [p.path.name for p in done] == ["train.dts", "val.dts"]
    ds = DtsDataset(tmp_path / "p")
    assert ds.num_classes == 10 and ds.image_shape == (28, 28, 1)
    for split in ("train", "val"):
        want, got = MNIST(mnist_dir).load(split), ds.load(split)
        np.testing.assert_array_equal(got.images, want.images)
        np.testing.assert_array_equal(got.labels, want.labels)


def test_cifar_packs_and_reads_back(tmp_path, cifar_records):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cifar import write_py

    from tr.data import CIFAR10

    cifar_records(CIFAR10, train=3, val=2)
    rng = np.random.default_rng(3)
    d = tmp_path / "src" / "cifar-10-batches-py"
    for i in range(1, 6):
        write_py(d, f"data_batch_{i}", rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, 3))
    write_py(d, "test_batch", rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8), np.array([9, 0]))
    pack(tmp_path / "src", tmp_path / "p")
    for split in ("train", "val"):
        want, got = CIFAR10(tmp_path / "src").load(split), DtsDataset(tmp_path / "p").load(split)
        np.testing.assert_array_equal(got.images, want.images)
        np.testing.assert_array_equal(got.labels, want.labels)


def test_raw_samples_span_blocks_and_come_back_in_order(tmp_path):
    x, y = _raw_pack(tmp_path / "t.dts")
    with DtsFile(tmp_path / "t.dts") as f:
        assert f.num_blocks > 3 and len(f) == 300 and f.header.version == VERSION
        images, labels = f.arrays()
        np.testing.assert_array_equal(images, x)
        np.testing.assert_array_equal(labels, y)
        assert [bytes(s) for s, _ in f.samples()] == [a.tobytes() for a in x]
        assert f.verify().ok


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_a_jpeg_folder_packs_with_its_files_and_labels(jpeg_folder, tmp_path, level):
    from PIL import Image

    from tr.data.image_folder import scan_image_folder

    done = pack(jpeg_folder, tmp_path / "p", level=level, workers=3)
    assert [p.path.name for p in done] == ["train.dts", "val.dts"]
    for split in ("train", "val"):
        index = scan_image_folder(jpeg_folder / split)
        want = {(p.read_bytes(), label) for p, label in index.samples}
        with DtsFile(tmp_path / "p" / f"{split}.dts") as f:
            assert f.header.classes == list(index.classes) and f.header.level == level
            got = [(bytes(s), label) for s, label in f.samples()]
        assert len(got) == len(index.samples)
        assert sorted(label for _, label in got) == sorted(label for _, label in want)
        if level < 3:  # images within 400 px keep their bytes at levels 0-2
            assert set(got) == want
        else:  # re-encoded at quality 80: same size and mode, pixels close
            sizes = sorted((Image.open(p).size, label) for p, label in index.samples)
            import io

            assert sorted((Image.open(io.BytesIO(d)).size, label) for d, label in got) == sizes


def test_level_1_resizes_a_large_image_to_a_400_pixel_short_side(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    import io

    from tr.data.dts.levels import encode_level

    buf = io.BytesIO()
    pil.fromarray(np.random.default_rng(0).integers(0, 256, (500, 800, 3), dtype=np.uint8)).save(buf, "JPEG")
    small = pil.open(io.BytesIO(encode_level(buf.getvalue(), 1, "x.jpg")))
    assert small.size == (640, 400)
    buf = io.BytesIO()
    pil.fromarray(np.zeros((420, 560, 3), np.uint8)).save(buf, "JPEG")
    assert pil.open(io.BytesIO(encode_level(buf.getvalue(), 2, "y.jpg"))).size == (560, 400)  # short side cropped
    with pytest.raises(DataError, match="z.jpg: cannot decode"):
        encode_level(b"\xff\xd8 not really", 1, "z.jpg")


# --- damage -----------------------------------------------------------------------------------------------

def _damaged(tmp_path, edit) -> Path:
    _raw_pack(tmp_path / "t.dts")
    raw = bytearray((tmp_path / "t.dts").read_bytes())
    (tmp_path / "bad.dts").write_bytes(bytes(edit(raw)))
    return tmp_path / "bad.dts"


def _header_bytes(tmp_path) -> int:
    with DtsFile(tmp_path / "t.dts") as f:
        return f.header.header_bytes, f.header.block_bytes, f.header.block_header_bytes


def test_a_flipped_byte_in_block_k_names_the_block_and_its_samples(tmp_path):
    _raw_pack(tmp_path / "t.dts")
    hb, bb, bhb = _header_bytes(tmp_path)

    def flip(raw):
        raw[hb + 2 * bb + bhb + 100] ^= 0x40  # a sample byte of block 2
        return raw

    path = _damaged(tmp_path, flip)
    with DtsFile(path) as f:
        f.block(1)  # the others are fine
        with pytest.raises(DataError, match=r"bad.dts: block 2 \(bytes .*samples' checksum.* \(\d+-\d+\) is damaged"):
            list(f.blocks())
        rep = f.verify()
    assert not rep.ok and len(rep.errors) == 1 and "block 2" in rep.errors[0]
    assert cli(["verify", str(path)]) == 1 and cli(["verify", str(tmp_path / "t.dts")]) == 0


def test_a_damaged_block_index_is_named(tmp_path):
    _raw_pack(tmp_path / "t.dts")
    hb, bb, _ = _header_bytes(tmp_path)

    def flip(raw):
        raw[hb + bb + 40] ^= 1  # block 1's index
        return raw

    with DtsFile(_damaged(tmp_path, flip)) as f, pytest.raises(DataError, match="block 1 .*header's checksum"):
        f.block(1)


@pytest.mark.parametrize("edit,message", [
    (lambda raw: raw[:len(raw) - 10], "truncated"),
    (lambda raw: raw[:5000], "truncated"),
    (lambda raw: raw[:100], "too short for a DTS header"),
    (lambda raw: raw + b"x", "bytes appended"),
    (lambda raw: b"JUNK" + raw[4:], "not a DTS file"),
    (lambda raw: raw[:40] + bytes([raw[40] ^ 1]) + raw[41:], "header's checksum does not match"),
    (lambda raw: b"", "empty file"),
])
def test_damaged_files_are_refused_naming_the_file(tmp_path, edit, message):
    path = _damaged(tmp_path, edit)
    with pytest.raises(DataError, match=f"bad.dts: .*{message}"):
        DtsFile(path)
    assert cli(["verify", str(path)]) == 1


def test_a_newer_version_is_refused(tmp_path):
    def newer(raw):
        raw[4] = VERSION[0] + 1
        region = bytearray(raw[:4096])
        struct.pack_into("<I", region, HEADER.size - 4, 0)
        struct.pack_into("<I", raw, HEADER.size - 4, crc32(region))
        return raw

    with pytest.raises(DataError, match=r"version 5\.0\.0 is newer than this reader's 4\.x"):
        DtsFile(_damaged(tmp_path, newer))


def test_missing_paths_and_bad_settings_are_clear(tmp_path):
    with pytest.raises(DataError, match="nope.dts: no such DTS file"):
        DtsFile(tmp_path / "nope.dts")
    with pytest.raises(DataError, match="no such file or directory"):
        pack(tmp_path / "nothing", tmp_path / "out")
    with pytest.raises(ConfigError, match="level must be 0, 1, 2 or 3"):
        pack(tmp_path, tmp_path / "out", level=4)
    with pytest.raises(DataError, match="train.dts: no such DTS file"):
        DtsDataset(tmp_path)


# --- header, metadata and index checks (cases of test_fuzz_dts.py) ---------------------------------------------

@pytest.mark.parametrize("meta, why", [
    ({"classes": list("abc")}, r"'classes' names 3 classes, the header says 4"),
    ({"classes": list("abcde")}, r"'classes' names 5 classes, the header says 4"),  # tr-dts info: IndexError
    ({"classes": list("abad")}, r"'classes' names 'a' more than once"),
    ({"classes": ["a", "", "c", "d"]}, r"'classes' item 1 is '', expected a class name \(a non-empty string\)"),
    ({"classes": list("abcd"), "skipped": 3}, r"'skipped' is an integer \(3\), expected an array"),  # info: TypeError
    ({"classes": list("abcd"), "level": True}, r"'level' is a boolean \(True\), expected an integer"),
    ({"dataset": ["mnist"]}, r"'dataset' is an array \(\['mnist'\]\), expected a string"),
])
def test_metadata_must_be_what_the_readers_take_it_for(tmp_path, meta, why):
    path = edited(tmp_path, _raw_pack, lambda p: p.set_meta(json.dumps(meta).encode()))
    with pytest.raises(DataError, match=rf"p/train\.dts: the header's metadata {why}"):
        DtsFile(path)
    assert cli(["info", str(path)]) == 1
    with pytest.raises(ConfigError, match=rf"a DTS header's metadata {why}"):  # what no reader takes, no writer writes
        DtsWriter(tmp_path / "w.dts", raw_header("TEST", "train", (5, 7, 3), 4, meta))
    assert not (tmp_path / "w.dts").exists()


def test_metadata_that_json_reads_but_python_refuses_is_a_data_error(tmp_path):
    # a 5000-digit integer: json.loads raises a plain ValueError (Python's digit limit), which used to escape
    path = edited(tmp_path, _raw_pack, lambda p: p.set_meta(b'{"n": ' + b"7" * 5000 + b"}"))
    with pytest.raises(DataError, match=r"train\.dts: the header's metadata is not JSON: Exceeds the limit"):
        DtsFile(path)


def test_the_writer_takes_metadata_as_json_will_read_it(tmp_path):
    with DtsWriter(tmp_path / "t.dts", raw_header("T", "train", (2, 2, 1), 2, {"classes": ("a", "b")})) as w:
        w.add(bytes(4), 1)
    assert DtsFile(tmp_path / "t.dts").header.classes == ["a", "b"]
    with pytest.raises(ConfigError, match=r"a DTS header's metadata is not JSON: .*set is not JSON serializable"):
        DtsWriter(tmp_path / "u.dts", raw_header("T", "train", (2, 2, 1), 2, {"classes": {"a", "b"}}))


@pytest.mark.parametrize("shape", [(2, 2, 65), (1, 2**20 + 1, 1), (0, 2, 1)])
def test_the_writer_refuses_a_raw_shape_the_reader_would(tmp_path, shape):
    with pytest.raises(ConfigError, match=r"a RAW DTS needs the sample shape \(sides in \[1, 1048576\], channels in "
                                          rf"\[1, 64\]\), got {shape[0]}x{shape[1]}x{shape[2]}"):
        DtsWriter(tmp_path / "t.dts", raw_header("T", "train", shape, 2, block_bytes=4 << 20))


@pytest.mark.parametrize("field, value, why", [
    ("alignment", 24, r"sample alignment 24 is not a power of two"),
    ("max_pics", 0, r"max_pics_per_block is 0: a block holds at least one sample"),
    ("block_header_bytes", 24 + 12 * 97, r"block_header_bytes 1188 cannot hold a block's fields and the index of "
                                         r"max_pics_per_block 98 samples \(24 \+ 12 x 98 bytes\)"),
    ("block_bytes", 4096, r"block_bytes 4096 leave no room for samples after the block_header_bytes 4096"),
    ("channels", 65, r"RAW sample channels 65 is outside \[1, 64\]"),
    ("width", 0, r"RAW sample width 0 is outside \[1, 1048576\]"),
    ("width", 4000, r"RAW samples of 5x4000x3 \(60000 bytes\) do not fit a block \(12288 bytes after its header\)"),
    ("total_blocks", 1, r"num_samples 300 is more than its 1 blocks of at most 98 samples hold"),
    ("height", 6, r"num_samples 300 samples of at least 126 bytes need 37800, the file holds \d+ besides its headers"),
])
def test_header_fields_no_writer_writes_are_refused_naming_field_and_value(tmp_path, field, value, why):
    path = edited(tmp_path, _raw_pack, lambda p: p.set(field, value))
    with pytest.raises(DataError, match=rf"p/train\.dts: the header's {why}"):
        DtsFile(path)


def test_a_jpeg_count_past_the_file_s_bytes_is_refused_at_open(tmp_path):
    path = edited(tmp_path, fake_jpeg_pack, lambda p: p.set("num_samples", 1000))
    with pytest.raises(DataError, match=r"train\.dts: the header's num_samples 1000 samples of at least 1 bytes "
                                        r"need 1000, the file holds \d+ besides its headers"):
        DtsFile(path)


@pytest.mark.parametrize("row, value, why", [
    (2, 9, r"label 9: its label is outside \[0, 4\)"),
    (1, 104, r"size 104, label \d: a RAW sample is 105 bytes"),
    (1, 0, r"size 0, label \d: it is empty \(0 bytes\)"),
    (0, 4100, r"offset 4100, .*: its offset is not a multiple of the alignment 16"),
    (0, 16000, r"offset 16000, .*: it lies outside the block's samples \(bytes 4096-\d+\)"),
])
def test_a_bad_index_entry_is_named_by_block_and_sample(tmp_path, row, value, why):
    def edit(p):
        idx = p.index(2)
        idx[row, 5] = value
        p.set_index(2, idx)

    path = edited(tmp_path, _raw_pack, edit)
    with DtsFile(path) as f:
        first = len(f.block(0)) + len(f.block(1))
        want = (rf"train\.dts: block 2 \(bytes \d+-\d+\): sample 5 of the block \(sample {first + 5} of the file\) "
                rf".*{why}")
        with pytest.raises(DataError, match=want):
            f.arrays()
        assert re.search(want, f.verify().errors[0]) and len(f.verify().errors) == 1
        with pytest.raises(DataError, match=r"block 2 \(bytes \d+-\d+\): sample 5 of the block has"):
            f.block(2)  # alone: its place in the file is not known


def test_a_dts_pack_and_its_folder_say_where_a_sample_lies(jpeg_folder, tmp_path):
    from tr.data import DtsImages, ImageFolder

    fake_jpeg_pack(tmp_path / "train.dts", n=10, size=10000)  # 4 samples a block
    ds = DtsImages(tmp_path)
    ds.load("train")
    assert [ds.describe_sample("train", i).split(": ", 1)[1] for i in (0, 3, 4, 9)] == [
        "block 0, sample 0 of the block", "block 0, sample 3 of the block", "block 1, sample 0 of the block",
        "block 2, sample 1 of the block"]
    assert ds.describe_sample("train", 4).startswith(f"{tmp_path / 'train.dts'}: ")
    folder = ImageFolder(jpeg_folder)
    assert folder.describe_sample("val", 1) == str(folder.index("val").samples[1][0])


# --- atomic writes ----------------------------------------------------------------------------------------

def test_a_failed_pack_leaves_the_previous_file_and_no_temporary(tmp_path):
    x, _ = _raw_pack(tmp_path / "t.dts")
    before = (tmp_path / "t.dts").read_bytes()
    with pytest.raises(DataError, match="sample 3: label 9 is outside"), \
            DtsWriter(tmp_path / "t.dts", raw_header("TEST", "train", (5, 7, 3), 4)) as w:
        for i in range(10):
            w.add(x[i], 9 if i == 3 else 0)
    assert (tmp_path / "t.dts").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.dts"]
    with pytest.raises(DataError, match="30 bytes, the RAW DTS holds samples of 105"), \
            DtsWriter(tmp_path / "u.dts", raw_header("TEST", "train", (5, 7, 3), 4)) as w:
        w.add(b"x" * 30, 0)
    assert not (tmp_path / "u.dts").exists()


# --- the command line -------------------------------------------------------------------------------------

def test_the_command_line_packs_describes_and_verifies(mnist_dir, tmp_path, capsys):
    assert cli(["pack", str(mnist_dir), str(tmp_path / "p")]) == 0
    assert cli(["info", str(tmp_path / "p" / "val.dts"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.split("packed in")[-1].split("\n", 1)[1])
    assert info["samples"] == 10000 and info["classes"] == 10 and sum(info["per_class"].values()) == 10000
    assert cli(["verify", str(tmp_path / "p" / "train.dts"), str(tmp_path / "p" / "val.dts")]) == 0
    assert cli(["pack", str(tmp_path / "missing"), str(tmp_path / "q")]) == 1
    assert "missing: no such file or directory" in capsys.readouterr().err
    run = subprocess.run([sys.executable, "-m", "tr.data.dts.cli", "pack", str(mnist_dir), "x", "--level", "7"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "invalid choice: 7" in run.stderr


# --- fuzzing ----------------------------------------------------------------------------------------------

def test_the_reader_survives_mutated_files(tmp_path, fuzz):
    _raw_pack(tmp_path / "t.dts", n=60, block=8192)
    raw = (tmp_path / "t.dts").read_bytes()

    def load(p: Path) -> None:
        with DtsFile(p) as f:
            f.arrays()

    out = fuzz("dts raw", [(tmp_path / "t.dts", raw)], load, 300, seed=23, header=256)
    assert out.cases == 300 and out.loaded < 300
