import math

import pytest

from tr.algo.optimizer import (
    LARS,
    RULE_HYPERPARAMS,
    SGD,
    Adam,
    AdamW,
    OptimizerKind,
    Slot,
    bias_rule,
    slots_for,
)
from tr.core.errors import ConfigError

K = OptimizerKind


def test_kinds_follow_the_fluent_settings():
    assert SGD().kind is K.SGD_MOMENTUM  # the seed's default momentum is 0.9
    assert SGD().momentum(0).kind is K.SGD
    assert SGD().momentum(0.5).kind is K.SGD_MOMENTUM
    assert SGD().nesterov(True).kind is K.SGD_NESTEROV
    assert SGD().nesterov(True).nesterov(False).kind is K.SGD_MOMENTUM
    assert LARS().kind is K.LARS
    assert LARS().nesterov().kind is K.LARS_NESTEROV
    assert Adam().kind is K.ADAM
    assert AdamW().kind is K.ADAMW
    assert [k.name for k in K] == [
        "SGD", "SGD_MOMENTUM", "SGD_NESTEROV", "LARS", "LARS_NESTEROV", "ADAM", "ADAMW"
    ]


def test_seed_defaults():
    assert (SGD().beta, SGD().wd, SGD().nesterov_enabled) == (0.9, 0.0, False)
    lars = LARS()
    assert (lars.beta, lars.wd, lars.trust, lars.epsilon, lars.trust_clip) == (0.9, 0.0, 0.001, 1e-8, 100.0)
    for cls in (Adam, AdamW):
        a = cls()
        assert (a.beta1, a.beta2, a.epsilon, a.wd) == (0.9, 0.999, 1e-8, 0.0)


def test_setters_return_new_values_and_leave_the_original():
    a = SGD()
    b = a.momentum(0.8).weight_decay(5e-4).nesterov(True)
    assert (a.beta, a.wd, a.nesterov_enabled) == (0.9, 0.0, False)
    assert (b.beta, b.wd, b.nesterov_enabled) == (0.8, 5e-4, True)
    assert b == SGD(beta=0.8, wd=5e-4, nesterov_enabled=True)
    assert hash(b) == hash(SGD(beta=0.8, wd=5e-4, nesterov_enabled=True))
    with pytest.raises(AttributeError):
        b.beta = 0.1  # type: ignore[misc]
    w = AdamW().betas(0.8, 0.99).eps(1e-6).weight_decay(0.05)
    assert type(w) is AdamW and w.kind is K.ADAMW
    assert (w.beta1, w.beta2, w.epsilon, w.wd) == (0.8, 0.99, 1e-6, 0.05)
    lars = LARS().momentum(0.8).weight_decay(1e-4).trust_coefficient(0.02).eps(1e-6).trust_ratio_clip(10)
    assert (lars.beta, lars.wd, lars.trust, lars.epsilon, lars.trust_clip) == (0.8, 1e-4, 0.02, 1e-6, 10.0)


def test_slots_and_bias_rules():
    assert SGD().momentum(0).slots == ()
    assert SGD().slots == (Slot.M,)
    assert SGD().nesterov().slots == ("m",)  # Slot is a str enum
    assert LARS().slots == (Slot.M, Slot.N)
    assert Adam().slots == (Slot.M, Slot.V) == AdamW().slots
    expected = {K.SGD: K.SGD, K.SGD_MOMENTUM: K.SGD_MOMENTUM, K.SGD_NESTEROV: K.SGD_NESTEROV,
                K.LARS: K.SGD_MOMENTUM, K.LARS_NESTEROV: K.SGD_NESTEROV, K.ADAM: K.ADAM, K.ADAMW: K.ADAM}
    for k, b in expected.items():
        assert bias_rule(k) is b
    assert LARS().bias_kind is K.SGD_MOMENTUM and slots_for(LARS().bias_kind) == (Slot.M,)
    assert AdamW().bias_kind is K.ADAM
    assert Adam().needs_step_count and AdamW().needs_step_count
    assert not SGD().needs_step_count and not LARS().needs_step_count


def test_hyperparams_use_canonical_names():
    assert SGD().momentum(0).weight_decay(0.1).hyperparams() == {"weight_decay": 0.1}
    assert SGD().weight_decay(0.1).hyperparams() == {"weight_decay": 0.1, "momentum": 0.9}
    assert LARS().weight_decay(0.1).hyperparams() == {
        "weight_decay": 0.1, "momentum": 0.9, "trust_coefficient": 0.001, "eps": 1e-8, "trust_clip": 100.0
    }
    assert AdamW().weight_decay(0.1).hyperparams() == {"weight_decay": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    for cfg in (SGD().momentum(0), SGD(), SGD().nesterov(), LARS(), LARS().nesterov(), Adam(), AdamW()):
        assert set(cfg.hyperparams()) == set(RULE_HYPERPARAMS[cfg.kind])
        bias_hp = cfg.weight_decay(0.3).bias_hyperparams()
        assert set(bias_hp) == set(RULE_HYPERPARAMS[cfg.bias_kind]) and bias_hp["weight_decay"] == 0.0
    assert LARS().momentum(0.7).bias_hyperparams() == {"weight_decay": 0.0, "momentum": 0.7}


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda x: SGD().momentum(x), "momentum"),
        (lambda x: SGD().weight_decay(x), "weight_decay"),
        (lambda x: LARS().momentum(x), "momentum"),
        (lambda x: LARS().weight_decay(x), "weight_decay"),
        (lambda x: LARS().trust_coefficient(x), "trust_coefficient"),
        (lambda x: LARS().eps(x), "eps"),
        (lambda x: LARS().trust_ratio_clip(x), "trust_ratio_clip"),
        (lambda x: Adam().betas(x, 0.999), "beta1"),
        (lambda x: Adam().betas(0.9, x), "beta2"),
        (lambda x: Adam().eps(x), "eps"),
        (lambda x: AdamW().weight_decay(x), "weight_decay"),
    ],
)
def test_every_setter_rejects_bad_values(make, name):
    for bad in (-0.1, float("nan"), float("inf"), "0.1", None, True):
        with pytest.raises(ConfigError, match=name):
            make(bad)


def test_ranges():
    for bad in (1.0, 1.5):
        with pytest.raises(ConfigError, match=r"momentum must be in \[0, 1\)"):
            SGD().momentum(bad)
        with pytest.raises(ConfigError, match="beta2"):
            Adam().betas(0.9, bad)
    for bad in (0.0, -1e-8):
        with pytest.raises(ConfigError, match="eps must be > 0"):
            Adam().eps(bad)
        with pytest.raises(ConfigError, match="trust_coefficient must be > 0"):
            LARS().trust_coefficient(bad)
    assert Adam().betas(0.0, 0.0).beta1 == 0.0  # 0 is a legal beta
    assert SGD().weight_decay(0).wd == 0.0
    with pytest.raises(ConfigError, match="nesterov must be True or False"):
        SGD().nesterov(1)
    with pytest.raises(ConfigError, match="nesterov needs momentum > 0"):
        SGD().nesterov(True).momentum(0)
    with pytest.raises(ConfigError, match="nesterov needs momentum > 0"):
        LARS(beta=0.0, nesterov_enabled=True)
    with pytest.raises(ConfigError, match="weight_decay must be >= 0, got -1"):
        SGD(wd=-1)


def test_momentum_sets_beta():
    # (which parameters are decayed or bias-like is a trait of their memory group: tr.graph.layers.groups)
    assert math.isclose(SGD().momentum(0.25).beta, 0.25)
