"""The reference update rules: against a scalar closed form (every kind, weight and bias paths, 10 steps)
and against torch.optim where the rule is the same."""

import math

import numpy as np
import pytest
import torch

from tr.algo.optimizer import LARS, SGD, Adam, AdamW, OptimizerKind
from tr.algo.update import (
    OptimizerState,
    adam_bias_correction,
    apply_rule,
    init_state,
    lars_trust_ratio,
    step_bias,
    step_weight,
)
from tr.core.errors import ConfigError, ShapeError

K = OptimizerKind
STEPS = 10
LRS = [0.1 * 0.8**i for i in range(STEPS)]  # a changing LR, as a scheduler gives
CONFIGS = {
    K.SGD: SGD().momentum(0).weight_decay(0.05),
    K.SGD_MOMENTUM: SGD().momentum(0.9).weight_decay(0.05),
    K.SGD_NESTEROV: SGD().momentum(0.8).weight_decay(0.05).nesterov(True),
    K.LARS: LARS().momentum(0.9).weight_decay(0.01).trust_coefficient(0.02),
    K.LARS_NESTEROV: LARS().momentum(0.85).weight_decay(0.01).trust_coefficient(0.02).nesterov(True),
    K.ADAM: Adam().betas(0.8, 0.95).eps(1e-6).weight_decay(0.05),
    K.ADAMW: AdamW().betas(0.8, 0.95).eps(1e-6).weight_decay(0.05),
}


def _data(seed: int, shape=(4, 1, 1, 6)) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape)
    grads = [rng.standard_normal(shape) * (0.5 + i / STEPS) for i in range(STEPS)]
    return w, grads


def closed_form(kind: OptimizerKind, w0: np.ndarray, grads, lrs, hp: dict, bias: bool) -> np.ndarray:
    """Element-by-element scalar loops of SEED_SYSTEM.md §7 (independent of the vectorised code)."""
    wd = 0.0 if bias else hp["weight_decay"]
    if bias:
        kind = {K.LARS: K.SGD_MOMENTUM, K.LARS_NESTEROV: K.SGD_NESTEROV, K.ADAMW: K.ADAM}.get(kind, kind)
    w = [float(x) for x in w0.ravel()]
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, (gr, lr) in enumerate(zip(grads, lrs), start=1):
        g = [float(x) for x in gr.ravel()]
        if kind in (K.LARS, K.LARS_NESTEROV):
            wn = math.sqrt(sum(x * x for x in w))
            gn = math.sqrt(sum(x * x for x in g))
            eta = hp["trust_coefficient"] * wn / (gn + wd * wn + hp["eps"])
            eta = 1.0 if wn < 1e-12 or gn < 1e-12 else min(eta, hp["trust_clip"])
        for i in range(len(w)):
            if kind is K.SGD:
                w[i] = w[i] * (1 - lr * wd) - lr * g[i]
            elif kind is K.SGD_MOMENTUM:
                m[i] = hp["momentum"] * m[i] + g[i]
                w[i] = w[i] * (1 - lr * wd) - lr * m[i]
            elif kind is K.SGD_NESTEROV:
                m[i] = hp["momentum"] * m[i] + g[i]
                w[i] = w[i] * (1 - lr * wd) - lr * (hp["momentum"] * m[i] + g[i])
            elif kind in (K.LARS, K.LARS_NESTEROV):
                gp = g[i] + wd * w[i]
                m[i] = hp["momentum"] * m[i] + lr * eta * gp
                w[i] = w[i] - m[i] if kind is K.LARS else w[i] - (lr * eta * gp + hp["momentum"] * m[i])
            else:
                b1, b2 = hp["beta1"], hp["beta2"]
                gi = g[i]
                if kind is K.ADAMW:
                    w[i] = w[i] * (1 - lr * wd)
                else:
                    gi = gi + wd * w[i]
                m[i] = b1 * m[i] + (1 - b1) * gi
                v[i] = b2 * v[i] + (1 - b2) * gi * gi
                bc1, bc2 = 1 / (1 - b1**t), 1 / (1 - b2**t)
                w[i] = w[i] - lr * (m[i] * bc1) / (math.sqrt(v[i] * bc2) + hp["eps"])
    return np.array(w).reshape(w0.shape)


