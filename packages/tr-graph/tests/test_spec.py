import pytest

from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.core.shape import Shape
from tr.graph.jpeg_input import JpegInput
from tr.graph.spec import CompileSpec, loss_scale_fields


def test_defaults_and_variants():
    s = CompileSpec((28, 28, 1), 10, 128)
    v = s.variants()
    assert list(v) == ["train", "train_last", "val", "val_last"]
    assert [(i.batch, i.resolution, i.train) for i in v.values()] == [(128, 28, True), (128, 28, True),
                                                                       (128, 28, False), (128, 28, False)]
    assert s.variant_input(v["val"]) == Shape(128, 28, 28, 1)
    assert s.momentum_slot and not s.second_moment_slot and not s.lars and s.loss_scale == 1.0
    assert s.lr_table_steps == 1  # a one-entry device table: a constant learning rate


def test_one_variant_per_kind_of_step():
    s = CompileSpec((256, 256, 3), 1000, 64, last_train_batch=10, val_batch=100, last_val_batch=7,
                    train_resolution=224, val_resolution=256, amp=True)
    v = s.variants()
    assert list(v) == ["train", "train_last", "val", "val_last"]  # the variants of the steps tr.graph.steps builds
    assert [(i.batch, i.resolution, i.train) for i in v.values()] == [(64, 224, True), (10, 224, True),
                                                                       (100, 256, False), (7, 256, False)]
    assert s.variant_input(v["train_last"]) == Shape(10, 224, 224, 3)
    assert s.variant_input(v["val_last"]) == Shape(7, 256, 256, 3)
    assert s.loss_scale == 65536.0  # GradScaler's first scale under the default (dynamic) rule
    with pytest.raises(TypeError, match="train_low_resolution"):  # no progressive-resizing variants (issue 37)
        CompileSpec((256, 256, 3), 1000, 64, train_low_resolution=128)


def test_native_non_square_input():
    s = CompileSpec((20, 30, 2), 3, 4)
    assert s.variant_input(s.variants()["train"]) == Shape(4, 20, 30, 2)


@pytest.mark.parametrize("kw, msg", [
    ({"batch": 0}, "batch must be an integer >= 1, got 0"),
    ({"input_shape": (28, 0, 1)}, "input W must be"),
    ({"input_shape": (28, 28)}, "input_shape must be"),
    ({"num_classes": -1}, "num_classes"),
    ({"last_train_batch": 200}, "last_train_batch 200 exceeds batch 128"),
    ({"optimizer": "rmsprop"}, "optimizer must be one of"),
    ({"label_smoothing": 1.0}, r"label_smoothing must be in \[0, 1\)"),
    ({"beta1": 1.5}, "beta1"),
    ({"lr_table_steps": 0}, r"lr_table_steps must be an integer >= 1 \(the entries of the device's learning-rate "
                            r"table, one per step; 1: a constant rate\), got 0"),
    ({"lr_table_steps": -1}, "lr_table_steps must be an integer >= 1 .*got -1"),
    ({"lr_table_steps": True}, "lr_table_steps must be an integer >= 1 .*got True"),
    ({"lr_table_steps": 10.0}, "lr_table_steps must be an integer >= 1 .*got 10.0"),
    ({"weight_decay": -1e-4}, "weight_decay"),
    ({"amp": 1}, "amp must be True or False"),
    ({"loss_scale_rule": "grow"}, "loss_scale_rule must be one of"),
    ({"loss_scale_init": 0.0}, "loss_scale_init must be a finite number > 0 or None, got 0.0"),
    ({"loss_scale_growth_interval": 0}, "loss_scale_growth_interval must be an integer >= 1, got 0"),
])
def test_validation(kw, msg):
    base = {"input_shape": (28, 28, 1), "num_classes": 10, "batch": 128}
    base.update(kw)
    with pytest.raises(ConfigError, match=msg):
        CompileSpec(**base)


def test_optimizer_slots():
    mk = lambda o: CompileSpec((4, 4, 1), 2, 2, optimizer=o)  # noqa: E731
    assert not mk("sgd").momentum_slot
    assert mk("adamw").second_moment_slot and mk("adamw").momentum_slot
    assert mk("lars_nesterov").lars and not mk("lars").second_moment_slot


def test_loss_scale_fields_from_settings():
    mk = lambda st: CompileSpec((8, 8, 1), 2, 2, amp=True, **loss_scale_fields(st))  # noqa: E731
    s = mk(Settings().amp())
    assert (s.loss_scale_rule, s.loss_scale_growth_interval, s.loss_scale) == ("dynamic", 2000, 65536.0)
    assert mk(Settings().amp().loss_scaling("static")).loss_scale == 8192.0  # the seed's first scale
    s = mk(Settings().amp().loss_scaling("dynamic", init=512.0, growth_interval=100))
    assert (s.loss_scale_rule, s.loss_scale_growth_interval, s.loss_scale) == ("dynamic", 100, 512.0)


@pytest.mark.parametrize("res_kw", [{"train_resolution": 24}, {"val_resolution": 24}])
def test_jpeg_input_keeps_the_samples_size(res_kw):
    # (the resident input's refusal: test_resident_plan)
    jpeg = JpegInput(1024, ())
    with pytest.raises(ConfigError, match=r"a JPEG input is resized to the samples' size by its chain: leave the "
                                          r"train and val resolutions unset"):
        CompileSpec((28, 28, 3), 10, 8, input=jpeg, **res_kw)
    s = CompileSpec((28, 28, 3), 10, 8, input=jpeg, train_resolution=28, val_resolution=28)  # the samples' own side
    assert {v.resolution for v in s.variants().values()} == {28}
