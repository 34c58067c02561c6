"""Optimizer configurations: immutable, fluent, validated values. No learning rate: the scheduler owns it.

    SGD().momentum(0)                       -> OptimizerKind.SGD
    SGD().momentum(0.9).weight_decay(5e-5)  -> OptimizerKind.SGD_MOMENTUM     (SGD() alone is this: momentum 0.9)
    SGD().nesterov(True)                    -> OptimizerKind.SGD_NESTEROV
    LARS().trust_coefficient(0.001)         -> OptimizerKind.LARS
    LARS().nesterov(True)                   -> OptimizerKind.LARS_NESTEROV
    Adam().betas(0.9, 0.999).eps(1e-8)      -> OptimizerKind.ADAM   (weight decay as L2 added to the gradient)
    AdamW().weight_decay(1e-4)              -> OptimizerKind.ADAMW  (decoupled weight decay)

Every setter returns a new value and checks its argument (ConfigError naming it). Setters follow the seed's
names; the stored fields have their own names where a setter would clash (``momentum()`` sets ``beta``,
``weight_decay()`` sets ``wd``, ``eps()`` sets ``epsilon``, ``nesterov()`` sets ``nesterov_enabled``,
``trust_coefficient()`` sets ``trust``, ``trust_ratio_clip()`` sets ``trust_clip``). ``hyperparams()`` gives
the same numbers under the canonical names the kernels use. The update rules are in ``tr.algo.update``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, IntEnum

from tr.algo import _validate as v
from tr.core.errors import ConfigError
from tr.core.optim import BIAS_RULE, OPTIMIZERS


class OptimizerKind(IntEnum):
    SGD = 0
    SGD_MOMENTUM = 1
    SGD_NESTEROV = 2
    LARS = 3
    LARS_NESTEROV = 4
    ADAM = 5
    ADAMW = 6

    @property
    def spec_name(self) -> str:
        """The optimizer's name in tr.core.optim (what a CompileSpec and the update graphs use)."""
        return OPTIMIZERS[self]

    @classmethod
    def of(cls, name: str) -> OptimizerKind:
        return cls(OPTIMIZERS.index(name))


class Slot(str, Enum):
    """A per-parameter state buffer; the arena holds each in its own memory role (tr.core.memory.Role)."""

    M = "m"  # momentum / first moment (role MOMENT1)
    V = "v"  # second moment (role MOMENT2)
    N = "n"  # LARS per-tensor trust ratio and norms (role TRUST_RATIO)


_SLOTS = {
    OptimizerKind.SGD: (),
    OptimizerKind.SGD_MOMENTUM: (Slot.M,),
    OptimizerKind.SGD_NESTEROV: (Slot.M,),
    OptimizerKind.LARS: (Slot.M, Slot.N),
    OptimizerKind.LARS_NESTEROV: (Slot.M, Slot.N),
    OptimizerKind.ADAM: (Slot.M, Slot.V),
    OptimizerKind.ADAMW: (Slot.M, Slot.V),
}

# Hyper-parameters each rule reads (canonical names). Every rule also needs the per-step scalars lr,
# scaling (loss scale; g = grad / scaling) and the NaN flag; Adam also needs the step count t.
RULE_HYPERPARAMS: dict[OptimizerKind, tuple[str, ...]] = {
    OptimizerKind.SGD: ("weight_decay",),
    OptimizerKind.SGD_MOMENTUM: ("weight_decay", "momentum"),
    OptimizerKind.SGD_NESTEROV: ("weight_decay", "momentum"),
    OptimizerKind.LARS: ("weight_decay", "momentum", "trust_coefficient", "eps", "trust_clip"),
    OptimizerKind.LARS_NESTEROV: ("weight_decay", "momentum", "trust_coefficient", "eps", "trust_clip"),
    OptimizerKind.ADAM: ("weight_decay", "beta1", "beta2", "eps"),
    OptimizerKind.ADAMW: ("weight_decay", "beta1", "beta2", "eps"),
}


def bias_rule(kind: OptimizerKind) -> OptimizerKind:
    """The rule used for bias-like parameters under optimizer ``kind`` (applied with weight decay 0)."""
    return OptimizerKind.of(BIAS_RULE[OptimizerKind(kind).spec_name])


def slots_for(kind: OptimizerKind) -> tuple[Slot, ...]:
    """State buffers that rule ``kind`` reads and writes, in layout order."""
    return _SLOTS[OptimizerKind(kind)]


class _Base:
    """Shared derived properties; subclasses define ``kind`` and ``hyperparams()``."""

    kind: OptimizerKind

    @property
    def slots(self) -> tuple[Slot, ...]:
        """Buffers the weight path needs (the bias path needs ``slots_for(self.bias_kind)``)."""
        return slots_for(self.kind)

    @property
    def bias_kind(self) -> OptimizerKind:
        return bias_rule(self.kind)

    @property
    def needs_step_count(self) -> bool:
        """Adam-family rules need the step count t (bias corrections) on the device."""
        return self.kind in (OptimizerKind.ADAM, OptimizerKind.ADAMW)

    def hyperparams(self) -> dict[str, float]:  # pragma: no cover - overridden
        raise NotImplementedError

    def bias_hyperparams(self) -> dict[str, float]:
        """The hyper-parameters of the bias path: those of ``bias_kind`` with weight decay 0."""
        hp = self.hyperparams()
        return {k: (0.0 if k == "weight_decay" else hp[k]) for k in RULE_HYPERPARAMS[self.bias_kind]}


