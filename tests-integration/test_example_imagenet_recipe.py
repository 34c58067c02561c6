"""examples/imagenet_resnet50.py, the ResNet-50 recipe, on the CPU on a small folder of real photographs
(tools/make_image_folder.py), every option on (Mixup/CutMix, TrivialAugmentWide, EMA, progressive resizing from 32
to 64 px): one epoch writes its metrics and checkpoint; a run resumed across the resolution switch gives the bytes of
the unbroken run; bad flags are refused by name."""

from __future__ import annotations

import shutil
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
            "8", "--resolution", "64", "--workers", "2", "--amp", "off", "--out", str(out), *more]


def test_one_epoch_writes_its_metrics_and_checkpoint(photos, tmp_path, capsys):
    assert recipe.main(_args(photos, tmp_path / "run", 1)) == 0
    assert "resnet50: best top-1" in capsys.readouterr().out
    assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == 2  # header and epoch 1
    assert (tmp_path / "run" / "checkpoints" / "epoch-0001" / "state.safetensors").is_file()


def test_a_resume_across_the_resolution_switch_is_the_unbroken_run(photos, tmp_path):
    """Two epochs, the first at 32 px and the second at 64 (--progressive 32 0 1); the run resumed from the
    unbroken run's first checkpoint trains the second epoch to the same bytes."""
    ramp = ("--progressive", "32", "0", "1")
    unbroken, resumed = tmp_path / "unbroken", tmp_path / "resumed"
    assert recipe.main(_args(photos, unbroken, 2, *ramp, "--keep-checkpoints", "2")) == 0
    shutil.copytree(unbroken / "checkpoints" / "epoch-0001", resumed / "checkpoints" / "epoch-0001")
    assert recipe.main(_args(photos, resumed, 2, *ramp, "--resume")) == 0
    a = (unbroken / "checkpoints" / "epoch-0002" / "state.safetensors").read_bytes()
    b = (resumed / "checkpoints" / "epoch-0002" / "state.safetensors").read_bytes()
    assert a == b


def test_bad_flags_are_refused_by_name(photos, tmp_path):
    with pytest.raises(ConfigError, match="--resume needs --out"):
        recipe.parse(["--data", str(photos), "--resume"])
    with pytest.raises(ConfigError, match="--val-resize 32 is below --resolution 64"):
        recipe.parse(["--data", str(photos), "--resolution", "64", "--val-resize", "32"])
    with pytest.raises(ConfigError, match="multiple"):  # progressive sides are multiples of 32
        recipe.build(recipe.parse(["--data", str(photos), "--resolution", "64", "--progressive", "40", "0", "1"]))
    with pytest.raises(ConfigError, match="no checkpoint"):
        recipe.main(_args(photos, tmp_path / "empty", 1, "--resume"))
