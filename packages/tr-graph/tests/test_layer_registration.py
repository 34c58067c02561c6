"""tr.graph.layers.register_kind / unregister_kind: a kind made outside tr joins KINDS and NODE_KINDS, and the trait
lists LOSS_KINDS / FIRST_KINDS follow it in every module that imported them (the passes, CompileSpec); refused
when a name or a leaf is taken or a piece is missing; gone again after unregister_kind."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from tr.core.errors import CompileError, ConfigError
from tr.core.shape import Shape
from tr.graph import passes, spec
from tr.graph.archplan import DATA, ArchLayer, ArchPlan, params
from tr.graph.blueprint import Layer, fc, seq
from tr.graph.layers import (
    BUILTIN_KINDS,
    FIRST_KINDS,
    KINDS,
    LOSS_KINDS,
    NODE_KINDS,
    KindNames,
    register_kind,
    unregister_kind,
)
from tr.graph.layers.base import IO, Expansion, LayerKind
from tr.graph.layers.fc import FCKind


@dataclass(frozen=True, repr=False)
class Scaled(Layer):
    """A leaf: y = k * x."""

    k: float = 2.0


@dataclass(frozen=True, slots=True)
class ScaledParams:
    k: float = 2.0


class ScaledKind(LayerKind):
    kinds = ("scaled",)
    schema = ScaledParams
    nodes = (Scaled,)
    elementwise = True

    def expand(self, node: Scaled, channels: int | None) -> Expansion:
        return Expansion("scaled", {"k": node.k}, channels)

    def describe(self, layer) -> str:
        return f"scaled x{layer.params['k']:g}"

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def forward(self, layer, io: IO) -> None:
        raise AssertionError("not compiled here")

    backward = inference = forward


@pytest.fixture
def scaled():
    kind = register_kind(ScaledKind())
    yield kind
    unregister_kind(kind)


def test_a_registered_kind_and_its_leaf_reach_the_passes(scaled):
    assert KINDS["scaled"] is scaled and NODE_KINDS[Scaled] is scaled
    plan = ArchPlan.from_blueprint(seq(fc(4), Scaled(0.5), fc(3)), (1, 1, 6), 3)
    assert [L.describe() for L in plan.layers] == ["fc 4", "scaled x0.5", "fc 3", "softmax_ce 3"]
    assert dict(plan.layers[1].params) == {"k": 0.5}
    assert repr(seq(Scaled(), Scaled(3.0))) == "seq(scaled(), scaled(k=3.0))"
    with pytest.raises(CompileError, match=r"scaled layer: unknown parameter\(s\) \['j'\]"):
        ArchLayer("scaled", params(j=1))


def test_unregistering_removes_every_name_and_leaf():
    before = (dict(KINDS), dict(NODE_KINDS), tuple(LOSS_KINDS), tuple(FIRST_KINDS))
    kind = register_kind(ScaledKind())
    unregister_kind(kind)
    assert (dict(KINDS), dict(NODE_KINDS), tuple(LOSS_KINDS), tuple(FIRST_KINDS)) == before
    assert set(KINDS) == BUILTIN_KINDS
    with pytest.raises(CompileError, match="not a known layer"):
        ArchPlan.from_blueprint(seq(fc(4), Scaled(), fc(3)), (1, 1, 6), 3)
    with pytest.raises(ConfigError, match="ScaledKind is not registered"):
        unregister_kind(kind)
    with pytest.raises(ConfigError, match="FCKind is tr's own kind"):
        unregister_kind(KINDS["fc"])


def test_the_trait_lists_follow_registration_where_they_were_imported():
    class FirstLoss(ScaledKind):
        kinds = ("scaled_first", "scaled_loss")
        nodes = ()
        first_ok = True
        loss = True

    assert passes.FIRST_KINDS is FIRST_KINDS and spec.LOSS_KINDS is LOSS_KINDS  # one live view each
    before = tuple(FIRST_KINDS)
    kind = register_kind(FirstLoss())
    try:
        assert tuple(FIRST_KINDS) == (*before, "scaled_first", "scaled_loss")
        assert "scaled_loss" in LOSS_KINDS and "scaled_first" in passes.FIRST_KINDS
        passes.mark_first([ArchLayer("scaled_first", params(), "", 0, (DATA,))])  # accepted as a first layer
    finally:
        unregister_kind(kind)
    assert tuple(FIRST_KINDS) == before and "scaled_loss" not in LOSS_KINDS
    with pytest.raises(CompileError, match="must be one of"):
        passes.mark_first([ArchLayer("act", params(kind="relu"), "", 0, (DATA,))])


def test_the_trait_lists_read_like_tuples():
    assert FIRST_KINDS == tuple(FIRST_KINDS) and FIRST_KINDS == list(FIRST_KINDS) and FIRST_KINDS != ("fc",)
    assert repr(LOSS_KINDS) == repr(tuple(LOSS_KINDS)) and len(LOSS_KINDS) == len(tuple(LOSS_KINDS))
    assert LOSS_KINDS[0] == tuple(LOSS_KINDS)[0] and ", ".join(LOSS_KINDS)
    assert isinstance(FIRST_KINDS, KindNames)


def test_a_clash_or_a_missing_piece_is_refused(scaled):
    class Again(ScaledKind):
        kinds = ("scaled2",)

    class SameName(ScaledKind):
        nodes = ()

    class Partial(LayerKind):
        kinds = ("partial",)

        def out_shape(self, layer, ins):
            return ins[0]

    class BadTrait(ScaledKind):
        kinds = ("bad_trait",)
        nodes = ()
        spatial = 1

    class Plain(Layer):  # a Layer, but no dataclass of its own: its fields would not be its parameters
        k = 1

    class NotADataclass(ScaledKind):
        kinds = ("not_a_dataclass",)
        nodes = (Plain,)

    class Subclassed(FCKind):  # a tr kind's subclass under a name (and leaves) of its own is fine
        kinds = ("fc_twin",)
        nodes = ()

    cases = [(Again(), "Scaled is already made by ScaledKind"),
             (SameName(), r"kind 'scaled' is already registered \(ScaledKind\)"),
             (Partial(), r"Partial does not provide \['forward', 'backward', 'inference'\]"),
             (BadTrait(), "BadTrait.spatial must be True or False, got 1"),
             (ScaledKind, "register_kind takes a tr.graph.layers.LayerKind instance"),
             (NotADataclass(), r"NotADataclass.nodes: Plain must be a frozen dataclass")]
    before = dict(KINDS)
    for kind, message in cases:
        with pytest.raises(ConfigError, match=message):
            register_kind(kind)
    assert KINDS == before
    kind = register_kind(Subclassed())
    assert KINDS["fc_twin"] is kind
    unregister_kind(kind)
