"""The optimizer vocabulary, spelled once: the optimizers a plan can be compiled for, the update rule of the
range kernel (tr.core.ops OPTIMIZER_RULES) each applies to the decayed weights and to the bias-like
parameters, and which of them are LARS (per-tensor trust ratios, the lars_update op).

tr.algo's OptimizerKind names the same optimizers (``OptimizerKind.SGD_MOMENTUM.spec_name == "momentum"``),
tr.graph's CompileSpec takes these names, tr.graph's update graphs emit the rules below and the backends
implement OPTIMIZER_RULES. The reference arithmetic of every rule is tr.algo.update.
"""

from __future__ import annotations

import fnmatch
import math
import numbers
from dataclasses import dataclass
from typing import Any

from tr.core.errors import ConfigError
from tr.core.memory import Group
from tr.core.ops import OPTIMIZER_RULES

# in tr.algo.OptimizerKind's order
OPTIMIZERS = ("sgd", "momentum", "nesterov", "lars", "lars_nesterov", "adam", "adamw")
# Gradient clipping before the update: "value" clamps each element to [-c, c] (the seed's); "norm" scales every
# gradient by min(1, c / (||g|| + 1e-6)), ||g|| the L2 norm over all of them (torch.nn.utils.clip_grad_norm_);
# "agc" clips each unit's gradient to c times its weights' norm (adaptive clipping, timm's adaptive_clip_grad).
GRAD_CLIP_MODES = ("value", "norm", "agc")
LARS = frozenset({"lars", "lars_nesterov"})

# the range_optimizer rule of the decayed weights (LARS updates them per tensor with lars_update instead)
WEIGHT_RULE = {"sgd": "sgd", "momentum": "momentum", "nesterov": "nesterov", "adam": "adam", "adamw": "adamw"}
# the rule of the bias-like parameters (BN gamma/beta, FC bias), always with weight decay 0 and no trust ratio
BIAS_RULE = {"sgd": "sgd", "momentum": "momentum", "nesterov": "nesterov", "lars": "momentum",
             "lars_nesterov": "nesterov", "adam": "adam", "adamw": "adam"}

assert set(WEIGHT_RULE) | LARS == set(OPTIMIZERS) == set(BIAS_RULE)
assert set(WEIGHT_RULE.values()) | set(BIAS_RULE.values()) <= set(OPTIMIZER_RULES)


def first_moment(optimizer: str) -> bool:
    """Whether the optimizer keeps a momentum / first moment per trained tensor (the M regions)."""
    return optimizer != "sgd"


def second_moment(optimizer: str) -> bool:
    """Whether it keeps a second moment (the V regions) and a step count: Adam and AdamW."""
    return optimizer in ("adam", "adamw")


PARAM_GROUP_KINDS = ("weight", "bias", "norm")  # the selectors by kind; with a ".": a tensor name pattern; else a
# memory group name pattern


@dataclass(frozen=True)
class ParamGroup:
    """The learning-rate multiplier and the weight decay (None: the optimizer's, which the decayed groups take and
    the bias-like ones do not) of the parameters ``select`` picks: "weight" (the decayed memory groups: conv and
    fc weights), "bias" (the bias-like groups that are no normalisation's: conv and fc biases), "norm" (batch and
    layer norm scales and shifts), a pattern over the trained tensors' names when it holds a "." (fnmatch over
    "L<layer>.<name>": "L0.*" the first layer, "L*.b" every bias), or else a pattern over memory group names
    ("deep_conv", "fc_*"); ``python -m tr.graph`` lists a plan's tensors and groups. Where several select a tensor,
    the later one's values count."""

    select: str
    lr_mult: float = 1.0
    weight_decay: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.select, str) or not self.select:
            raise ConfigError(f"a parameter group selects by kind {PARAM_GROUP_KINDS} or a group name pattern, "
                              f"got {self.select!r}")
        for name, v, optional in (("lr_mult", self.lr_mult, False), ("weight_decay", self.weight_decay, True)):
            if optional and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"param_group({self.select!r}): {name} must be a finite number >= 0, got {v!r}")

    @property
    def by_name(self) -> bool:
        """Whether it selects tensors by name (then the plan updates each trained tensor on its own)."""
        return "." in self.select

    def picks_tensor(self, key: str, g: Group) -> bool:
        """Whether it picks the trained tensor ``key`` of memory group ``g``."""
        return fnmatch.fnmatchcase(key, self.select) if self.by_name else self.picks(g)

    def picks(self, g: Group) -> bool:
        """Whether it picks memory group ``g`` (a tensor-name selector picks no group as a whole)."""
        if self.by_name:
            return False
        if self.select == "weight":
            return g.decayed
        if self.select == "bias":
            return not g.decayed and not g.norm
        if self.select == "norm":
            return g.norm
        return fnmatch.fnmatchcase(g.name, self.select)

    def settings(self, current: tuple[float, float]) -> tuple[float, float]:
        """(lr multiplier, weight decay) of a group it picks, over ``current``."""
        return float(self.lr_mult), current[1] if self.weight_decay is None else float(self.weight_decay)

    def as_dict(self) -> dict[str, Any]:
        return {"select": self.select, "lr_mult": self.lr_mult, "weight_decay": self.weight_decay}

