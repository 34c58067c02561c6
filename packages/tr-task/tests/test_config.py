"""tr.task.config: one configuration tree (settings, data, task) behind the fluent API, frozen by compile, read
by resolve() and recorded by the checkpoint field by field."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.config import Section
from tr.core.errors import CompileError, FrozenError, PhaseError
from tr.core.settings import Settings
from tr.data import PREPROCESSOR_SETTING, ArrayDataset, PreprocessorSettings, reset_preprocessor_settings
from tr.graph.blueprint import fc, relu, seq
from tr.task import checkpoint
from tr.task.config import Config, TaskConfig
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

SECTIONS = (Settings, PreprocessorSettings, TaskConfig)


def _arrays(n: int = 24, val: int = 8):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n + val, 4, 4, 1)).astype(np.float32)
    y = (np.arange(n + val) % 3).astype(np.int32)
    return (x[:n], y[:n]), (x[n:], y[n:])


def _task(**kw) -> DeepLearningTask:
    train, val = _arrays()
    return (DeepLearningTask(Settings().global_batch_size(8).manual_seed(5)).device("cpu").quiet()
            .model(seq(fc(8), relu(), fc(3))).num_classes(3).optimizer(SGD()).total_epochs(2)
            .data(ArrayFeeder(train, val, 8, **kw)))


@pytest.fixture
def pipeline():
    """The process-wide PREPROCESSOR_SETTING on a small array data set; reset afterwards."""
    reset_preprocessor_settings()
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, (32, 4, 4, 1), dtype=np.uint8)
    labels = (np.arange(32) % 3).astype(np.int32)
    PREPROCESSOR_SETTING.dataset(ArrayDataset((imgs[:24], labels[:24]), (imgs[24:], labels[24:]), num_classes=3))
    PREPROCESSOR_SETTING.preprocess_workers(1)
    yield PREPROCESSOR_SETTING
    reset_preprocessor_settings()


def test_the_tree_joins_the_settings_the_data_section_and_the_tasks_own():
    t = _task()
    c = t.config
    assert isinstance(c, Config) and c.settings is t._settings_source and c.task is t._cfg
    assert c.data is None  # data(feeder): no data section is read
    assert [s.NAME for s in c.sections] == ["settings", "task"]
    assert (c.task.epochs, c.task.device, c.task.quiet, c.settings.batch_size) == (2, "cpu", True, 8)
    assert "task.epochs = 2" in c.lines() and "settings.batch_size = 8" in str(c).splitlines()
    assert DeepLearningTask().config.data is PREPROCESSOR_SETTING  # no feeder: the data section is the global


def test_compile_freezes_the_tree_it_read_and_keeps_it():
    t = _task().compile()
    c = t.config
    assert c.frozen and c is t._resolved.config and c.settings is t.settings
    with pytest.raises(PhaseError):
        t.total_epochs(3)
    with pytest.raises(FrozenError, match=r"cannot change epochs to 3 \(task.epochs\)"):
        c.task._set("epochs", 3)
    t.quiet(False).on_step(lambda k, r: None)  # the loop's live fields are still taken after compile
    assert c.task.quiet is False


def test_a_failed_compile_thaws_the_tree():
    t = _task().total_epochs(1)
    t.model(seq(fc(8), relu(), fc(5)))  # 5 logits for 3 declared classes: refused at compile
    with pytest.raises(CompileError, match="the loss needs logits"):
        t.compile()
    assert not t.config.frozen and not t.config.settings.frozen
    t.model(seq(fc(8), relu(), fc(3))).compile()
    assert t.config.frozen


def test_the_data_section_is_committed_and_kept_as_a_snapshot(pipeline):
    t = (DeepLearningTask(Settings().global_batch_size(8)).device("cpu").quiet().model(seq(fc(8), relu(), fc(3)))
         .optimizer(SGD()).total_epochs(1))
    assert t.config.data is pipeline
    t.compile()
    assert t.config.data is not pipeline and t.config.data.frozen and pipeline.frozen
    assert t.feeder.pre.settings is t.config.data  # the run reads the frozen copy: a later edit of the global
    reset_preprocessor_settings()  # changes neither what it trains on nor what it says it read
    assert t.config.data.dataset_name == "arrays" and t.config.data.preprocess_workers_count == 1
    t._feeder.close()


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.NAME)
def test_every_declared_name_is_a_field(section: type[Section]):
    """A misspelt name in NOT_RECORDED or LIVE would silently record (or freeze) the field it meant."""
    names = set(section.field_names())
    assert section.NOT_RECORDED <= names and section.LIVE <= names
    assert set(section.recorded_names()) == names - section.NOT_RECORDED


def test_every_recorded_field_of_the_tree_is_in_the_checkpoints_description(pipeline):
    """A field a section records must reach the checkpoint: a new one cannot change a run and resume unseen."""
    assert set(TaskConfig.recorded_names()) == set(checkpoint.TASK_FIELDS)
    t = (DeepLearningTask(Settings().global_batch_size(8)).device("cpu").quiet().model(seq(fc(8), relu(), fc(3)))
         .optimizer(SGD()).total_epochs(1).compile())
    d = checkpoint.describe(t)
    assert list(d["settings"]) == list(Settings.recorded_names())
    assert set(d["data"]["pipeline"]) == set(PreprocessorSettings.recorded_names()) - {"train", "val"}
    assert d["data"]["pipeline"]["shuffle_train"] is True and d["data"]["transforms"] is not None
    json.dumps(d)  # every value is JSON
    t._feeder.close()


def test_a_description_written_before_the_pipeline_was_recorded_compares_without_it():
    here = {"settings": {"seed": 1}, "data": {"batch": 8, "transforms": ["a", "b"], "pipeline": {"sdmp": 1}}}
    older = {"settings": {"seed": 1}, "data": {"batch": 8, "transforms": ["a", "b"]}}
    assert checkpoint.first_difference(older, checkpoint._as_recorded_then(older, here)) is None
    assert checkpoint._as_recorded_then(here, here) is here  # a checkpoint that records it is compared whole


def test_the_section_names_the_field_by_its_path_when_frozen():
    s = Settings().freeze()
    with pytest.raises(FrozenError, match=r"cannot change seed to 4 \(settings.seed\). Create a new task"):
        s.manual_seed(4)
    p = PreprocessorSettings().freeze()
    with pytest.raises(FrozenError, match=r"cannot change shuffle_train to False \(data.shuffle_train\). Use .copy"):
        p.shuffle(False)


def test_copy_and_snapshot_are_shared_by_every_section():
    s = Settings().manual_seed(3)
    snap = s.snapshot()
    assert snap.frozen and not s.frozen and snap.seed == 3
    c = snap.copy().manual_seed(4)
    assert (c.seed, snap.seed, c.frozen) == (4, 3, False)
    cfg = dataclasses.replace(TaskConfig(), epochs=3)
    assert cfg.as_dict()["epochs"] == 3 and not cfg.frozen
