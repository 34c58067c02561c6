"""Progressive resizing at compile: the network's total stride, and the training sides checked against it.

A layer's downsampling factor is read from its shapes at the final (largest) side: input side // output side
(a strided conv or pool: 2; a padded 3x3 conv: 1; a valid 5x5 conv, 28 -> 24: 1), and the total stride of a
layer is the largest of its inputs' times its own. The network's total stride is the largest over the layers
whose output is still spatial (global pooling and what follows it are not: their output is 1x1 at every side).
Every training side must be a multiple of it, so each epoch's feature maps are the final ones scaled down by
the same factor; a side that is not is a ConfigError naming the stride and the layer that reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tr.core.errors import ConfigError
from tr.core.shape import Shape
from tr.graph.archplan import DATA, ArchLayer
from tr.graph.layers import KINDS


def total_stride(layers: Sequence[ArchLayer], shapes: Mapping[int, Shape]) -> tuple[int, int | None]:
    """(the network's total stride, the index of the first layer reaching it, None when no layer downsamples),
    from ``shapes``: every layer's output by uid (DATA: the input) at one side."""
    cum: dict[int, int] = {DATA: 1}
    best, where = 1, None
    for i, L in enumerate(layers):
        out = shapes[L.uid]
        factor = 1
        if L.inputs and out.h > 1:  # a 1x1 output (global pooling, a head) says nothing of the stride
            x = shapes[L.inputs[0]]
            factor = max(1, x.h // out.h)
        s = max((cum.get(u, 1) for u in L.inputs), default=1) * factor
        cum[L.uid] = s
        if out.h > 1 and s > best:
            best, where = s, i
    return best, where


def check_sides(layers: Sequence[ArchLayer], shapes: Mapping[int, Shape], sides: Sequence[int], final: int) -> None:
    """ConfigError when a progressive training side is not a multiple of the network's total stride (``shapes``:
    at the final side ``final``)."""
    stride, at = total_stride(layers, shapes)
    for side in (*sides, final):
        if side % stride:
            reach = "" if at is None else (f": layer {at} ({KINDS[layers[at].kind].describe(layers[at])}) takes the "
                                           f"{final}x{final} input down by {stride}")
            raise ConfigError(f"progressive resizing: training side {side} is not a multiple of {stride}, the "
                              f"network's total stride{reach}; give sides (and progressive_resizing's multiple) "
                              f"that are multiples of {stride}")
