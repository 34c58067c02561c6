"""Lossless re-coding of progressive JPEGs as baseline (tr-dts pack --baseline): the same pixels from tr's and
Pillow's decoders, baseline files untouched, damage named, packs that carry it, and a fuzzed recoder (the ASan
suite runs this file)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError
from tr.data import DtsImages, _native
from tr.data.dts import DtsFile, pack
from tr.data.dts.cli import main as cli
from tr.data.dts.levels import to_baseline

PIL = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.skipif(not _native.jpeg_available(), reason="tr-data built without libjpeg-turbo")


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth content with edges (what photographs have), not noise: JPEG's coefficients then span a range."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / (7 + c) + y / (11 + 3 * c) + c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def _jpeg(pixels: np.ndarray, **opts) -> bytes:
    buf = io.BytesIO()
    im = PIL.fromarray(pixels if pixels.shape[-1] == 3 else pixels[..., 0])
    im.save(buf, "JPEG", **opts)
    return buf.getvalue()


CASES = {
    "4:2:0 progressive": dict(shape=(61, 97), quality=90, progressive=True),
    "4:4:4 progressive": dict(shape=(40, 33), quality=75, progressive=True, subsampling=0),
    "4:2:2 progressive": dict(shape=(17, 130), quality=95, progressive=True, subsampling=1),
    "gray progressive": dict(shape=(50, 50), quality=85, progressive=True, gray=True),
    "progressive with restart markers and EXIF": dict(shape=(64, 80), quality=80, progressive=True,
                                                      restart_marker_rows=1, exif=b"Exif\x00\x00MM\x00*"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_progressive_file_becomes_baseline_with_the_same_pixels(case):
    c = dict(CASES[case])
    h, w = c.pop("shape")
    gray = c.pop("gray", False)
    px = _photo(h, w, seed=len(case))
    src = _jpeg(px[..., :1] if gray else px, **c)
    assert PIL.open(io.BytesIO(src)).info.get("progressive") and _native.jpeg_needs_baseline(src)

    out = to_baseline(src, "a.jpg")
    assert out != src and not _native.jpeg_needs_baseline(out)
    im = PIL.open(io.BytesIO(out))
    assert not im.info.get("progressive") and im.size == (w, h) and im.mode == ("L" if gray else "RGB")
    assert b"Exif" not in out  # APPn markers are dropped
    np.testing.assert_array_equal(_native.decode_jpeg(out), _native.decode_jpeg(src))  # tr's decoder
    np.testing.assert_array_equal(_native.decode_jpeg(out, True), _native.decode_jpeg(src, True))
    np.testing.assert_array_equal(np.asarray(im), np.asarray(PIL.open(io.BytesIO(src))))  # and Pillow's
    for scale in (1, 2, 4):  # the DCT-scaled decodes read the same coefficients
        np.testing.assert_array_equal(_native.decode_jpeg(out, False, scale), _native.decode_jpeg(src, False, scale))


def test_a_baseline_file_is_kept_as_it_is():
    src = _jpeg(_photo(30, 40, 1), quality=90)
    assert not _native.jpeg_needs_baseline(src)
    assert to_baseline(src, "b.jpg") is src


def test_damage_is_named_with_the_file():
    src = _jpeg(_photo(64, 64, 2), quality=90, progressive=True)
    with pytest.raises(DataError, match=r"cut\.jpg: corrupt JPEG"):
        to_baseline(src[: len(src) // 2], "cut.jpg")
    with pytest.raises(DataError, match=r"none\.jpg: (corrupt JPEG|not a JPEG)"):
        to_baseline(b"\xff\xd8\xff\xe0 not a real header", "none.jpg")
    with pytest.raises(DataError, match=r"text\.jpg: corrupt JPEG"):
        to_baseline(b"plain text, not an image", "text.jpg")


def _decoded_by_source(jpeg_folder: Path, split: str) -> dict[tuple[int, int, int, bytes], int]:
    """The source files' decodes (shape + bytes) with their labels, and how many are progressive."""
    from tr.data.image_folder import scan_image_folder

    out = {}
    for p, label in scan_image_folder(jpeg_folder / split).samples:
        a = _native.decode_jpeg(p.read_bytes())
        out[(*a.shape, a.tobytes())] = label
    return out


@pytest.mark.parametrize("level", [0, 2])
def test_a_baseline_pack_decodes_to_the_source_pixels(jpeg_folder, tmp_path, level):
    progressive = sum(_native.jpeg_needs_baseline(p.read_bytes()) for p in jpeg_folder.glob("train/*/*.JPEG"))
    assert progressive > 0  # the fixture folder has progressive files (tools/make_image_folder.py)
    done = pack(jpeg_folder, tmp_path / "p", level=level, workers=2, baseline=True)
    assert done[0].recoded == progressive
    for split in ("train", "val"):
        want = _decoded_by_source(jpeg_folder, split)
        with DtsFile(tmp_path / "p" / f"{split}.dts") as f:
            assert f.header.meta["baseline"] is True
            got = {}
            for data, label in f.samples():
                assert not _native.jpeg_needs_baseline(bytes(data))
                a = _native.decode_jpeg(bytes(data))
                got[(*a.shape, a.tobytes())] = label
        assert got == want
    DtsImages(tmp_path / "p").load("train")  # every block's checksums hold


def test_without_baseline_the_pack_keeps_the_progressive_files(jpeg_folder, tmp_path):
    done = pack(jpeg_folder, tmp_path / "p")
    assert done[0].recoded == 0
    with DtsFile(tmp_path / "p" / "train.dts") as f:
        assert f.header.meta["baseline"] is False
        assert any(_native.jpeg_needs_baseline(bytes(d)) for d, _ in f.samples())


def test_baseline_is_refused_where_it_means_nothing(mnist_dir, tmp_path):
    with pytest.raises(ConfigError, match="baseline re-codes JPEG files; mnist is packed RAW"):
        pack(mnist_dir, tmp_path / "m", baseline=True)
    with pytest.raises(ConfigError, match="baseline must be True or False"):
        pack(mnist_dir, tmp_path / "m", baseline="yes")
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


def test_the_command_line_recodes_and_says_so(jpeg_folder, tmp_path, capsys):
    assert cli(["pack", str(jpeg_folder), str(tmp_path / "p"), "--baseline", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "progressive files re-coded as baseline" in out
    assert cli(["info", str(tmp_path / "p" / "train.dts"), "--json"]) == 0
    assert '"baseline": true' in capsys.readouterr().out


def test_the_recoder_survives_mutated_jpegs(tmp_path, fuzz):
    """Mutated progressive files re-code or raise a DataError, never crash or hang (ASan runs this file)."""
    seeds = []
    for i, c in enumerate(("4:2:0 progressive", "gray progressive")):
        opts = dict(CASES[c])
        h, w = opts.pop("shape")
        gray = opts.pop("gray", False)
        px = _photo(h, w, seed=i)
        raw = _jpeg(px[..., :1] if gray else px, **opts)
        (tmp_path / f"s{i}.jpg").write_bytes(raw)
        seeds.append((tmp_path / f"s{i}.jpg", raw))
    out = fuzz("jpeg recode", seeds, lambda p: _native.jpeg_recode_baseline(p.read_bytes()), 300, seed=31,
               names=lambda p: ("JPEG",), header=400)
    assert out.cases == 300 and out.rejected > 0
