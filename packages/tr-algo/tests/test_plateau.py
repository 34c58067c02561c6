"""ReduceLROnPlateau's rule against torch.optim.lr_scheduler.ReduceLROnPlateau fed the same metric sequences (the
LR after every epoch), its prepared table, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tr.algo.plateau import PlateauState, ReduceLROnPlateau
from tr.core.errors import ConfigError

RNG = np.random.default_rng(11)
SEQUENCES = {
    "noisy_decline": list(2.0 * np.exp(-np.arange(40) / 10) + RNG.normal(0, 0.05, 40)),
    "flat": [1.0] * 25,
    "rising": list(np.linspace(0.1, 0.9, 20)),
    "with_nan": [1.0, 0.9, float("nan"), 0.95, 0.97, 0.99, 0.8, 0.81, 0.82, 0.83],
}
CONFIGS = {
    "default": lambda s: s,
    "patience0_factor_half": lambda s: s.patience(0).factor(0.5),
    "cooldown": lambda s: s.patience(1).cooldown(2).factor(0.5),
    "abs_threshold": lambda s: s.patience(2).threshold(0.05, "abs"),
    "min_lr": lambda s: s.patience(0).factor(0.3).min_lr(0.02),
    "max_mode": lambda s: s.monitor("top1").patience(1).factor(0.5),
}
TORCH_ARGS = {
    "default": {}, "patience0_factor_half": dict(patience=0, factor=0.5),
    "cooldown": dict(patience=1, cooldown=2, factor=0.5), "abs_threshold": dict(patience=2, threshold=0.05,
                                                                                threshold_mode="abs"),
    "min_lr": dict(patience=0, factor=0.3, min_lr=0.02), "max_mode": dict(mode="max", patience=1, factor=0.5),
}


@pytest.mark.parametrize("seq", sorted(SEQUENCES))
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_lr_after_every_epoch_is_torch_s(seq, config):
    values = SEQUENCES[seq]
    rule = CONFIGS[config](ReduceLROnPlateau(0.1).patience(3)).prepare(len(values), 5)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    ref = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **{"patience": 3, **TORCH_ARGS[config]})
    state = rule.start()
    for k, value in enumerate(values):
        state = rule.observe(state, value)
        ref.step(value)
        assert state.lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12), f"epoch {k}"
        assert state.bad_epochs == ref.num_bad_epochs and state.cooldown_left == ref.cooldown_counter, f"epoch {k}"


def test_the_prepared_table_is_base_after_the_warmup_and_reductions_are_written_from_their_step():
    rule = ReduceLROnPlateau(0.4).warmup(1).warmup_start_factor(0.5).prepare(4, 5)
    table = rule.table()
    np.testing.assert_allclose(table[:5], [0.2, 0.24, 0.28, 0.32, 0.36], rtol=1e-6)
    assert (table[5:] == np.float32(0.4)).all()
    t = rule.table_with(((3, 0.2), (12, 0.1)))
    np.testing.assert_allclose(t[:3], table[:3])  # trained before the first reduction: unchanged
    np.testing.assert_allclose(t[3:5], table[3:5] * 0.5, rtol=1e-6)  # the rest of the ramp, scaled
    assert (t[5:12] == np.float32(0.2)).all() and (t[12:] == np.float32(0.1)).all()


def test_the_state_round_trips_and_a_garbled_one_is_refused():
    s = PlateauState(best=math.inf, lr=0.05, bad_epochs=2, cooldown_left=1, changes=((10, 0.05),))
    assert PlateauState.from_dict(s.as_dict()) == s
    for bad in ({}, {**s.as_dict(), "lr": "x"}, {**s.as_dict(), "bad_epochs": -1},
                {**s.as_dict(), "changes": [[5, 0.1], [2, 0.05]]}, {**s.as_dict(), "lr": float("nan")}):
        with pytest.raises(ConfigError, match="plateau state"):
            PlateauState.from_dict(bad)


@pytest.mark.parametrize("make,message", [
    (lambda: ReduceLROnPlateau(0.1).factor(1.0), r"plateau factor must be in \(0, 1\)"),
    (lambda: ReduceLROnPlateau(0.1).factor(0), r"plateau factor must be in \(0, 1\)"),
    (lambda: ReduceLROnPlateau(0.1).patience(-1), "plateau patience must be"),
    (lambda: ReduceLROnPlateau(0.1).threshold(0.1, "relative"), "threshold mode must be one of"),
    (lambda: ReduceLROnPlateau(0.1).monitor("accuracy"), "monitored metric must be one of"),
    (lambda: ReduceLROnPlateau(0.1).monitor("top1", mode="min"), "an accuracy: it improves upwards"),
    (lambda: ReduceLROnPlateau(0.1).monitor("val_loss", mode="max"), "a loss: it improves downwards"),
    (lambda: ReduceLROnPlateau(0.1).min_lr(-1), "plateau min_lr must be >= 0"),
])
def test_bad_values_are_refused_when_set(make, message):
    with pytest.raises(ConfigError, match=message):
        make()
