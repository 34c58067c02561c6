"""task.save / task.resume / checkpoint_every on the CPU backend: bad input (truncated or bit-flipped files, a
manifest that does not match, another model or other settings) is a clear error naming the file and the
difference, with nothing loaded; the periodic checkpoints keep the last k and the best by a metric."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tr.algo.optimizer import SGD, Adam
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError, DataError, PhaseError
from tr.core.settings import Settings
from tr.graph.blueprint import dropout, fc, relu, seq
from tr.task import checkpoint, checkpoint_files
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(0)
X = _rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
Y = (np.arange(40) % 3).astype(np.int32)


def _task(seed: int = 1, width: int = 8, opt=None, epochs: int = 4, model=None) -> DeepLearningTask:
    feeder = ArrayFeeder((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(seed).global_batch_size(BATCH)).device("cpu").quiet()
            .model(model or seq(fc(width), relu(), fc(3))).optimizer(opt or Adam()).scheduler(ConstantLR(0.01))
            .data(feeder).total_epochs(epochs))


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint after 2 epochs (and what the task held then)."""
    path = tmp_path_factory.mktemp("ck") / "ck"
    t = _task().compile()
    t.run(2)
    t.save(path)
    return path, _state(t)


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_resume_loads_every_state_tensor_and_the_epoch(saved):
    path, state = saved
    t = _task().resume(path)  # compiles the configured task first
    assert _state(t) == state and t._epochs_done == 2
    assert [r.epoch for r in t.run().history] == [3, 4]
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "tr.checkpoint" and manifest["epoch"] == 2
    assert {"step", "skipped", "L0.w", "L0.w.m", "L0.w.v"} <= {row[0] for row in manifest["tensors"]}


def _refused(path, exc, *patterns):
    """A task one epoch in: the failed resume must leave its state and epoch count untouched."""
    t = _task().compile()
    t.run(1)
    before = _state(t)
    with pytest.raises(exc) as e:
        t.resume(path)
    for p in patterns:
        assert p in str(e.value), str(e.value)
    assert "nothing loaded" in str(e.value) or exc is DataError
    assert _state(t) == before and t._epochs_done == 1
    return str(e.value)


