"""Program: the compiled plan as plain data, handed from tr.graph to a backend and to tr.task.

A backend never imports tr.graph; what it receives is this: the arena layout, every DTensor, and for each
(variant, GraphId) the ordered op calls to capture. Shape-invariant graphs are stored once under the
variant ``"any"``; ``calls(variant, gid)`` resolves that fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tr.core.errors import CompileError
from tr.core.graph_id import GraphId
from tr.core.ops import OpCall
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout

SHAPE_INVARIANT = "any"
TRAIN, TRAIN_LAST, TRAIN_LOW, TRAIN_LOW_LAST, VAL, VAL_LAST = (
    "train", "train_last", "train_low", "train_low_last", "val", "val_last")
VARIANTS = (TRAIN, TRAIN_LAST, TRAIN_LOW, TRAIN_LOW_LAST, VAL, VAL_LAST)


@dataclass(frozen=True)
class VariantInfo:
    name: str
    batch: int
    resolution: int
    train: bool


@dataclass(frozen=True)
class InitSpec:
    """How the task initialises one parameter-like tensor before the first step."""

    tensor: DTensor
    kind: str  # "weight" | "bias" | "ones" | "zeros" | "const"
    fan_in: int = 0
    fan_out: int = 0
    value: float = 0.0
    layer: int = -1
    family: str = ""  # a weight's initializer family ("fc", "conv": tr.algo.init.Initializer.spec_for)


@dataclass(frozen=True)
class Program:
    layout: ArenaLayout
    tensors: tuple[DTensor, ...]
    graphs: Mapping[tuple[str, GraphId], tuple[OpCall, ...]]
    variants: Mapping[str, VariantInfo]
    named: Mapping[str, DTensor]  # baseline tensors by role: "lr", "loss_scale", "nan_flag", "result", ...
    inits: tuple[InitSpec, ...] = ()
    meta: Mapping[str, object] = field(default_factory=dict)

    def calls(self, variant: str, gid: GraphId) -> tuple[OpCall, ...]:
        key = (variant, gid)
        if key in self.graphs:
            return self.graphs[key]
        return self.graphs.get((SHAPE_INVARIANT, gid), ())

    def tensor(self, role: str) -> DTensor:
        try:
            return self.named[role]
        except KeyError:
            raise CompileError(f"the program has no tensor with role {role!r}; it has {sorted(self.named)}") from None

    @property
    def num_ops(self) -> int:
        return sum(len(v) for v in self.graphs.values())
