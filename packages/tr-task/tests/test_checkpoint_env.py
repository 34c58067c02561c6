"""The environment variables that change the plan or the numbers (tr.core.env.recorded) in a checkpoint: taken at
compile, saved in the description's "env", and a resume under other values refused naming the variable; a
checkpoint written before they were recorded resumes as if compiled with the defaults."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tr.algo.optimizer import Adam
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.graph.steps import Part
from tr.task import checkpoint, checkpoint_files
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(0)
X = _rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
Y = (np.arange(40) % 3).astype(np.int32)
DEFAULTS = {"TR_CUBLASLT_EPILOGUES": True, "TR_FC_DRELU": False}


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)


def _task() -> DeepLearningTask:
    feeder = ArrayFeeder((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(1).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(8), relu(), fc(3))).optimizer(Adam()).scheduler(ConstantLR(0.01))
            .data(feeder).total_epochs(3))


def _drelu_masks(task) -> int:
    return sum(c.op == "fc_bwd" and c.args.get("mask") is not None
               for c in task.program.step("train_a").calls_of(Part.DEEP_FWD_BWD.value))


def _saved(path: Path) -> DeepLearningTask:
    t = _task().compile()
    t.run(1)
    t.save(path)
    return t


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


def _manifest(path: Path) -> dict:
    return json.loads((path / checkpoint_files.MANIFEST).read_text())


def test_the_values_are_taken_at_compile_not_at_the_save(tmp_path, monkeypatch):
    monkeypatch.setenv("TR_FC_DRELU", "1")
    t = _task().compile()
    assert _drelu_masks(t) == 1  # the plan it was compiled with
    monkeypatch.setenv("TR_FC_DRELU", "0")  # changed after the compile: the plan still has the DRELU
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", "0")
    t.run(1)
    t.save(tmp_path / "ck")
    config = _manifest(tmp_path / "ck")["config"]
    assert config["env"] == {"TR_CUBLASLT_EPILOGUES": True, "TR_FC_DRELU": True}
    assert list(checkpoint.describe(t))[:2] == ["settings", "env"]  # the order first_difference names them in


def test_a_resume_under_another_TR_FC_DRELU_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "ck"
    _saved(path)  # without TR_FC_DRELU
    monkeypatch.setenv("TR_FC_DRELU", "1")
    t = _task()
    with pytest.raises(ConfigError) as e:
        t.resume(path)
    assert str(e.value) == (f"{path / 'manifest.json'}: a checkpoint of another configuration (nothing loaded): "
                            "env.TR_FC_DRELU: the checkpoint has False, this task has True")
    assert _drelu_masks(t) == 1 and t._epochs_done == 0  # another plan, with the same state tensors: refused


def test_a_checkpoint_of_a_drelu_plan_is_refused_without_it_and_resumed_with_it(tmp_path, monkeypatch):
    path = tmp_path / "ck"
    monkeypatch.setenv("TR_FC_DRELU", "true")
    state = _state(_saved(path))
    monkeypatch.setenv("TR_FC_DRELU", "0")
    with pytest.raises(ConfigError, match="env.TR_FC_DRELU: the checkpoint has True, this task has False"):
        _task().resume(path)
    monkeypatch.setenv("TR_FC_DRELU", "yes")  # another spelling of the same value
    t = _task().resume(path)
    assert _state(t) == state and t._epochs_done == 1


def test_a_resume_under_another_TR_CUBLASLT_EPILOGUES_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "ck"
    _saved(path)
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", "off")
    with pytest.raises(ConfigError, match="env.TR_CUBLASLT_EPILOGUES: the checkpoint has True, this task has False"):
        _task().resume(path)


def test_a_bad_value_fails_the_compile_naming_it():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TR_FC_DRELU", "2")
        t = _task()
        with pytest.raises(ConfigError, match="environment variable TR_FC_DRELU='2': expected a flag"):
            t.compile()
        mp.setenv("TR_FC_DRELU", "1")
        assert _drelu_masks(t.compile()) == 1  # a failed compile leaves the task ready for another


def test_a_checkpoint_written_before_the_environment_was_recorded_resumes_with_the_defaults(tmp_path,
                                                                                           monkeypatch, resign):
    path = tmp_path / "ck"
    state = _state(_saved(path))
    resign(path, edit=lambda m: m["config"].pop("env"))
    t = _task().resume(path)
    assert _state(t) == state and t._epochs_done == 1
    monkeypatch.setenv("TR_FC_DRELU", "1")
    with pytest.raises(ConfigError) as e:
        _task().resume(path)
    assert str(e.value).endswith("env.TR_FC_DRELU: the checkpoint has False, this task has True (the checkpoint "
                                 "does not record TR_FC_DRELU: it was written before tr recorded it, and its "
                                 "default is assumed)")


def test_a_variable_recorded_after_the_checkpoint_was_written_takes_its_default(tmp_path, monkeypatch, resign):
    path = tmp_path / "ck"
    _saved(path)
    resign(path, edit=lambda m: m["config"]["env"].pop("TR_CUBLASLT_EPILOGUES"))
    assert _task().resume(path)._epochs_done == 1
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", "0")
    with pytest.raises(ConfigError, match="this task has False \\(the checkpoint does not record "
                                          "TR_CUBLASLT_EPILOGUES"):
        _task().resume(path)
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", "1")
    monkeypatch.setenv("TR_FC_DRELU", "1")  # recorded: refused without the note
    with pytest.raises(ConfigError) as e:
        _task().resume(path)
    assert str(e.value).endswith("env.TR_FC_DRELU: the checkpoint has False, this task has True")