def test_a_truncated_state_file_is_refused(saved, tmp_path):
    ck = _copy(saved[0], tmp_path / "ck")
    raw = (ck / "state.safetensors").read_bytes()
    (ck / "state.safetensors").write_bytes(raw[:len(raw) // 2])
    _refused(ck, DataError, str(ck / "state.safetensors"), "truncated")


def test_a_bit_flip_in_the_state_file_is_refused(saved, tmp_path):
    ck = _copy(saved[0], tmp_path / "ck")
    raw = bytearray((ck / "state.safetensors").read_bytes())
    raw[-5] ^= 0x10  # inside a tensor: the safetensors parser alone would accept it
    (ck / "state.safetensors").write_bytes(bytes(raw))
    _refused(ck, DataError, str(ck / "state.safetensors"), "SHA-256")


def test_an_edited_manifest_is_refused(saved, tmp_path):
    ck = _copy(saved[0], tmp_path / "ck")
    m = json.loads((ck / "manifest.json").read_text())
    m["epoch"] = 3
    (ck / "manifest.json").write_text(json.dumps(m))
    _refused(ck, DataError, str(ck / "manifest.json"), "checksum")
    (ck / "manifest.json").write_text("{not json")
    _refused(ck, DataError, str(ck / "manifest.json"), "invalid JSON")


def test_a_manifest_of_another_checkpoint_is_refused(saved, tmp_path):
    other = tmp_path / "other"
    t = _task().compile()
    t.run(1)
    t.save(other)
    ck = _copy(saved[0], tmp_path / "ck")
    (ck / "manifest.json").write_bytes((other / "manifest.json").read_bytes())  # its own checksum is right
    _refused(ck, DataError, str(ck / "state.safetensors"), "the manifest's")


def test_a_checkpoint_of_the_seed_region_layout_is_refused_saying_so(saved, tmp_path, resign):
    # what a checkpoint of a tr before memory roles looks like: format version 1, tensor rows in its region names
    ck = _copy(saved[0], tmp_path / "ck")
    rename = {"param/fc_w": "W_FC_WEIGHT", "param/fc_b": "W_FC_BIAS", "moment1/fc_w": "M_FC_WEIGHT",
              "moment1/fc_b": "M_FC_BIAS", "moment2/fc_w": "V_FC_WEIGHT", "moment2/fc_b": "V_FC_BIAS",
              "scalar/fp32": "S_SCALAR_FP32", "scalar/int32": "S_SCALAR_INT32", "result_sum": "R_RESULT_ACCUMULATED"}
    resign(ck, version=1, edit=lambda m: [row.__setitem__(1, rename.get(row[1], row[1])) for row in m["tensors"]])
    assert {row[1] for row in json.loads((ck / "manifest.json").read_text())["tensors"]} <= set(rename.values())
    _refused(ck, DataError, str(ck / "manifest.json"), "checkpoint format version 1: it was written by an older tr "
             "with the seed-region memory layout", "which this tr cannot read")
    with pytest.raises(DataError, match="seed-region memory layout"):
        _task().resume(ck)  # the resume of a fresh task, which compiles first


def test_a_missing_checkpoint_is_refused(tmp_path):
    _refused(tmp_path / "none", DataError, str(tmp_path / "none" / "manifest.json"))


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    t = _task(width=12).compile()
    t.save(tmp_path / "wide")
    # the configuration is compared first, so the refusal names the setting that differs (here the model)
    msg = _refused(tmp_path / "wide", ConfigError, str(tmp_path / "wide" / "manifest.json"), "another configuration")
    assert "blueprint: the checkpoint has 'seq(fc(12), relu(), fc(3))', this task has 'seq(fc(8), relu(), fc(3))'" \
        in msg


@pytest.mark.parametrize("other, named", [
    (lambda: _task(seed=5), "settings.seed: the checkpoint has 5, this task has 1"),
    (lambda: _task(opt=Adam().weight_decay(0.1)), "optimizer"),
    (lambda: _task(epochs=6), "schedule.total_epochs"),
])
def test_a_checkpoint_of_other_settings_is_refused_naming_the_difference(other, named, tmp_path):
    other().compile().save(tmp_path / "ck")
    _refused(tmp_path / "ck", ConfigError, "another configuration", named)


def test_save_needs_a_compiled_task(tmp_path):
    with pytest.raises(PhaseError, match="save"):
        _task().save(tmp_path / "ck")


def test_a_save_replaces_a_checkpoint_and_leaves_no_temporaries(tmp_path):
    t = _task().compile()
    t.save(tmp_path / "ck")
    t.run(1)
    t.save(tmp_path / "ck")
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]
    assert checkpoint_files.read(tmp_path / "ck")[0]["epoch"] == 1


def test_checkpoint_every_keeps_the_last_k_and_the_best(tmp_path):
    best = []
    t = _task(opt=SGD(), epochs=5).checkpoint_every(2, tmp_path, keep_last=1, keep_best="val_loss").compile()
    for rec in t.run().history:
        best.append(rec.val_loss)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "epoch-0004"]
    b = checkpoint_files.read(tmp_path / "best")[0]
    assert b["metrics"]["val_loss"] == min(best) and b["epoch"] == 1 + int(np.argmin(best))
    r = _task(opt=SGD(), epochs=5).resume(tmp_path / "epoch-0004")
    assert [rec.epoch for rec in r.run().history] == [5]


@pytest.mark.parametrize("args, msg", [
    ((0, "d"), "epochs must be an integer >= 1"),
    ((1, "d", 0), "keep_last must be an integer >= 1"),
    ((1, "d", 1, "accuracy"), "keep_best must be one of"),
])
def test_checkpoint_every_refuses_bad_arguments(args, msg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=msg):
        _task().checkpoint_every(*args)


def test_a_one_process_checkpoint_is_refused_by_a_data_parallel_rank_with_dropout(tmp_path):
    """Each rank draws its own dropout stream; a one-process checkpoint holds one (a data-parallel run's holds
    every rank's: tests-integration/test_distributed_resume.py)."""
    model = seq(fc(8), relu(), dropout(0.5), fc(3))
    _task(model=model).compile().save(tmp_path / "ck")
    t = _task(model=model).compile()
    t.group = SimpleNamespace(rank=1, world_size=2, agree=lambda what, facts: None)  # (one process: no others)
    with pytest.raises(ConfigError, match="rank 1 of 2 needs its own"):
        t.resume(tmp_path / "ck")
    t.group = None
    assert t.resume(tmp_path / "ck")._epochs_done == 0
