import pytest

from tr.core.errors import ConfigError, FrozenError
from tr.core.settings import GLOBAL_SETTING, Settings, parse_gpu_list, reset_global_settings


def test_fluent_chain():
    s = Settings().use_gpu("0,1").amp(True).manual_seed(7).global_batch_size(256).train_resolution(224)
    assert s.gpu_ids == (0, 1) and s.world_size == 2 and s.local_batch_size == 128
    assert s.amp_enabled and s.loss_scale == 65536.0 and s.train_res_begin == 224


@pytest.mark.parametrize("spec,msg", [("0,,1", "empty entry"), ("x", "'x' is not a device number"),
                                      ("0,0", "twice"), ("", "empty entry"), ("-1", "not a device"),
                                      # str.isdigit() took these: "²" then failed in int() with a ValueError,
                                      # the Arabic-Indic "١" silently became device 1
                                      ("0,\u00b2", "'\u00b2' is not a device number"),
                                      ("\u0661", "'\u0661' is not a device number"),
                                      ("1.0", "'1.0' is not a device number")])
def test_malformed_gpu_list(spec, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_gpu_list(spec)


def test_batch_and_resolution_errors():
    s = Settings()
    with pytest.raises(ConfigError, match="global batch size must be >= 1, got 0"):
        s.global_batch_size(0)
    with pytest.raises(ConfigError, match="resolution must be >= 1, got 0"):
        s.train_resolution(0)
    with pytest.raises(ConfigError, match="val resolution must be >= 1, got -5"):
        s.val_resolution(-5)
    with pytest.raises(ConfigError, match="does not divide by the number of GPUs 3"):
        Settings().use_gpu("0,1,2").global_batch_size(256)
    with pytest.raises(ConfigError, match="settings.amp must be True, False, 'fp16', 'bf16' or 'off', got 'yes'"):
        s.amp("yes")


def test_frozen_after_compile():
    s = Settings().freeze()
    with pytest.raises(FrozenError, match="cannot change batch_size"):
        s.global_batch_size(64)


def test_snapshot_and_reset():
    reset_global_settings()
    GLOBAL_SETTING.manual_seed(99)
    snap = GLOBAL_SETTING.snapshot()
    assert snap.frozen and snap.seed == 99 and not GLOBAL_SETTING.frozen
    GLOBAL_SETTING.freeze()
    reset_global_settings()
    assert not GLOBAL_SETTING.frozen and GLOBAL_SETTING.seed == 123


def test_loss_scaling():
    assert Settings().loss_scale == 1.0  # no AMP, no scaling
    s = Settings().amp()
    assert (s.loss_scale_rule, s.loss_scale_growth_interval, s.loss_scale) == ("dynamic", 2000, 65536.0)
    assert Settings().amp().loss_scaling("static").loss_scale == 8192.0
    s = Settings().amp().loss_scaling(init=1024, growth_interval=50)
    assert (s.loss_scale, s.loss_scale_growth_interval) == (1024.0, 50)
    with pytest.raises(ConfigError, match="loss-scale rule must be one of .*got 'halving'"):
        Settings().loss_scaling("halving")
    with pytest.raises(ConfigError, match="initial loss scale must be a finite number > 0, got -1"):
        Settings().loss_scaling(init=-1)
    with pytest.raises(ConfigError, match="loss-scale growth interval must be >= 1, got 0"):
        Settings().loss_scaling(growth_interval=0)
    with pytest.raises(FrozenError, match="cannot change loss_scale_rule"):
        Settings().freeze().loss_scaling("static")


def test_amp_modes_set_the_16_bit_type_and_whether_the_loss_is_scaled():
    from tr.core.dtype import DType

    for mode, enabled, dtype, low, scale in ((True, True, "fp16", DType.FP16, 65536.0),
                                             ("fp16", True, "fp16", DType.FP16, 65536.0),
                                             ("bf16", True, "bf16", DType.BF16, 1.0),
                                             (False, False, "fp16", None, 1.0), ("off", False, "fp16", None, 1.0)):
        s = Settings().amp(mode)
        assert (s.amp_enabled, s.amp_dtype, s.low_dtype, s.loss_scale) == (enabled, dtype, low, scale), mode
        assert s.amp_mode == (dtype if enabled else "off")
    assert Settings().amp("bf16").amp("off").amp_dtype == "fp16"  # off is one state, whatever came before
    for bad in ("bf8", "FP16", 1, None, "float16"):
        with pytest.raises(ConfigError, match=r"settings\.amp must be True, False, 'fp16', 'bf16' or 'off', got "):
            Settings().amp(bad)
    s = Settings().amp("bf16").freeze()
    assert s.amp("bf16") is s
    with pytest.raises(FrozenError, match="cannot change amp_dtype to 'fp16'"):
        s.amp("fp16")


def test_a_frozen_setting_takes_the_value_it_already_has_and_refuses_any_other():
    """A second task built by the same script re-applies its settings after the first task's compile froze them:
    an unchanged value is no change; a different one (or one of another type) still raises."""
    s = Settings().manual_seed(7).global_batch_size(64).freeze()
    assert s.manual_seed(7) is s and s.global_batch_size(64) is s
    with pytest.raises(FrozenError, match="cannot change seed to 8"):
        s.manual_seed(8)
    with pytest.raises(FrozenError, match="cannot change amp_enabled to True"):
        s.amp(True)


def test_same_value_compares_arrays_by_content_and_never_raises():
    import numpy as np

    from tr.core.config import same_value

    a = np.arange(3.0)
    assert same_value(a, a.copy()) and not same_value(a, a + 1) and not same_value(a, a.astype(np.float32))

    class Ambiguous:
        def __eq__(self, other):
            raise ValueError("no")

    assert not same_value(Ambiguous(), Ambiguous())
