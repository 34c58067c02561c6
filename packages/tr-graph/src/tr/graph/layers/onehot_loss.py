"""Binary cross-entropy with logits and the mean squared error against the one-hot label (tr.algo.onehot_loss),
the loss layer the compiler appends for a task's BCEWithLogitsLoss or MSELoss. It reads the logits and the label
copy and has no output value: the forward writes the step result (loss, top1, top5); the backward reads the
logits again and writes their gradient, scaled by the loss scale, in place where the plan lets it."""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.layers.base import IO, LayerKind
from tr.graph.layers.softmax_ce import LossParams, describe_loss, logits_shape


class OneHotLossKind(LayerKind):
    kinds = ("bce_logits", "mse")
    schema = LossParams
    loss = True

    def describe(self, layer) -> str:
        return describe_loss(layer)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return logits_shape(layer, ins[0])

    def _attrs(self, layer, io: IO) -> dict:
        return {"loss": layer.kind, "label_smoothing": io.spec.label_smoothing}

    def forward(self, layer, io: IO) -> None:
        io.op("onehot_loss_fwd", self._attrs(layer, io), logits=io.x[0], labels=io.labels, result="result")

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx[0]
        io.op("onehot_loss_bwd", self._attrs(layer, io), logits=io.x[0], labels=io.labels, scale="loss_scale",
              dlogits=dx, **io.loss_divisor())
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("onehot_loss_inf", self._attrs(layer, io), logits=io.x[0], labels=io.labels, result="result",
              pred="pred")
        return ""
