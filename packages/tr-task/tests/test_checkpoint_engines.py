"""Checkpoints record the convolution engines the run used (tr.task.engines), and a resume into an uncompiled task
pins the saved run's autotuned engines before compiling; where they cannot run (another GPU model), or where the
engines differ, the resume goes on with a warning that the bytes will differ from an unbroken run's."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import pytest

from tr.algo.optimizer import Adam
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import cbr, fc, flatten, seq
from tr.task import checkpoint_files, deep_learning, engines
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

_rng = np.random.default_rng(3)
X = _rng.standard_normal((16, 6, 6, 3)).astype(np.float32)
Y = (np.arange(16) % 3).astype(np.int32)
TIMED = {"backend": "cuda", "gpu": "NVIDIA H200", "cudnn": 91900,
         "convolutions": [{"key": "fprop:n4:h6:w6:c3:k4:r3:s3:sh1:sw1:ph1:pw1:FP32,FP32,FP32:tf32=0",
                           "direction": "fprop", "engine": "eng0_k2=1", "source": "timed", "rank": 1}]}


def _task() -> DeepLearningTask:
    feeder = ArrayFeeder((X, Y), None, 4, seed=2, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(1).global_batch_size(4)).device("cpu").quiet()
            .model(seq(cbr(4, 3, s=1, p=1), flatten(), fc(3))).optimizer(Adam()).scheduler(ConstantLR(0.01))
            .data(feeder).total_epochs(2))


@pytest.fixture
def saved(tmp_path):
    t = _task().compile()
    t.run(1)
    t.save(tmp_path / "ck")
    return tmp_path / "ck", {k: t.backend.read(v).tobytes() for k, v in t.program.named.items()}


def test_the_manifest_records_the_engines_and_a_resume_on_the_same_backend_is_silent(saved, caplog):
    path, _ = saved
    assert checkpoint_files.read_manifest(path)["engines"] == {"backend": "cpu", "convolutions": []}
    with caplog.at_level(logging.WARNING, logger="tr.task.checkpoint"):
        t = _task().resume(path)
    assert t._epochs_done == 1 and not caplog.records


def test_autotuned_engines_are_pinned_for_the_resumed_compile(saved, monkeypatch, resign):
    path, _ = saved
    resign(path, engines=TIMED)
    seen = []

    @contextlib.contextmanager
    def pinned(task, recorded):
        seen.append((task.phase.name, recorded))
        yield {}

    monkeypatch.setattr(engines, "pinned", pinned)
    t = _task().resume(path)
    assert seen == [("PLANNING", TIMED)] and t._epochs_done == 1


def test_engines_that_cannot_run_here_are_a_warning_not_a_failed_resume(saved, monkeypatch, caplog, resign):
    """As on a GPU where a pinned engine cannot run: the compile under the pins fails part-way (when its graphs are
    captured, after the plan is made), the task is back in PLANNING, and compiles again with this machine's
    choice."""
    path, _ = saved
    resign(path, engines=TIMED)
    pins = []

    @contextlib.contextmanager
    def pinned(task, recorded):
        pins.append(True)
        try:
            yield {}
        finally:
            pins.pop()

    real = deep_learning.capture_steps

    def capture(*args, **kwargs):
        if pins:  # the pinned engine fails where the native op is built
            raise ConfigError("cuDNN conv fprop:...: the pinned engine 'eng0_k2=1' cannot run here")
        return real(*args, **kwargs)

    monkeypatch.setattr(engines, "pinned", pinned)
    monkeypatch.setattr(deep_learning, "capture_steps", capture)
    with caplog.at_level(logging.WARNING, logger="tr.task.checkpoint"):
        t = _task().resume(path)
    assert t._epochs_done == 1 and t.phase.name == "COMPILED"
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot all run here" in text and "eng0_k2=1" in text
    assert "engines differ from the saved run's" in text and "backend: 'cuda' / 'cpu'" in text


def test_a_compile_that_fails_part_way_leaves_the_task_in_planning(monkeypatch):
    """A failure after the plan is made (here while the graphs are captured) drops the plan, the backend and its
    arena: the task is in PLANNING and compiles again."""
    t = _task()
    real = deep_learning.capture_steps
    monkeypatch.setattr(deep_learning, "capture_steps", lambda *a, **k: (_ for _ in ()).throw(ConfigError("no")))
    with pytest.raises(ConfigError, match="no"):
        t.compile()
    assert t.phase.name == "PLANNING" and t.program is None and t.backend is None
    monkeypatch.setattr(deep_learning, "capture_steps", real)
    t.compile().run(1)
    assert t._epochs_done == 1


def test_a_checkpoint_without_engines_resumes_as_before(saved, caplog, resign):
    path, _ = saved
    resign(path, edit=lambda m: m.pop("engines"))
    with caplog.at_level(logging.WARNING, logger="tr.task.checkpoint"):
        assert _task().resume(path)._epochs_done == 1
    assert not caplog.records
