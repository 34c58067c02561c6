import pytest

from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.core.shape import Shape
from tr.graph.spec import CompileSpec


def test_defaults_and_variants():
    s = CompileSpec((28, 28, 1), 10, 128)
    v = s.variants()
    assert list(v) == ["train", "train_last", "val", "val_last"]
    assert [(i.batch, i.resolution, i.train) for i in v.values()] == [(128, 28, True), (128, 28, True),
                                                                       (128, 28, False), (128, 28, False)]
    assert s.variant_input(v["val"]) == Shape(128, 28, 28, 1)
    assert s.momentum_slot and not s.second_moment_slot and not s.lars and s.loss_scale == 1.0


def test_progressive_resizing_adds_low_variants():
    s = CompileSpec((256, 256, 3), 1000, 64, last_train_batch=10, val_batch=100, last_val_batch=7,
                    train_resolution=224, train_low_resolution=128, val_resolution=256, amp=True)
    v = s.variants()
    assert list(v) == ["train", "train_last", "train_low", "train_low_last", "val", "val_last"]
    assert [(i.batch, i.resolution) for i in v.values()] == [(64, 224), (10, 224), (64, 128), (10, 128), (100, 256),
                                                             (7, 256)]
    assert s.variant_input(v["train_low_last"]) == Shape(10, 128, 128, 3)
    assert s.loss_scale == 65536.0  # GradScaler's first scale under the default (dynamic) rule


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
    ({"momentum": 1.5}, "momentum"),
    ({"lr_table_steps": -1}, "lr_table_steps"),
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


def test_from_settings():
    # progressive resizing is refused by the settings (one sample shape per run): no train_low variants
    st = Settings().use_gpu("0,1").global_batch_size(256).amp().train_resolution(224).val_resolution(256)
    s = CompileSpec.from_settings(st, (256, 256, 3), 1000, optimizer="lars")
    assert (s.batch, s.amp, s.world_size, s.optimizer) == (128, True, 2, "lars")
    assert (s.train_resolution, s.train_low_resolution, s.val_resolution) == (224, None, 256)
    assert (s.loss_scale_rule, s.loss_scale_growth_interval, s.loss_scale) == ("dynamic", 2000, 65536.0)
    st = Settings().amp().loss_scaling("static")
    assert CompileSpec.from_settings(st, (8, 8, 1), 2).loss_scale == 8192.0  # the seed's first scale
    st = Settings().amp().loss_scaling("dynamic", init=512.0, growth_interval=100)
    s = CompileSpec.from_settings(st, (8, 8, 1), 2)
    assert (s.loss_scale_rule, s.loss_scale_growth_interval, s.loss_scale) == ("dynamic", 100, 512.0)
