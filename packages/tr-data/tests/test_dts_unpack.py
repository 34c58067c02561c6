"""tr-dts unpack: a pack back into files (class folders of the packed JPEG bytes, or an .npz of RAW samples),
checked as it is read, written under a temporary name and renamed, refused over an existing non-empty OUT."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data.dts import DtsWriter, pack, raw_header, unpack
from tr.data.dts.cli import main as cli


def _by_class(root: Path) -> dict[str, Counter]:
    return {d.name: Counter(p.read_bytes() for p in d.iterdir()) for d in sorted(root.iterdir()) if d.is_dir()}


def test_a_jpeg_pack_unpacks_to_its_class_folders(jpeg_folder, tmp_path):
    from tr.data import ImageFolder

    pack(jpeg_folder, tmp_path / "p")
    for split in ("train", "val"):
        n = unpack(tmp_path / "p" / f"{split}.dts", tmp_path / split)
        assert _by_class(tmp_path / split) == _by_class(jpeg_folder / split)
        assert n == sum(len(c) for c in _by_class(jpeg_folder / split).values())
        assert all(p.name.startswith(f"{split}_") for p in (tmp_path / split).rglob("*.JPEG"))
    assert ImageFolder(tmp_path / "train").classes == ImageFolder(jpeg_folder / "train").classes
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_a_raw_pack_unpacks_to_an_npz(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (50, 4, 5, 3), dtype=np.uint8)
    y = rng.integers(0, 3, 50)
    with DtsWriter(tmp_path / "t.dts", raw_header("TEST", "val", (4, 5, 3), 3, {"classes": ["a", "b", "c"]},
                                                   8192)) as w:
        for a, b in zip(x, y):
            w.add(a, int(b))
    assert unpack(tmp_path / "t.dts", tmp_path / "out") == 50
    z = np.load(tmp_path / "out" / "val.npz")
    np.testing.assert_array_equal(z["images"], x)
    np.testing.assert_array_equal(z["labels"], y)


def test_damage_stops_the_unpack_and_leaves_nothing(jpeg_folder, tmp_path):
    pack(jpeg_folder, tmp_path / "p", block_bytes=64 << 10)
    raw = bytearray((tmp_path / "p" / "train.dts").read_bytes())
    raw[-100] ^= 0xFF  # inside the last block's samples
    (tmp_path / "bad.dts").write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"bad\.dts.*block"):
        unpack(tmp_path / "bad.dts", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_existing_output_is_refused_and_left_alone(jpeg_folder, tmp_path):
    pack(jpeg_folder, tmp_path / "p")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(DataError, match="exists and is not an empty directory"):
        unpack(tmp_path / "p" / "train.dts", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    (tmp_path / "empty").mkdir()
    assert unpack(tmp_path / "p" / "train.dts", tmp_path / "empty") > 0  # an empty directory is taken


def test_the_command_line_unpacks(jpeg_folder, tmp_path, capsys):
    pack(jpeg_folder, tmp_path / "p")
    assert cli(["unpack", str(tmp_path / "p" / "train.dts"), str(tmp_path / "u")]) == 0
    assert "samples from" in capsys.readouterr().out
    assert cli(["unpack", str(tmp_path / "p" / "missing.dts"), str(tmp_path / "v")]) == 1
    assert "missing.dts" in capsys.readouterr().err
