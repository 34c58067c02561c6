"""Reference update rules: the executable spec that every backend's optimizer kernels are tested against
(tests-integration/test_optimizer_reference.py holds the CPU kernels to it; the GPU tests hold CUDA to CPU).

Notation: g = grad * (1 / scaling) (scaling is the AMP loss scale, 1 in FP32); gradients are already
mean-reduced over ranks. When the step is skipped (the device NaN/Inf flag is set) nothing changes, not
even Adam's step count (the seed increments t on skipped steps; we do not, like torch's GradScaler).

    SGD            w <- w(1 - lr wd) - lr g
    SGD_MOMENTUM   m <- b m + g;                   w <- w(1 - lr wd) - lr m
    SGD_NESTEROV   m <- b m + g;                   w <- w(1 - lr wd) - lr (b m + g)        (new m)
    LARS           e = trust_ratio(w, g);  g' = g + wd w;  m <- b m + lr e g';  w <- w - m
    LARS_NESTEROV  same e, g', m;                  w <- w - (lr e g' + b m)                (new m)
    ADAM           g' = g + wd w;  t <- t + 1;  m <- b1 m + (1 - b1) g';  v <- b2 v + (1 - b2) g'^2
                   w <- w - lr (m bc1) / (sqrt(v bc2) + eps),   bc1 = 1/(1 - b1^t),  bc2 = 1/(1 - b2^t)
    ADAMW          w <- w(1 - lr wd);  then ADAM with g (no wd term)

    trust_ratio = tc ||w|| / (||g|| + wd ||w|| + eps), = 1 if ||w|| < 1e-12 or ||g|| < 1e-12, clipped at
    trust_clip (100); one ratio per weight tensor, norms over the tensor's elements (not slot padding).

Bias-like parameters (BN gamma/beta, FC bias) use ``bias_rule(kind)`` with weight decay 0 and no trust
ratio: LARS -> SGD_MOMENTUM, LARS_NESTEROV -> SGD_NESTEROV, ADAMW -> ADAM. Note that under LARS the weight
path's m has lr folded in and the bias path's m does not.

Arithmetic runs in the arrays' dtype (float32 arrays give float32 results, like the kernels); the norms
and the bias corrections are computed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tr.algo import _validate as v
from tr.algo.optimizer import RULE_HYPERPARAMS, OptimizerKind, Slot, bias_rule, slots_for
from tr.core.errors import ConfigError, ShapeError

LARS_NORM_FLOOR = 1e-12


@dataclass
class OptimizerState:
    """Per-tensor optimizer state: the slot buffers, Adam's step count, LARS's last trust ratio."""

    m: np.ndarray | None = None
    v: np.ndarray | None = None
    t: int = 0
    trust_ratio: float = 1.0


def init_state(kind: OptimizerKind, w: np.ndarray) -> OptimizerState:
    """Zeroed state for rule ``kind`` and a parameter like ``w`` (what init does to the MOMENT1 and MOMENT2 regions)."""
    slots = slots_for(kind)
    w = np.asarray(w)
    return OptimizerState(
        m=np.zeros_like(w) if Slot.M in slots else None,
        v=np.zeros_like(w) if Slot.V in slots else None,
    )


def adam_bias_correction(beta1: float, beta2: float, t: int) -> tuple[float, float]:
    """(bc1, bc2) = (1/(1 - beta1^t), 1/(1 - beta2^t)) for step t >= 1."""
    t = v.integer("t", t, 1)
    return 1.0 / (1.0 - float(beta1) ** t), 1.0 / (1.0 - float(beta2) ** t)


def lars_trust_ratio(
    w: np.ndarray,
    g: np.ndarray,
    *,
    weight_decay: float,
    trust_coefficient: float,
    eps: float,
    trust_clip: float = 100.0,
    has_nan: bool = False,
) -> float:
    """The LARS ratio for one weight tensor; ``g`` is the unscaled gradient."""
    if has_nan:
        return 1.0
    wn = math.sqrt(float(np.sum(np.square(np.asarray(w, dtype=np.float64)))))
    gn = math.sqrt(float(np.sum(np.square(np.asarray(g, dtype=np.float64)))))
    if wn < LARS_NORM_FLOOR or gn < LARS_NORM_FLOOR:
        return 1.0
    eta = trust_coefficient * wn / (gn + weight_decay * wn + eps)
    return min(eta, trust_clip)


def _hyper(kind: OptimizerKind, cfg: object) -> dict[str, float]:
    """Hyper-parameters of rule ``kind`` from an optimizer config or a mapping of canonical names."""
    hp = cfg.hyperparams() if hasattr(cfg, "hyperparams") else cfg
    if not isinstance(hp, Mapping):
        raise ConfigError(f"cfg must be an optimizer config or a mapping of hyper-parameters, got {cfg!r}")
    missing = [k for k in RULE_HYPERPARAMS[kind] if k not in hp]
    if missing:
        raise ConfigError(f"rule {kind.name} needs hyper-parameters {missing}, cfg has {sorted(hp)}")
    return {k: float(hp[k]) for k in RULE_HYPERPARAMS[kind]}


def _check_arrays(w: np.ndarray, g: np.ndarray, state: OptimizerState, kind: OptimizerKind) -> None:
    if not isinstance(w, np.ndarray) or not np.issubdtype(w.dtype, np.floating):
        raise ConfigError(f"w must be a float numpy array (updated in place), got {type(w).__name__}")
    if np.shape(g) != w.shape:
        raise ShapeError(f"gradient shape {np.shape(g)} differs from parameter shape {w.shape}")
    for slot in slots_for(kind):
        if slot is Slot.N:
            continue
        buf = getattr(state, slot.value)
        if buf is None:
            raise ConfigError(f"rule {kind.name} needs state buffer {slot.value!r}; use init_state({kind.name}, w)")
        if buf.shape != w.shape:
            raise ShapeError(f"state buffer {slot.value!r} has shape {buf.shape}, parameter has {w.shape}")


def apply_rule(
    kind: OptimizerKind,
    w: np.ndarray,
    grad: np.ndarray,
    state: OptimizerState,
    lr: float,
    hp: Mapping[str, float],
    *,
    scaling: float = 1.0,
    skip: bool = False,
) -> np.ndarray:
    """One update of rule ``kind`` with explicit hyper-parameters; w and the state change in place."""
    kind = OptimizerKind(kind)
    lr = v.non_negative("lr", lr)
    scaling = v.positive("scaling", scaling)
    _check_arrays(w, grad, state, kind)
    hp = _hyper(kind, hp)
    if skip:
        return w
    dt = w.dtype.type
    g = np.asarray(grad, dtype=w.dtype) * dt(1.0 / scaling)
    wd = hp["weight_decay"]

    if kind is OptimizerKind.SGD:
        w *= dt(1.0 - lr * wd)
        w -= dt(lr) * g
    elif kind in (OptimizerKind.SGD_MOMENTUM, OptimizerKind.SGD_NESTEROV):
        b = dt(hp["momentum"])
        m = state.m
        m *= b
        m += g
        w *= dt(1.0 - lr * wd)
        if kind is OptimizerKind.SGD_MOMENTUM:
            w -= dt(lr) * m
        else:
            w -= dt(lr) * (b * m + g)
    elif kind in (OptimizerKind.LARS, OptimizerKind.LARS_NESTEROV):
        eta = lars_trust_ratio(
            w, g, weight_decay=wd, trust_coefficient=hp["trust_coefficient"], eps=hp["eps"],
            trust_clip=hp["trust_clip"],
        )
        state.trust_ratio = eta
        b = dt(hp["momentum"])
        step = dt(lr * eta) * (g + dt(wd) * w)
        m = state.m
        m *= b
        m += step
        if kind is OptimizerKind.LARS:
            w -= m
        else:
            w -= step + b * m
    else:  # ADAM, ADAMW
        b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
        if kind is OptimizerKind.ADAMW:
            w *= dt(1.0 - lr * wd)
        elif wd != 0.0:
            g = g + dt(wd) * w
        state.t += 1
        bc1, bc2 = adam_bias_correction(b1, b2, state.t)
        m, vv = state.m, state.v
        m *= dt(b1)
        m += dt(1.0 - b1) * g
        vv *= dt(b2)
        vv += dt(1.0 - b2) * (g * g)
        w -= dt(lr) * (m * dt(bc1)) / (np.sqrt(vv * dt(bc2)) + dt(eps))
    return w


def step_weight(
    kind: OptimizerKind,
    w: np.ndarray,
    g: np.ndarray,
    state: OptimizerState,
    lr: float,
    cfg: object,
    *,
    scaling: float = 1.0,
    skip: bool = False,
) -> np.ndarray:
    """Update a decayed weight tensor (FC weight, conv weight) in place with the optimizer's own rule.

    ``cfg`` is an optimizer config (its kind must be ``kind``) or a mapping of canonical hyper-parameters.
    Returns ``w``.
    """
    kind = OptimizerKind(kind)
    _same_kind(kind, cfg)
    return apply_rule(kind, w, g, state, lr, _hyper(kind, cfg), scaling=scaling, skip=skip)


def step_bias(
    kind: OptimizerKind,
    w: np.ndarray,
    g: np.ndarray,
    state: OptimizerState,
    lr: float,
    cfg: object,
    *,
    scaling: float = 1.0,
    skip: bool = False,
) -> np.ndarray:
    """Update a bias-like tensor (BN gamma/beta, FC bias) under optimizer ``kind``: ``bias_rule(kind)``
    with weight decay 0 and no trust ratio. Returns ``w``."""
    kind = OptimizerKind(kind)
    _same_kind(kind, cfg)
    rule = bias_rule(kind)
    hp = cfg.hyperparams() if hasattr(cfg, "hyperparams") else dict(cfg)  # type: ignore[arg-type]
    hp = {**hp, "weight_decay": 0.0}
    return apply_rule(rule, w, g, state, lr, _hyper(rule, hp), scaling=scaling, skip=skip)


def _same_kind(kind: OptimizerKind, cfg: object) -> None:
    cfg_kind = getattr(cfg, "kind", None)
    if cfg_kind is not None and cfg_kind != kind:
        raise ConfigError(f"kind {kind.name} does not match the optimizer config's kind {cfg_kind.name}")