def _run(kind, w0, grads, lrs, cfg, bias: bool, dtype=np.float64, scaling: float = 1.0):
    w = w0.astype(dtype)
    rule = cfg.bias_kind if bias else kind
    state = init_state(rule, w)
    step = step_bias if bias else step_weight
    for g, lr in zip(grads, lrs):
        out = step(kind, w, (g * scaling).astype(dtype), state, lr, cfg, scaling=scaling)
        assert out is w
    return w, state


@pytest.mark.parametrize("bias", [False, True], ids=["weight", "bias"])
@pytest.mark.parametrize("kind", list(K), ids=lambda k: k.name)
def test_closed_form_ten_steps(kind, bias):
    cfg = CONFIGS[kind]
    w0, grads = _data(int(kind) * 10 + bias)
    expected = closed_form(kind, w0, grads, LRS, cfg.hyperparams(), bias)
    w64, state = _run(kind, w0, grads, LRS, cfg, bias)
    np.testing.assert_allclose(w64, expected, rtol=1e-12, atol=1e-14)
    assert not np.allclose(w64, w0)
    # float32 arrays: float32 arithmetic, as the kernels do.
    w32, _ = _run(kind, w0, grads, LRS, cfg, bias, dtype=np.float32)
    assert w32.dtype == np.float32
    np.testing.assert_allclose(w32, expected, rtol=2e-5, atol=2e-6)
    # AMP: scaled gradients with the matching scaling give the same result.
    ws, _ = _run(kind, w0, grads, LRS, cfg, bias, scaling=1024.0)
    np.testing.assert_allclose(ws, w64, rtol=1e-12, atol=1e-14)
    if kind in (K.ADAM, K.ADAMW):
        assert state.t == STEPS


