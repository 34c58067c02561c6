"""README's checkpoint recipe in one process (CPU backend), through the process-wide settings as a script would:

    task.checkpoint_every(...); task.save(path); task = build_task().resume(path); task.run()

The second build_task() re-applies the same GLOBAL_SETTING and PREPROCESSOR_SETTING values after the first task's
compile froze them (was: FrozenError), the resumed run gives the bytes of the unbroken one, a finished run trains
on with a larger total_epochs, and a compiled task's settings still cannot change under it."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.errors import FrozenError
from tr.core.norm import NormMode
from tr.core.settings import GLOBAL_SETTING, reset_global_settings
from tr.data import PREPROCESSOR_SETTING, ArrayDataset, reset_preprocessor_settings
from tr.graph.blueprint import fc, flatten, relu, seq
from tr.task import checkpoint, checkpoint_files
from tr.task.deep_learning import DeepLearningTask

_rng = np.random.default_rng(12)
_IMAGES = _rng.integers(0, 256, (72, 6, 6, 1), dtype=np.uint8)
DATA = ArrayDataset((_IMAGES[:48], np.arange(48) % 4), (_IMAGES[48:], np.arange(24) % 4), name="digits",
                    num_classes=4)


@pytest.fixture(autouse=True)
def _fresh_globals():
    reset_global_settings()
    reset_preprocessor_settings()
    yield
    reset_global_settings()
    reset_preprocessor_settings()


def build_task(epochs: int = 4) -> DeepLearningTask:
    GLOBAL_SETTING.manual_seed(123).global_batch_size(8)
    PREPROCESSOR_SETTING.dataset(DATA).preprocess_workers(1).normalization(NormMode.MNIST)
    return (DeepLearningTask().model(seq(flatten(), fc(16), relu(), fc(4))).optimizer(SGD().momentum(0.9))
            .total_epochs(epochs).device("cpu").quiet())


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


def test_the_readme_recipe_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    straight = build_task().compile()
    want = [r.train_loss for r in straight.run().history]
    straight._feeder.close()

    task = build_task()
    task.checkpoint_every(2, "runs/mlp/checkpoints", keep_last=2, keep_best="top1")
    task.compile()
    task.run(2)
    task.save("runs/mlp/ck")  # runs/mlp exists (checkpoint_every made it); a fresh parent is made too
    task.save("other/runs/ck")
    task._feeder.close()
    task = build_task().resume("runs/mlp/ck")  # was: FrozenError "cannot change seed to 123"
    got = [r.train_loss for r in task.run().history]
    assert got == want[2:] and _state(task) == _state(straight)
    assert sorted(p.name for p in (tmp_path / "runs/mlp/checkpoints").iterdir()) == ["best", "epoch-0002"]
    assert checkpoint_files.read("other/runs/ck")[0]["epoch"] == 2
    with pytest.raises(FrozenError, match="cannot change seed to 7"):
        GLOBAL_SETTING.manual_seed(7)  # a compiled task's settings still cannot change under it
    assert task.settings.seed == 123
    task._feeder.close()


def test_a_finished_run_trains_on_with_a_larger_total_epochs(tmp_path):
    straight = build_task(6).compile()
    straight.run()
    straight._feeder.close()
    done = build_task(4).compile()
    done.run()
    done.save(tmp_path / "ck")
    done._feeder.close()
    longer = build_task(6).resume(tmp_path / "ck")  # the default schedule (a constant LR) keeps its past
    assert [r.epoch for r in longer.run().history] == [5, 6] and _state(longer) == _state(straight)
    longer._feeder.close()
