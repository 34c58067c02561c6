"""Layer kinds, one module each; ``KINDS`` maps an ArchLayer kind to its implementation."""

from tr.graph.layers.activation import ActKind
from tr.graph.layers.add import AddKind
from tr.graph.layers.base import LayerKind, LayerProblem
from tr.graph.layers.bn import BNKind
from tr.graph.layers.cbr import CBRKind
from tr.graph.layers.channel_pad import ChannelPadKind
from tr.graph.layers.conv import ConvKind
from tr.graph.layers.dropout import DropoutKind
from tr.graph.layers.fc import FCKind
from tr.graph.layers.flatten import FlattenKind
from tr.graph.layers.layernorm import LayerNormKind
from tr.graph.layers.onehot_loss import OneHotLossKind
from tr.graph.layers.pool import AvgPoolKind, GapKind, MaxPoolKind
from tr.graph.layers.scale import ScaleKind
from tr.graph.layers.softmax_ce import SoftmaxCEKind

KINDS: dict[str, LayerKind] = {}
for _k in (FCKind(), ConvKind(), BNKind(), ActKind(), MaxPoolKind(), AvgPoolKind(), GapKind(), FlattenKind(),
           DropoutKind(), AddKind(), ScaleKind(), SoftmaxCEKind(), OneHotLossKind(), CBRKind(), ChannelPadKind(),
           LayerNormKind()):
    for _name in _k.kinds:
        KINDS[_name] = _k


LOSS_KINDS = tuple(name for name, k in KINDS.items() if k.loss)  # what CompileSpec.loss may name
FIRST_KINDS = tuple(name for name, k in KINDS.items() if k.first_ok)  # what may read the input batch
NODE_KINDS: dict[type, LayerKind] = {t: k for k in dict.fromkeys(KINDS.values()) for t in k.nodes}  # leaf -> kind


def kind_of(name: str) -> LayerKind:
    return KINDS[name]


__all__ = ["FIRST_KINDS", "KINDS", "LOSS_KINDS", "NODE_KINDS", "LayerKind", "LayerProblem", "kind_of"]