def _torch_run(opt_cls, w0, grads, lrs, **kw) -> np.ndarray:
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt = opt_cls([p], lr=lrs[0], **kw)
    for g, lr in zip(grads, lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().numpy()


TORCH_EQUIVALENT = [
    # (our config, path, torch optimizer, kwargs)
    (SGD().momentum(0).weight_decay(0.05), "weight", torch.optim.SGD, {"weight_decay": 0.05}),
    (SGD().momentum(0).weight_decay(0.05), "bias", torch.optim.SGD, {}),
    (SGD().momentum(0.9), "weight", torch.optim.SGD, {"momentum": 0.9}),
    (SGD().momentum(0.9).weight_decay(0.05), "bias", torch.optim.SGD, {"momentum": 0.9}),
    (SGD().momentum(0.8).nesterov(), "weight", torch.optim.SGD, {"momentum": 0.8, "nesterov": True}),
    (SGD().momentum(0.8).nesterov().weight_decay(0.05), "bias", torch.optim.SGD, {"momentum": 0.8, "nesterov": True}),
    (LARS().momentum(0.9).weight_decay(0.05), "bias", torch.optim.SGD, {"momentum": 0.9}),
    (LARS().momentum(0.9).nesterov().weight_decay(0.05), "bias", torch.optim.SGD, {"momentum": 0.9, "nesterov": True}),
    (Adam().betas(0.8, 0.95).eps(1e-6).weight_decay(0.05), "weight", torch.optim.Adam,
     {"betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.05}),
    (Adam().weight_decay(0.05), "bias", torch.optim.Adam, {}),
    (AdamW().betas(0.8, 0.95).eps(1e-6).weight_decay(0.05), "weight", torch.optim.AdamW,
     {"betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.05}),
    (AdamW().weight_decay(0.05), "bias", torch.optim.Adam, {"weight_decay": 0.0}),
]


@pytest.mark.parametrize("cfg,path,opt_cls,kw", TORCH_EQUIVALENT, ids=lambda x: getattr(x, "__name__", None))
def test_matches_torch_optim(cfg, path, opt_cls, kw):
    w0, grads = _data(7, shape=(3, 3, 3, 5))
    ours, _ = _run(cfg.kind, w0, grads, LRS, cfg, bias=(path == "bias"))
    ref = _torch_run(opt_cls, w0, grads, LRS, **kw)
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_with_decay_differs_from_torch(nesterov):
    # Documented difference: torch folds wd*w into the momentum buffer, we decay w outside it.
    cfg = SGD().momentum(0.9).weight_decay(0.1).nesterov(nesterov)
    w0, grads = _data(3)
    ours, _ = _run(cfg.kind, w0, grads, LRS, cfg, bias=False)
    ref = _torch_run(torch.optim.SGD, w0, grads, LRS, momentum=0.9, weight_decay=0.1, nesterov=nesterov)
    assert np.abs(ours - ref).max() > 1e-3
    expected = closed_form(cfg.kind, w0, grads, LRS, cfg.hyperparams(), bias=False)
    np.testing.assert_allclose(ours, expected, rtol=1e-12)


def test_one_step_by_hand():
    w = np.array([1.0, -2.0])
    g = np.array([0.5, 0.25])
    # SGD with decay: w(1 - lr wd) - lr g
    step_weight(K.SGD, w, g, init_state(K.SGD, w), 0.1, SGD().momentum(0).weight_decay(0.5))
    np.testing.assert_allclose(w, [1.0 * 0.95 - 0.05, -2.0 * 0.95 - 0.025])
    # First Adam step: m = (1-b1) g, v = (1-b2) g^2, so the step is lr * g / (|g| + eps') = lr * sign(g).
    w = np.array([1.0, -2.0])
    step_weight(K.ADAM, w, g, init_state(K.ADAM, w), 0.01, Adam().eps(1e-12))
    np.testing.assert_allclose(w, [0.99, -2.01], rtol=1e-9)
    # LARS: ||w|| = 5, ||g|| = 1, wd = 0: eta = tc * 5 / (1 + eps); m = lr eta g; w -= m.
    w = np.array([3.0, 4.0])
    g = np.array([0.6, 0.8])
    st = init_state(K.LARS, w)
    step_weight(K.LARS, w, g, st, 0.5, LARS().trust_coefficient(0.1).eps(1e-9))
    eta = 0.1 * 5 / (1 + 1e-9)
    assert st.trust_ratio == pytest.approx(eta, rel=1e-12)
    np.testing.assert_allclose(st.m, 0.5 * eta * g)
    np.testing.assert_allclose(w, [3.0 - 0.5 * eta * 0.6, 4.0 - 0.5 * eta * 0.8])


def test_lars_trust_ratio_guards():
    w = np.full(10, 2.0)
    g = np.full(10, 0.5)
    kw = {"weight_decay": 0.1, "trust_coefficient": 0.01, "eps": 1e-8}
    wn, gn = math.sqrt(40.0), math.sqrt(2.5)
    assert lars_trust_ratio(w, g, **kw) == pytest.approx(0.01 * wn / (gn + 0.1 * wn + 1e-8), rel=1e-12)
    assert lars_trust_ratio(np.zeros(10), g, **kw) == 1.0
    assert lars_trust_ratio(w, np.zeros(10), **kw) == 1.0
    assert lars_trust_ratio(w, np.full(10, 1e-14), **kw) == 1.0
    assert lars_trust_ratio(w, g, has_nan=True, **kw) == 1.0
    big = {"weight_decay": 0.0, "trust_coefficient": 1.0, "eps": 1e-8}
    assert lars_trust_ratio(w, g * 1e-6, **big) == 100.0  # clipped
    assert lars_trust_ratio(w, g * 1e-6, trust_clip=1e9, **big) == pytest.approx(wn / (gn * 1e-6 + 1e-8))


@pytest.mark.parametrize("kind", list(K), ids=lambda k: k.name)
def test_skipped_step_changes_nothing(kind):
    cfg = CONFIGS[kind]
    w0, grads = _data(11)
    w = w0.copy()
    st = init_state(kind, w)
    step_weight(kind, w, grads[0], st, 0.1, cfg)
    snap = (w.copy(), None if st.m is None else st.m.copy(), None if st.v is None else st.v.copy(), st.t)
    bad = grads[1].copy()
    bad[0, 0, 0, 0] = np.nan
    step_weight(kind, w, bad, st, 0.1, cfg, skip=True)
    step_bias(kind, w, bad, st if cfg.bias_kind == kind else init_state(cfg.bias_kind, w), 0.1, cfg, skip=True)
    np.testing.assert_array_equal(w, snap[0])
    if st.m is not None:
        np.testing.assert_array_equal(st.m, snap[1])
    if st.v is not None:
        np.testing.assert_array_equal(st.v, snap[2])
    assert st.t == snap[3]  # Adam's t counts applied steps only


def test_adam_bias_correction():
    assert adam_bias_correction(0.9, 0.999, 1) == pytest.approx((10.0, 1000.0))
    bc1, bc2 = adam_bias_correction(0.9, 0.999, 100)
    assert bc1 == pytest.approx(1 / (1 - 0.9**100)) and bc2 == pytest.approx(1 / (1 - 0.999**100))
    with pytest.raises(ConfigError, match="t must be >= 1"):
        adam_bias_correction(0.9, 0.999, 0)


def test_mapping_config_and_apply_rule():
    w0, grads = _data(5)
    hp = {"weight_decay": 0.05, "momentum": 0.9}
    a = w0.copy()
    b = w0.copy()
    sa, sb = init_state(K.SGD_MOMENTUM, a), init_state(K.SGD_MOMENTUM, b)
    step_weight(K.SGD_MOMENTUM, a, grads[0], sa, 0.1, hp)
    apply_rule(K.SGD_MOMENTUM, b, grads[0], sb, 0.1, hp)
    np.testing.assert_array_equal(a, b)
    c = w0.copy()
    step_bias(K.SGD_MOMENTUM, c, grads[0], init_state(K.SGD_MOMENTUM, c), 0.1, hp)  # wd forced to 0
    np.testing.assert_allclose(c, w0 - 0.1 * grads[0])


def test_bad_calls():
    w = np.zeros(4, dtype=np.float32)
    g = np.ones(4, dtype=np.float32)
    with pytest.raises(ConfigError, match="lr must be >= 0"):
        step_weight(K.SGD, w, g, OptimizerState(), -0.1, SGD().momentum(0))
    with pytest.raises(ConfigError, match="scaling must be > 0"):
        step_weight(K.SGD, w, g, OptimizerState(), 0.1, SGD().momentum(0), scaling=0)
    with pytest.raises(ConfigError, match="does not match"):
        step_weight(K.ADAM, w, g, init_state(K.ADAM, w), 0.1, SGD())
    with pytest.raises(ConfigError, match="needs state buffer 'm'"):
        step_weight(K.SGD_MOMENTUM, w, g, OptimizerState(), 0.1, SGD())
    with pytest.raises(ShapeError, match="gradient shape"):
        step_weight(K.SGD, w, np.ones(5), OptimizerState(), 0.1, SGD().momentum(0))
    with pytest.raises(ShapeError, match="state buffer 'v'"):
        step_weight(K.ADAM, w, g, OptimizerState(m=np.zeros(4), v=np.zeros(3)), 0.1, Adam())
    with pytest.raises(ConfigError, match="needs hyper-parameters"):
        step_weight(K.ADAM, w, g, init_state(K.ADAM, w), 0.1, {"weight_decay": 0.0})
    with pytest.raises(ConfigError, match="float numpy array"):
        step_weight(K.SGD, [0.0, 0.0], [1.0, 1.0], OptimizerState(), 0.1, SGD().momentum(0))


def test_init_state_buffers():
    w = np.ones((2, 3), dtype=np.float32)
    assert init_state(K.SGD, w).m is None
    st = init_state(K.ADAMW, w)
    assert st.m.dtype == np.float32 and st.v.shape == (2, 3) and st.t == 0
    lars = init_state(K.LARS, w)
    assert lars.m is not None and lars.v is None and lars.trust_ratio == 1.0
