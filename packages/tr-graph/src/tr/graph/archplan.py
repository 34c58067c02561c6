"""ArchPlan: the BluePrint expanded and normalised into a flat list of layers in topological order.

Each ArchLayer names its inputs by index (-1 is the network input); a sequential model has inputs
(i-1,), a residual join has two. ``from_blueprint`` runs the passes of tr.graph.passes in order and
keeps the per-sample output shape of every layer for printing and for the compiler's sanity checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tr.core.errors import CompileError
from tr.core.shape import Shape
from tr.graph.layers import KINDS
from tr.graph.layers.base import complete_params

DATA = -1  # input reference of the layer that reads the batch


@dataclass(frozen=True)
class ArchLayer:
    """One layer of the plan. ``params`` are completed from its kind's schema (tr.graph.layers: names, types,
    defaults) when it is made; the passes' markers (add2_begin, identity, ...) keep theirs as given."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    origin: str = ""  # where it came from in the BluePrint, e.g. "model[3].rep1.stem[0]"
    uid: int = -1  # stable id while passes run; equals the index in a finished plan
    inputs: tuple[int, ...] = ()
    first: bool = False

    def __post_init__(self) -> None:
        k = KINDS.get(self.kind)
        if k is not None:
            object.__setattr__(self, "params", MappingProxyType(complete_params(self.kind, k.schema, self.params)))

    def describe(self) -> str:
        k = KINDS.get(self.kind)
        return self.kind if k is None else k.describe(self)


def params(**kw: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(kw))


def layer_error(index: int, layer: ArchLayer, msg: str) -> CompileError:
    where = f" at {layer.origin}" if layer.origin else ""
    return CompileError(f"layer {index} ({layer.describe()}{where}): {msg}")


@dataclass(frozen=True)
class ArchPlan:
    layers: tuple[ArchLayer, ...]
    input_shape: Shape  # one sample: (1, H, W, C)
    shapes: tuple[Shape, ...]  # per-sample output shape of each layer
    num_classes: int
    amp: bool
    name: str = ""

    @classmethod
    def from_blueprint(cls, blueprint: Any, input_shape: tuple[int, int, int], num_classes: int,
                       amp: bool = False, loss: str = "softmax_ce") -> ArchPlan:
        from tr.graph.passes import build_layers  # passes import this module

        h, w, c = _input_hwc(input_shape)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise CompileError(f"num_classes must be an integer >= 1, got {num_classes!r}")
        name = getattr(blueprint, "name", "")
        layers, shapes = build_layers(blueprint, Shape(1, h, w, c), num_classes, amp, loss)
        return cls(tuple(layers), Shape(1, h, w, c), tuple(shapes), num_classes, amp, name)

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def num_params(self) -> int:
        """Trained scalars (weights, biases, BN gamma and beta), for comparison with other frameworks."""
        return sum(KINDS[L.kind].num_params(L, self.in_shapes(i), self.shapes[i]) for i, L in enumerate(self.layers))

    def in_shapes(self, i: int) -> list[Shape]:
        return [self.input_shape if u < 0 else self.shapes[u] for u in self.layers[i].inputs]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [{"index": i, "kind": L.kind, "params": {k: v for k, v in L.params.items()},
                 "inputs": list(L.inputs), "first": L.first, "origin": L.origin,
                 "out_shape": list(self.shapes[i].dims[1:])}
                for i, L in enumerate(self.layers)]

    def __str__(self) -> str:
        head = f"ArchPlan {self.name or '(unnamed)'}: input {list(self.input_shape.dims[1:])} (HWC), " \
               f"{self.num_classes} classes, {'AMP' if self.amp else 'FP32'}, {len(self.layers)} layers, " \
               f"{self.num_params:,} parameters"
        lines = [head, f"  {'#':>4}  {'layer':<28} {'inputs':<10} {'out (HWC)':<16} origin"]
        for i, L in enumerate(self.layers):
            ins = ",".join("in" if u < 0 else str(u) for u in L.inputs)
            s = self.shapes[i]
            mark = "*" if L.first else " "
            lines.append(f"  {i:>4}{mark} {L.describe():<28} {ins:<10} {f'{s.h}x{s.w}x{s.c}':<16} {L.origin}")
        return "\n".join(lines)


def _input_hwc(shape: Any) -> tuple[int, int, int]:
    try:
        h, w, c = shape
    except (TypeError, ValueError):
        raise CompileError(f"input shape must be (H, W, C) of one sample, got {shape!r}") from None
    for name, v in (("H", h), ("W", w), ("C", c)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CompileError(f"input shape {name} must be an integer >= 1, got {v!r} in {shape!r}")
    return h, w, c
