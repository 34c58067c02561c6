"""Softmax cross-entropy, the default loss (the compiler appends the task's loss layer). It reads the logits and
the label copy; it has no output value: the forward writes the FP32 probabilities and the step result (loss,
top1, top5), the backward writes the logits' gradient scaled by the loss scale."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import SoftmaxCE
from tr.graph.layers.base import IO, Expansion, LayerKind, LayerProblem


@dataclass(frozen=True, slots=True)
class LossParams:
    classes: int  # K: the logits are [N,1,1,K] (0 in a BluePrint's own softmax_ce(), which the loss replaces)


def logits_shape(layer, x: Shape) -> Shape:
    """A loss layer's shape rule: it reads logits [N,1,1,K] of the plan's K classes."""
    k = layer.params["classes"]
    if (x.h, x.w) != (1, 1) or x.c != k:
        raise LayerProblem(
            f"the loss needs logits [N,1,1,{k}] ({k} classes) but the last layer gives "
            f"[N,{x.h},{x.w},{x.c}]; end the model with fc({k}) (after gap() or flatten())")
    return x


def describe_loss(layer) -> str:
    return f"{layer.kind} {layer.params['classes']}"


class SoftmaxCEKind(LayerKind):
    kinds = ("softmax_ce",)
    schema = LossParams
    nodes = (SoftmaxCE,)
    loss = True

    def expand(self, node: SoftmaxCE, channels: int | None) -> Expansion:
        return Expansion("softmax_ce", {"classes": 0}, channels)

    def describe(self, layer) -> str:
        return describe_loss(layer)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return logits_shape(layer, ins[0])

    def forward(self, layer, io: IO) -> None:
        io.op("softmax_ce_fwd", {"label_smoothing": io.spec.label_smoothing}, logits=io.x[0], labels=io.labels,
              probs="probs", result="result", **io.mixup_lam())

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx[0]
        io.op("softmax_ce_bwd", {"label_smoothing": io.spec.label_smoothing}, probs="probs", labels=io.labels,
              scale="loss_scale", dlogits=dx, **io.loss_divisor(), **io.mixup_lam())
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("softmax_ce_inf", {"label_smoothing": io.spec.label_smoothing}, logits=io.x[0], labels=io.labels,
              result="result", pred="pred")
        return ""
