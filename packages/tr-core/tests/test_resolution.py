"""Progressive resizing's schedule (tr.core.resolution): FFCV's get_resolution, and its checks at the call."""

import numpy as np
import pytest

from tr.core.errors import ConfigError
from tr.core.resolution import ResolutionRamp
from tr.core.settings import Settings


def _ffcv(epoch: int, min_res: int, max_res: int, end_ramp: int, start_ramp: int) -> int:
    """ffcv-imagenet's get_resolution, as its train_imagenet.py states it (the reference the ramp follows)."""
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    interp = np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])
    return int(np.round(interp[0] / 32)) * 32


def test_the_ramp_is_ffcvs_rule_epoch_by_epoch():
    ramp = ResolutionRamp(160, 192, 65, 76)  # ffcv-imagenet's ResNet-50 recipe (88 epochs)
    assert ramp.schedule(88) == tuple(_ffcv(e, 160, 192, 76, 65) for e in range(88))
    wide = ResolutionRamp(128, 256, 2, 8)  # several steps of 32; np.round rounds the halves to even
    assert wide.schedule(10) == tuple(_ffcv(e, 128, 256, 8, 2) for e in range(10))
    assert wide.schedule(10) == (128, 128, 128, 160, 160, 192, 224, 224, 256, 256)
    assert ResolutionRamp(16, 32, 0, 2, multiple=8).schedule(4) == (16, 24, 32, 32)  # another multiple


def test_train_resolution_ramps_over_the_whole_run():
    s = Settings().train_resolution(128, 224)
    assert (s.train_res_begin, s.train_res_end) == (128, 224)
    assert s.res_ramp.schedule(4) == (128, 160, 192, 224)  # first epoch 128, last 224
    assert s.res_ramp.schedule(1) == (224,)  # one epoch: the final side
    one = Settings().train_resolution(224)
    assert one.res_ramp is None and one.train_res_end == 224  # one side: no schedule
    p = Settings().progressive_resizing(160, 192, 65, 76)
    assert p.res_ramp == ResolutionRamp(160, 192, 65, 76, 32) and p.train_res_end == 192


@pytest.mark.parametrize("call, msg", [
    (lambda s: s.progressive_resizing(160, 200, 1, 3), r"max_res 200 is not a multiple of 32 .*192 or 224"),
    (lambda s: s.progressive_resizing(150, 192, 1, 3), r"min_res 150 is not a multiple of 32"),
    (lambda s: s.train_resolution(130, 224), r"min_res 130 is not a multiple of 32"),
    (lambda s: s.progressive_resizing(192, 160, 1, 3), r"must grow to its final side .* max_res 160 < min_res 192"),
    (lambda s: s.train_resolution(224, 128), r"max_res 128 < min_res 224"),
    (lambda s: s.progressive_resizing(160, 192, 5, 3), r"end_ramp 3 is before start_ramp 5"),
    (lambda s: s.progressive_resizing(160, 192, -1, 3), r"start_ramp must be >= 0, got -1"),
    (lambda s: s.progressive_resizing(160, 192, 1, 3.5), r"end_ramp must be an integer, got 3.5"),
    (lambda s: s.progressive_resizing(16, 32, 1, 3, multiple=0), r"multiple must be >= 1, got 0"),
    (lambda s: s.progressive_resizing(0, 32, 1, 3), r"min_res must be >= 1, got 0"),
])
def test_a_bad_schedule_is_refused_at_the_call(call, msg):
    s = Settings()
    with pytest.raises(ConfigError, match=msg):
        call(s)
    assert s.res_ramp is None  # nothing set


def test_a_ramp_that_ends_after_the_run_is_refused():
    with pytest.raises(ConfigError, match=r"with total_epochs 5 the last epoch trains at 160, not the final side "
                                          r"192 \(end_ramp 9 is past the last epoch 4"):
        ResolutionRamp(160, 192, 3, 9).schedule(5)
