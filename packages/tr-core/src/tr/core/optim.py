"""The optimizer vocabulary, spelled once: the optimizers a plan can be compiled for, the update rule of the
range kernel (tr.core.ops OPTIMIZER_RULES) each applies to the decayed weights and to the bias-like
parameters, and which of them are LARS (per-tensor trust ratios, the lars_update op).

tr.algo's OptimizerKind names the same optimizers (``OptimizerKind.SGD_MOMENTUM.spec_name == "momentum"``),
tr.graph's CompileSpec takes these names, tr.graph's update graphs emit the rules below and the backends
implement OPTIMIZER_RULES. The reference arithmetic of every rule is tr.algo.update.
"""

from __future__ import annotations

from tr.core.ops import OPTIMIZER_RULES

# in tr.algo.OptimizerKind's order
OPTIMIZERS = ("sgd", "momentum", "nesterov", "lars", "lars_nesterov", "adam", "adamw")
# Gradient clipping before the update: "value" clamps each element to [-c, c] (the seed's); "norm" scales every
# gradient by min(1, c / (||g|| + 1e-6)), ||g|| the L2 norm over all of them (torch.nn.utils.clip_grad_norm_).
GRAD_CLIP_MODES = ("value", "norm")
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
