"""Program: the compiled plan as plain data, handed from tr.graph to a backend and to tr.task.

A backend never imports tr.graph; what it receives is this: the arena layout, every DTensor, and the named
steps (tr.graph.steps): each a list of branches of op calls, captured as one graph and launched by the task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tr.core.errors import CompileError
from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.tensor.dtensor import DTensor
from tr.tensor.layout import ArenaLayout

SHAPE_INVARIANT = "any"  # tr.graph.atlas: a part bound once for every variant
TRAIN, TRAIN_LAST, VAL, VAL_LAST = "train", "train_last", "val", "val_last"  # the variants (tr.graph.spec)


def at_side(name: str, side: int) -> str:
    """A training variant or step at a lower progressive side (progressive resizing): ``train@160``."""
    return f"{name}@{side}"


def base_variant(name: str) -> str:
    """A variant's kind without its side: ``train_last@160`` -> ``train_last``."""
    return name.split("@", 1)[0]


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
class Branch:
    """Part of a captured graph: ``calls`` in order on ``stream``, begun once the branches ``after`` (indices
    of earlier branches in the same list) are done. Calls on one stream run in order whatever ``after`` says;
    branches on different streams with no ``after`` path between them may run at the same time, so they must
    not touch the same bytes, nor both use the cuBLASLt workspace."""

    stream: StreamKind
    calls: tuple[OpCall, ...]
    after: tuple[int, ...] = ()


@dataclass(frozen=True)
class Step:
    """One named unit the task captures as a graph and launches (``train_a``, ``val_last_b``, ``epoch_end``...)."""

    name: str
    branches: tuple[Branch, ...]

    @property
    def calls(self) -> tuple[OpCall, ...]:
        """Every branch's calls, one branch after another (a valid order of the branch graph)."""
        return tuple(c for b in self.branches for c in b.calls)

    def calls_of(self, part: str) -> tuple[OpCall, ...]:
        """The calls the compiler filed under ``part`` (a tr.graph.steps.Part value)."""
        return tuple(c for c in self.calls if c.part == part)


@dataclass(frozen=True)
class Program:
    layout: ArenaLayout
    tensors: tuple[DTensor, ...]
    steps: Mapping[str, Step]
    variants: Mapping[str, VariantInfo]
    named: Mapping[str, DTensor]  # baseline tensors by role: "lr", "loss_scale", "nan_flag", "result", ...
    inits: tuple[InitSpec, ...] = ()
    meta: Mapping[str, object] = field(default_factory=dict)

    def step(self, name: str) -> Step:
        try:
            return self.steps[name]
        except KeyError:
            raise CompileError(f"the program has no step {name!r}; it has {sorted(self.steps)}") from None

    def tensor(self, role: str) -> DTensor:
        try:
            return self.named[role]
        except KeyError:
            raise CompileError(f"the program has no tensor with role {role!r}; it has {sorted(self.named)}") from None

    @property
    def num_ops(self) -> int:
        """Distinct op calls over all steps: a call bound once and run by several steps (the optimizer in
        train_a and train_b) counts once, as the plan holds it once."""
        return len({id(c) for s in self.steps.values() for c in s.calls})
