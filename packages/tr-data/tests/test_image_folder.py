"""tr.data.image_folder: the folder index (classes, samples, bad files) and jpeg_info, against JPEGs that
tools/make_image_folder.py makes from scikit-image's photographs and Pillow reads back."""

from __future__ import annotations

import importlib.util
import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError
from tr.data.image_folder import ImageFolderIndex, jpeg_info, scan_image_folder

TOOL = Path(__file__).resolve().parents[3] / "tools" / "make_image_folder.py"
CLASSES, PER_CLASS = 5, 6


def _tool():
    pytest.importorskip("PIL")
    pytest.importorskip("skimage")
    spec = importlib.util.spec_from_file_location("make_image_folder", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imgs") / "train"
    n = _tool().make_image_folder(out, classes=CLASSES, per_class=PER_CLASS, min_side=64, max_side=128, seed=0)
    assert n == CLASSES * PER_CLASS
    return out


@pytest.fixture
def copy(folder, tmp_path) -> Path:
    """A private copy of the generated folder, for tests that break files in it."""
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def _jpeg(folder: Path, cls: str | None = None) -> bytes:
    return sorted((folder / cls).iterdir() if cls else folder.rglob("*.JPEG"))[0].read_bytes()


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


# ---- the index of a good folder -----------------------------------------------------------------------------


def test_scan_gives_sorted_classes_and_samples(folder):
    idx = scan_image_folder(folder)
    assert isinstance(idx, ImageFolderIndex)
    names = sorted(p.name for p in folder.iterdir())
    assert idx.classes == tuple(names) and idx.num_classes == CLASSES and idx.root == folder
    assert len(idx) == CLASSES * PER_CLASS and idx.skipped == ()
    expected = [(p, c) for c, name in enumerate(names) for p in sorted((folder / name).iterdir())]
    assert list(idx.samples) == expected
    assert all(p.parent.name == idx.classes[label] for p, label in idx.samples)


def test_scan_without_check_and_ignores_hidden(copy):
    good = _jpeg(copy, "camera")
    (copy / ".cache").mkdir()  # a hidden folder is no class
    (copy / "camera" / ".DS_Store").write_bytes(b"\0\1")
    (copy / "camera" / "camera_99999.jpg").write_bytes(good[: len(good) // 2])  # truncated
    idx = scan_image_folder(copy, check=False)  # extensions only: the truncated file passes
    assert ".cache" not in idx.classes and len(idx) == CLASSES * PER_CLASS + 1
    with pytest.raises(DataError, match="camera_99999.jpg: no end-of-image marker: truncated"):
        scan_image_folder(copy)


def test_jpeg_info_agrees_with_pillow(folder):
    from PIL import Image

    kinds = set()
    for path in sorted(folder.rglob("*.JPEG")):
        w, h, c = jpeg_info(path.read_bytes(), str(path))
        with Image.open(path) as im:
            assert (w, h) == im.size, path
            assert c == {"L": 1, "RGB": 3}[im.mode], path
            kinds.add((c, bool(im.info.get("progressive"))))
        assert 64 <= min(w, h) <= 128
    assert kinds == {(1, False), (1, True), (3, False), (3, True)}  # gray and colour, baseline and progressive


def test_jpeg_info_errors(folder):
    from PIL import Image

    good = _jpeg(folder)
    jpeg_info(good + b"\0" * 100, "padded.jpg")  # zero padding after the end-of-image marker is fine
    cmyk = io.BytesIO()
    Image.new("CMYK", (8, 8)).save(cmyk, format="JPEG")
    cases = {
        b"": "x.jpg: not a JPEG: no start-of-image marker",
        _png(): "x.jpg: not a JPEG: no start-of-image marker .*PNG",
        good[: len(good) // 2]: "x.jpg: no end-of-image marker: truncated",
        good[:2] + b"\xff\xe0\x00\x01" + good[6:]: "x.jpg: corrupt segment length 1",
        good[:2] + b"\xff\xe0\xff\xff" + good[6:]: "x.jpg: truncated segment at byte 2",
        b"\xff\xd8\xff\xd9": "x.jpg: no frame header",
        good + b"trailer": "x.jpg: 7 bytes after the end-of-image marker",
        cmyk.getvalue(): "x.jpg: CMYK JPEG not supported",
    }
    for data, msg in cases.items():
        with pytest.raises(DataError, match=msg):
            jpeg_info(data, "x.jpg")


# ---- bad folders --------------------------------------------------------------------------------------------


def _break(copy: Path) -> dict[Path, str]:
    """Put one bad file of each kind into the folder: {file: what its reason says}."""
    good = _jpeg(copy, "chelsea")
    bad = {
        copy / "astronaut" / "notes.txt": (b"not an image", "not an image file .*'.txt'"),
        copy / "chelsea" / "chelsea_half.JPEG": (good[: len(good) // 2], "no end-of-image marker: truncated"),
        copy / "coffee" / "coffee_png.jpg": (_png(), "not a JPEG: no start-of-image marker .*PNG"),
        copy / "coins" / "coins_len.jpeg": (good[:2] + b"\xff\xe0\x00\x01" + good[6:], "corrupt segment length"),
    }
    for path, (data, _) in bad.items():
        path.write_bytes(data)
    return {p: reason for p, (_, reason) in bad.items()}


@pytest.mark.parametrize("which", range(4))
def test_each_bad_file_is_a_data_error_naming_it(copy, which):
    bad = _break(copy)
    keep = list(bad)[which]
    for p in bad:
        if p != keep:
            p.unlink()
    with pytest.raises(DataError, match=f"{keep}: {bad[keep]}"):
        scan_image_folder(copy)


def test_first_bad_file_in_order_is_named(copy):
    bad = _break(copy)
    first = min(bad, key=lambda p: (p.parent.name, p.name))  # astronaut/notes.txt, whatever the threads do
    for _ in range(3):
        with pytest.raises(DataError, match=f"{first}: "):
            scan_image_folder(copy)


def test_skip_lists_bad_files_and_keeps_the_rest(copy, folder):
    bad = _break(copy)
    idx = scan_image_folder(copy, on_bad="skip")
    assert [p for p, _ in idx.skipped] == sorted(bad, key=lambda p: (p.parent.name, p.name))
    for p, reason in idx.skipped:
        assert re.search(bad[p], reason), (p, reason)
    good = scan_image_folder(folder)
    assert [(p.relative_to(copy), c) for p, c in idx.samples] == [(p.relative_to(folder), c) for p, c in good.samples]


def test_class_without_valid_images_is_an_error_even_when_skipping(copy):
    for p in (copy / "coins").iterdir():
        p.write_bytes(b"GIF89a")
    with pytest.raises(DataError, match=f"class folder {copy / 'coins'} holds no valid images .*GIF"):
        scan_image_folder(copy, on_bad="skip")


def test_folder_errors(copy, tmp_path):
    with pytest.raises(DataError, match=f"image folder {tmp_path / 'absent'} does not exist"):
        scan_image_folder(tmp_path / "absent")
    some = next((copy / "camera").iterdir())
    with pytest.raises(DataError, match=f"image folder {some} is not a directory"):
        scan_image_folder(some)
    with pytest.raises(DataError, match="no class folders .*holds 6 files: is it a class folder itself"):
        scan_image_folder(copy / "camera")
    (copy / "zebra").mkdir()
    (copy / "zebra" / ".keep").write_bytes(b"")
    for on_bad in ("error", "skip"):
        with pytest.raises(DataError, match=f"class folder {copy / 'zebra'} holds no images"):
            scan_image_folder(copy, on_bad=on_bad)


def test_bad_settings_are_config_errors(folder):
    with pytest.raises(ConfigError, match="on_bad must be one of error, skip, got 'ignore'"):
        scan_image_folder(folder, on_bad="ignore")
    with pytest.raises(ConfigError, match="extensions"):
        scan_image_folder(folder, extensions=("jpg",))


# ---- the generator --------------------------------------------------------------------------------------------


def test_generator_is_deterministic_and_splits(tmp_path):
    tool = _tool()
    kw = dict(classes=2, per_class=2, min_side=32, max_side=48)
    tool.make_image_folder(tmp_path / "a", seed=5, **kw, workers=1)
    tool.make_image_folder(tmp_path / "b", seed=5, **kw, workers=4)
    tool.make_image_folder(tmp_path / "c", seed=6, **kw)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.JPEG"))
    assert len(files) == 4
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    assert any((tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes() for f in files)
    assert tool.make_image_folder(tmp_path / "s", seed=0, val_per_class=1, **kw) == 6
    assert len(scan_image_folder(tmp_path / "s" / "train")) == 4 and len(scan_image_folder(tmp_path / "s" / "val")) == 2
    with pytest.raises(ConfigError, match="not an empty directory"):
        tool.make_image_folder(tmp_path / "a", **kw)


def test_generator_tiles_make_classes_of_grid_cells(tmp_path):
    """--tiles 2: the classes are the quadrants of the first photograph, then of the next; every sample's pixels
    come from its own cell (a crop of the whole cell at crop_area (1, 1) has the cell's mean colour)."""
    tool = _tool()
    n = tool.make_image_folder(tmp_path / "t", classes=5, per_class=1, min_side=32, max_side=32, seed=0, tiles=2,
                               crop_area=(1.0, 1.0))
    assert n == 5
    photos = tool.load_sources(2)
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    first, second = photos[0][0], photos[1][0]
    assert names == sorted([f"{first}_r0c0", f"{first}_r0c1", f"{first}_r1c0", f"{first}_r1c1", f"{second}_r0c0"])
    from PIL import Image

    src = photos[0][1]
    for k in range(4):
        cell = tool.tile_of(src, 2, k)
        (jpeg,) = (tmp_path / "t" / f"{first}_r{k // 2}c{k % 2}").iterdir()
        img = np.asarray(Image.open(jpeg), dtype=np.float64)
        # the whole cell, maybe flipped: its mean colour survives the resize and the JPEG to within a few levels
        assert np.abs(img.mean(axis=(0, 1)) - cell.reshape(-1, img.shape[-1] if img.ndim == 3 else 1).mean(0)).max() < 4


def test_generator_refuses_bad_tiles_and_crop_area(tmp_path):
    tool = _tool()
    with pytest.raises(ConfigError, match="tiles must be >= 1"):
        tool.make_image_folder(tmp_path / "a", tiles=0)
    for area in ((0.0, 0.5), (0.5, 0.4), (0.5, 1.5)):
        with pytest.raises(ConfigError, match="crop_area must satisfy"):
            tool.make_image_folder(tmp_path / "a", crop_area=area)
