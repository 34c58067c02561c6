import pytest

from tr.core.errors import ConfigError, FrozenError
from tr.core.settings import GLOBAL_SETTING, Settings, parse_gpu_list, reset_global_settings


def test_fluent_chain():
    s = Settings().use_gpu("0,1").amp(True).manual_seed(7).global_batch_size(256).train_resolution(224)
    assert s.gpu_ids == (0, 1) and s.world_size == 2 and s.local_batch_size == 128
    assert s.amp_enabled and s.loss_scale == 8192.0 and s.train_res_begin == 224


@pytest.mark.parametrize("spec,msg", [("0,,1", "empty entry"), ("x", "'x' is not a device number"),
                                      ("0,0", "twice"), ("", "empty entry"), ("-1", "not a device")])
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
    with pytest.raises(ConfigError, match="amp must be True or False"):
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
