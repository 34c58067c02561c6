"""examples/imagenet_resnet50.py, the ResNet-50 recipe, on the CPU on a small folder of real photographs
(tools/make_image_folder.py): one epoch writes its metrics and checkpoint; resuming it to train a second epoch
gives the bytes of an unbroken two-epoch run; bad flags are refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from photos import make_photos

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples import imagenet_resnet50 as recipe  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory, "recipe_photos", classes=3, per_class=8, val_per_class=4, min_side=72,
                       max_side=96)


def _args(photos: Path, out: Path, epochs: int, *more: str) -> list[str]:
    return ["--data", str(photos), "--device", "cpu", "--epochs", str(epochs), "--warmup-epochs", "1", "--batch",
            "8", "--resolution", "64", "--val-resolution", "64", "--workers", "2", "--amp", "off", "--out",
            str(out), *more]


def test_one_epoch_then_a_resumed_second_is_the_unbroken_run(photos, tmp_path, capsys):
    broken, unbroken = tmp_path / "broken", tmp_path / "unbroken"
    assert recipe.main(_args(photos, broken, 1)) == 0
    assert "resnet50: best top-1" in capsys.readouterr().out
    rows = (broken / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2 and (broken / "checkpoints" / "epoch-0001" / "state.safetensors").is_file()
    assert recipe.main(_args(photos, broken, 2, "--resume")) == 0
    assert recipe.main(_args(photos, unbroken, 2)) == 0
    a = (broken / "checkpoints" / "epoch-0002" / "state.safetensors").read_bytes()
    b = (unbroken / "checkpoints" / "epoch-0002" / "state.safetensors").read_bytes()
    assert a == b


def test_bad_flags_are_refused_by_name(photos, tmp_path):
    with pytest.raises(ConfigError, match="--resume needs --out"):
        recipe.parse(["--data", str(photos), "--resume"])
    with pytest.raises(ConfigError, match="--val-resolution 32 is below --resolution 64"):
        recipe.parse(["--data", str(photos), "--resolution", "64", "--val-resolution", "32"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        recipe.main(_args(photos, tmp_path / "empty", 1, "--resume"))
