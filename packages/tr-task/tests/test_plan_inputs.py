"""What reaches the CompileSpec from the BluePrint, num_classes() and the resolution settings, and what is
refused before anything is allocated."""

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.errors import CompileError, ConfigError, DataError
from tr.core.settings import Settings
from tr.graph.blueprint import BluePrint, fc, flatten, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder


def _task(model, settings: Settings | None = None, hw: int = 1, classes: int | None = None, val: bool = False):
    x = np.zeros((8, hw, hw, 4), np.float32)
    y = (np.arange(8) % 3).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x[:4], y[:4]) if val else None, 4, num_classes=classes)
    return (DeepLearningTask(settings or Settings().global_batch_size(4)).device("cpu").quiet()
            .model(model).optimizer(SGD()).data(feeder))


def test_the_blueprints_classes_and_input_shape_are_used_by_compile():
    bp = BluePrint(seq(fc(3)), input_shape=(1, 1, 4), num_classes=3)
    task = _task(bp).compile()  # was: CompileError, the number of classes is unknown
    assert task.spec.num_classes == 3 and task.spec.input_shape == (1, 1, 4)


@pytest.mark.parametrize("bp,msg", [
    (BluePrint(seq(fc(3)), input_shape=(2, 2, 4), num_classes=3),
     r"the BluePrint's input_shape=\(2, 2, 4\) \(H, W, C\) differs from the data's samples \(1, 1, 4\)"),
    (BluePrint(seq(fc(5)), num_classes=5), None),
])
def test_a_blueprint_that_contradicts_the_task_or_the_data_is_refused(bp, msg):
    if msg is None:  # num_classes(3) on the task against the BluePrint's 5
        with pytest.raises(ConfigError, match=r"num_classes\(3\) differs from the BluePrint's num_classes=5"):
            _task(bp).num_classes(3).compile()
        return
    with pytest.raises(ConfigError, match=msg):
        _task(bp).compile()


def test_a_model_with_fewer_classes_than_the_data_is_refused():
    with pytest.raises(ConfigError, match="compiled for 2 classes, but the data has 3"):
        _task(seq(fc(2)), classes=3).num_classes(2).compile()
    with pytest.raises(DataError, match=r"train label at index 2 is 2, outside \[0, 2\)"):
        _task(seq(fc(2))).num_classes(2).compile()  # the feeder does not know its classes: its labels are checked
    with pytest.raises(CompileError, match="the number of classes is unknown"):
        _task(seq(fc(3))).compile()


def test_resolutions_reach_the_variants_when_the_data_delivers_them():
    s = Settings().global_batch_size(4).input_resolution(2).val_resolution(2)
    task = _task(seq(flatten(), fc(3)), s, hw=2, classes=3, val=True).compile()
    assert (task.spec.train_resolution, task.spec.val_resolution) == (2, 2)
    assert {v.name: v.resolution for v in task.spec.variants().values()} == {
        "train": 2, "train_last": 2, "val": 2, "val_last": 2}


@pytest.mark.parametrize("setting,msg", [
    (lambda s: s.input_resolution(28), r"input_resolution\(28\) asks for 28x28 samples, but the data delivers 2x2"),
    (lambda s: s.train_resolution(224), r"train_resolution\(224\) asks for 224x224 samples"),
    (lambda s: s.val_resolution(3), r"val_resolution\(3\) asks for 3x3 samples"),
])
def test_a_resolution_the_data_does_not_deliver_is_refused_at_compile(setting, msg):
    s = setting(Settings().global_batch_size(4))
    with pytest.raises(ConfigError, match=msg):
        _task(seq(flatten(), fc(3)), s, hw=2, classes=3, val=True).compile()
    assert not s.frozen


def test_a_progressive_schedule_ending_past_or_below_the_datas_side_is_refused_at_compile():
    """The schedule's final side is the compiled maximum: the side the data's transforms make (an ArrayFeeder's
    2x2 samples here), which the plan, its buffers and validation are at."""
    for s, what in ((Settings().global_batch_size(4).progressive_resizing(2, 4, 0, 1, multiple=2), "grows past"),
                    (Settings().global_batch_size(4).train_resolution(1, 1), None)):
        t = _task(seq(flatten(), fc(3)), s, hw=2, classes=3, val=True)
        if what is None:
            with pytest.raises(ConfigError, match=r"train_resolution\(1\) asks for 1x1 samples"):
                t.compile()
            continue
        with pytest.raises(ConfigError, match=rf"progressive_resizing\(2, 4, .*\) {what} the compiled maximum: the "
                                              r"data's transforms make 2x2 samples"):
            t.compile()
