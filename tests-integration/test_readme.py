"""The README's python examples run as written (from the repository root), so they cannot drift from the API.

Only what would take minutes is made small: the task trains at most EPOCHS epochs (the README's warm-up of 5 needs
more than 5) on the first TRAIN/VAL MNIST samples; everything else is the README's own text, executed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tr.core.settings import reset_global_settings
from tr.data.dataset import Split
from tr.data.mnist import MNIST
from tr.data.settings import reset_preprocessor_settings
from tr.task.deep_learning import DeepLearningTask

ROOT = Path(__file__).resolve().parents[1]
EPOCHS, TRAIN, VAL = 6, 400, 200


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


BLOCKS = python_blocks((ROOT / "README.md").read_text())


@pytest.fixture
def small_and_short(monkeypatch):
    asked: list[int] = []
    total_epochs = DeepLearningTask.total_epochs

    def few(self, n):
        asked.append(n)
        return total_epochs(self, min(n, EPOCHS))

    load = MNIST.load

    def first(self, split):
        s = load(self, split)
        n = TRAIN if split == "train" else VAL
        return Split(np.ascontiguousarray(s.images[:n]), s.labels[:n])

    monkeypatch.setattr(DeepLearningTask, "total_epochs", few)
    monkeypatch.setattr(MNIST, "load", first)
    monkeypatch.chdir(ROOT)
    reset_global_settings()
    reset_preprocessor_settings()
    yield asked
    reset_global_settings()
    reset_preprocessor_settings()


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 1 and "from renaissance import *" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs_as_written(index, small_and_short, capsys):
    scope: dict = {"__name__": "__readme__"}
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), scope)  # noqa: S102
    if "result" in scope:  # the first example trains: it must have trained what it says, for the epochs allowed
        result = scope["result"]
        assert small_and_short == [100]
        assert [r.epoch for r in result.history] == list(range(1, EPOCHS + 1))
        assert all(np.isfinite(r.train_loss) for r in result.history) and result.best_top1 > 0.5
        lrs = [r.lr for r in result.history]
        assert lrs[0] < lrs[4] < lrs[5] == pytest.approx(1e-3, rel=1e-6)  # CosineAnnealingLR(1e-3).warmup(5)
        assert "Train Loss" in capsys.readouterr().out  # the epoch table is printed
