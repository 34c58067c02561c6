"""Layer kinds, one module each; ``KINDS`` maps an ArchLayer kind to its implementation.

A kind made outside tr joins with ``register_kind`` (tr.task.extension.register_layer_kind wraps it) and leaves
with ``unregister_kind``: KINDS, NODE_KINDS and the trait lists LOSS_KINDS / FIRST_KINDS (live views of KINDS)
follow both, in every module that imported them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import overload

from tr.core.errors import ConfigError
from tr.graph.blueprint import Layer
from tr.graph.layers.activation import ActKind
from tr.graph.layers.add import AddKind
from tr.graph.layers.attention import AttentionKind
from tr.graph.layers.base import LayerKind, LayerProblem
from tr.graph.layers.bn import BNKind
from tr.graph.layers.cbr import CBRKind
from tr.graph.layers.channel_pad import ChannelPadKind
from tr.graph.layers.conv import ConvKind
from tr.graph.layers.drop_path import DropPathKind
from tr.graph.layers.dropout import DropoutKind
from tr.graph.layers.fc import FCKind
from tr.graph.layers.flatten import FlattenKind
from tr.graph.layers.layernorm import LayerNormKind
from tr.graph.layers.onehot_loss import OneHotLossKind
from tr.graph.layers.pool import AvgPoolKind, GapKind, MaxPoolKind
from tr.graph.layers.scale import ScaleKind
from tr.graph.layers.softmax_ce import SoftmaxCEKind
from tr.graph.layers.tokens import ClassTokenKind, TokensKind

KINDS: dict[str, LayerKind] = {}
for _k in (FCKind(), ConvKind(), BNKind(), ActKind(), MaxPoolKind(), AvgPoolKind(), GapKind(), FlattenKind(),
           DropoutKind(), AddKind(), ScaleKind(), SoftmaxCEKind(), OneHotLossKind(), CBRKind(), ChannelPadKind(),
           LayerNormKind(), TokensKind(), ClassTokenKind(), AttentionKind(), DropPathKind()):
    for _name in _k.kinds:
        KINDS[_name] = _k

NODE_KINDS: dict[type, LayerKind] = {t: k for k in dict.fromkeys(KINDS.values()) for t in k.nodes}  # leaf -> kind
BUILTIN_KINDS: frozenset[str] = frozenset(KINDS)  # tr's own kinds: register_kind adds others


class KindNames(Sequence[str]):
    """The names of the kinds with one trait, in KINDS order: a read-only view that follows registration (compare
    it with a tuple, iterate it, test membership)."""

    def __init__(self, trait: str) -> None:
        self._trait = trait

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, k in KINDS.items() if getattr(k, self._trait))

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KindNames):
            other = other._names()
        return isinstance(other, (tuple, list)) and self._names() == tuple(other)

    __hash__ = None  # type: ignore[assignment]  (it changes as kinds register)

    def __repr__(self) -> str:
        return repr(self._names())


LOSS_KINDS = KindNames("loss")  # what CompileSpec.loss may name
FIRST_KINDS = KindNames("first_ok")  # what may read the input batch

_TRAITS = ("bn_stats", "spatial", "loss", "first_ok", "elementwise", "flat_output", "reads_rows")
# what a kind must provide itself: LayerKind's versions raise NotImplementedError
_REQUIRED = ("out_shape", "forward", "backward", "inference")


def kind_of(name: str) -> LayerKind:
    return KINDS[name]


def _check_kind(kind: LayerKind) -> None:
    """A kind made outside tr provides what the passes and the compiler ask of it (docs/CONVENTIONS.md)."""
    from tr.graph import blueprint
    from tr.graph.passes import IDENTITY, MARKERS  # the passes import this package: import them late

    if not isinstance(kind, LayerKind):
        raise ConfigError(f"register_kind takes a tr.graph.layers.LayerKind instance, got {kind!r}")
    what = type(kind).__name__
    if not isinstance(kind.kinds, tuple) or not kind.kinds:
        raise ConfigError(f"{what}.kinds must be a non-empty tuple of kind names, got {kind.kinds!r}")
    for name in kind.kinds:
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{what}: kind name {name!r} must be a Python identifier (a str)")
        if name in KINDS:
            raise ConfigError(f"{what}: kind {name!r} is already registered ({type(KINDS[name]).__name__}); "
                              "choose another name")
        if name in MARKERS or name == IDENTITY:
            raise ConfigError(f"{what}: kind name {name!r} is reserved by the ArchPlan passes")
    if not (isinstance(kind.schema, type) and dataclasses.is_dataclass(kind.schema)):
        raise ConfigError(f"{what}.schema must be a dataclass of the kind's parameters, got {kind.schema!r}")
    untyped = [f.name for f in dataclasses.fields(kind.schema) if f.type in (None, "Any")]
    if untyped:
        raise ConfigError(f"{what}.schema: parameters {untyped} have no type")
    for trait in _TRAITS:
        if not isinstance(getattr(kind, trait), bool):
            raise ConfigError(f"{what}.{trait} must be True or False, got {getattr(kind, trait)!r}")
    if not isinstance(kind.epilogue_acts, tuple):
        raise ConfigError(f"{what}.epilogue_acts must be a tuple, got {kind.epilogue_acts!r}")
    missing = [m for m in _REQUIRED if getattr(type(kind), m) is getattr(LayerKind, m)]
    if not isinstance(kind.nodes, tuple):
        raise ConfigError(f"{what}.nodes must be a tuple of BluePrint leaf classes, got {kind.nodes!r}")
    if kind.nodes and type(kind).expand is LayerKind.expand:
        missing.append("expand")
    if missing:
        raise ConfigError(f"{what} does not provide {missing}: a layer kind defines them itself "
                          "(tr.graph.layers.base.LayerKind)")
    for node in kind.nodes:
        if not (isinstance(node, type) and issubclass(node, Layer) and node is not Layer):
            raise ConfigError(f"{what}.nodes: {node!r} is not a subclass of tr.graph.blueprint.Layer")
        params = getattr(node, "__dataclass_params__", None)
        if "__dataclass_fields__" not in node.__dict__ or params is None or not params.frozen:
            raise ConfigError(f"{what}.nodes: {node.__name__} must be a frozen dataclass "
                              "(@dataclass(frozen=True, repr=False)) like tr's leaves")
        if node.__module__ == blueprint.__name__:
            raise ConfigError(f"{what}.nodes: {node.__name__} is one of tr's own BluePrint values")
        if node in NODE_KINDS:
            raise ConfigError(f"{what}.nodes: {node.__name__} is already made by {type(NODE_KINDS[node]).__name__}")


def register_kind(kind: LayerKind) -> LayerKind:
    """Add a layer kind made outside tr: its names join KINDS (and LOSS_KINDS / FIRST_KINDS by its traits), its
    BluePrint leaves NODE_KINDS. A name or leaf already taken, a missing method or a wrong type is a ConfigError."""
    _check_kind(kind)
    for name in kind.kinds:
        KINDS[name] = kind
    for node in kind.nodes:
        NODE_KINDS[node] = kind
    return kind


def unregister_kind(kind: LayerKind) -> None:
    """Remove a kind that register_kind added (its names and leaves); tr's own kinds stay."""
    if not isinstance(kind, LayerKind):
        raise ConfigError(f"unregister_kind takes a LayerKind instance, got {kind!r}")
    names = [n for n, k in KINDS.items() if k is kind]
    if not names:
        raise ConfigError(f"{type(kind).__name__} is not registered")
    if BUILTIN_KINDS.intersection(names):
        raise ConfigError(f"{type(kind).__name__} is tr's own kind; only kinds added by register_kind can be removed")
    for name in names:
        del KINDS[name]
    for node in [t for t, k in NODE_KINDS.items() if k is kind]:
        del NODE_KINDS[node]


__all__ = ["BUILTIN_KINDS", "FIRST_KINDS", "KINDS", "LOSS_KINDS", "NODE_KINDS", "KindNames", "LayerKind",
           "LayerProblem", "kind_of", "register_kind", "unregister_kind"]