@dataclass(frozen=True, kw_only=True)
class SGD(_Base):
    """Stochastic gradient descent; the seed's defaults: momentum 0.9, weight decay 0, no Nesterov.

    momentum 0 gives plain SGD; nesterov needs momentum > 0 (with momentum 0 it would be plain SGD).
    """

    beta: float = 0.9
    wd: float = 0.0
    nesterov_enabled: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta", v.unit_open("momentum", self.beta))
        object.__setattr__(self, "wd", v.non_negative("weight_decay", self.wd))
        object.__setattr__(self, "nesterov_enabled", v.boolean("nesterov", self.nesterov_enabled))
        if self.nesterov_enabled and self.beta == 0.0:
            raise ConfigError("nesterov needs momentum > 0, got momentum 0 (use momentum(0) alone for plain SGD)")

    def momentum(self, beta: float) -> SGD:
        return replace(self, beta=beta)

    def weight_decay(self, wd: float) -> SGD:
        return replace(self, wd=wd)

    def nesterov(self, enabled: bool = True) -> SGD:
        return replace(self, nesterov_enabled=enabled)

    @property
    def kind(self) -> OptimizerKind:  # type: ignore[override]
        if self.beta == 0.0:
            return OptimizerKind.SGD
        return OptimizerKind.SGD_NESTEROV if self.nesterov_enabled else OptimizerKind.SGD_MOMENTUM

    def hyperparams(self) -> dict[str, float]:
        hp = {"weight_decay": self.wd}
        if self.beta != 0.0:
            hp["momentum"] = self.beta
        return hp


@dataclass(frozen=True, kw_only=True)
class LARS(_Base):
    """Layer-wise adaptive rate scaling (You et al. 2017) with momentum; seed defaults: momentum 0.9, wd 0,
    trust coefficient 0.001, eps 1e-8, trust ratio clipped at 100."""

    beta: float = 0.9
    wd: float = 0.0
    trust: float = 0.001
    epsilon: float = 1e-8
    trust_clip: float = 100.0
    nesterov_enabled: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta", v.unit_open("momentum", self.beta))
        object.__setattr__(self, "wd", v.non_negative("weight_decay", self.wd))
        object.__setattr__(self, "trust", v.positive("trust_coefficient", self.trust))
        object.__setattr__(self, "epsilon", v.positive("eps", self.epsilon))
        object.__setattr__(self, "trust_clip", v.positive("trust_ratio_clip", self.trust_clip))
        object.__setattr__(self, "nesterov_enabled", v.boolean("nesterov", self.nesterov_enabled))
        if self.nesterov_enabled and self.beta == 0.0:
            raise ConfigError("nesterov needs momentum > 0, got momentum 0")

    def momentum(self, beta: float) -> LARS:
        return replace(self, beta=beta)

    def weight_decay(self, wd: float) -> LARS:
        return replace(self, wd=wd)

    def trust_coefficient(self, tc: float) -> LARS:
        return replace(self, trust=tc)

    def eps(self, eps: float) -> LARS:
        return replace(self, epsilon=eps)

    def trust_ratio_clip(self, max_ratio: float) -> LARS:
        return replace(self, trust_clip=max_ratio)

    def nesterov(self, enabled: bool = True) -> LARS:
        return replace(self, nesterov_enabled=enabled)

    @property
    def kind(self) -> OptimizerKind:  # type: ignore[override]
        return OptimizerKind.LARS_NESTEROV if self.nesterov_enabled else OptimizerKind.LARS

    def hyperparams(self) -> dict[str, float]:
        return {
            "weight_decay": self.wd,
            "momentum": self.beta,
            "trust_coefficient": self.trust,
            "eps": self.epsilon,
            "trust_clip": self.trust_clip,
        }


@dataclass(frozen=True, kw_only=True)
class Adam(_Base):
    """Adam with weight decay as an L2 term added to the gradient (torch.optim.Adam(weight_decay=...)).

    Seed defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.
    """

    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    wd: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta1", v.unit_open("beta1", self.beta1))
        object.__setattr__(self, "beta2", v.unit_open("beta2", self.beta2))
        object.__setattr__(self, "epsilon", v.positive("eps", self.epsilon))
        object.__setattr__(self, "wd", v.non_negative("weight_decay", self.wd))

    def betas(self, beta1: float, beta2: float) -> Adam:
        return replace(self, beta1=beta1, beta2=beta2)

    def eps(self, eps: float) -> Adam:
        return replace(self, epsilon=eps)

    def weight_decay(self, wd: float) -> Adam:
        return replace(self, wd=wd)

    @property
    def kind(self) -> OptimizerKind:  # type: ignore[override]
        return OptimizerKind.ADAM

    def hyperparams(self) -> dict[str, float]:
        return {"weight_decay": self.wd, "beta1": self.beta1, "beta2": self.beta2, "eps": self.epsilon}


@dataclass(frozen=True, kw_only=True)
class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW). Seed default weight decay 0 (torch's is 0.01)."""

    @property
    def kind(self) -> OptimizerKind:  # type: ignore[override]
        return OptimizerKind.ADAMW


Optimizer = SGD | LARS | Adam | AdamW
