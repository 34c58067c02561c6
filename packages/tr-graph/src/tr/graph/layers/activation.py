"""Element-wise activations (relu, tanh, silu, sigmoid, relu6, leaky_relu, hardswish, elu, gelu).

Backward memory: relu, relu6 and leaky_relu have a derivative that depends only on which side of the
kinks x lies, and the output y keeps that information (y > 0 iff x > 0; 0 < y < 6 iff 0 < x < 6), so
their ``act_bwd`` is given the output as ``x`` (as torch's ``threshold_backward`` uses the result). The
input then need not stay alive until backward, and no mask is needed. The other activations read their
real input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import ACT_KINDS, Act
from tr.graph.layers.base import IO, Expansion, LayerKind, LayerProblem


@dataclass(frozen=True, slots=True)
class ActParams:
    kind: str  # one of ACT_KINDS

FROM_OUTPUT = frozenset(["relu", "relu6", "leaky_relu"])


def act_backward(io: IO, kind: str, x: str, y: str, dy: str, dx: str) -> None:
    """dx = f'(x) * dy; x is replaced by y for the activations in FROM_OUTPUT."""
    io.op("act_bwd", {"kind": kind}, x=y if kind in FROM_OUTPUT else x, dy=dy, dx=dx)


class ActKind(LayerKind):
    kinds = ("act",)
    schema = ActParams
    nodes = (Act,)
    elementwise = True

    def expand(self, node: Act, channels: int | None) -> Expansion:
        return Expansion("act", {"kind": node.kind}, channels)

    def describe(self, layer) -> str:
        return str(layer.params["kind"])

    def check(self, layer) -> None:
        if layer.params["kind"] not in ACT_KINDS:
            raise LayerProblem(f"unknown activation {layer.params['kind']!r}; expected one of {ACT_KINDS}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def forward(self, layer, io: IO) -> None:
        io.op("act_fwd", {"kind": layer.params["kind"]}, x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        act_backward(io, layer.params["kind"], io.x[0], io.y, io.dy, io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("act_inf", {"kind": layer.params["kind"]}, x=io.x[0], y=io.y)
        return io.y
