"""What a layer kind owns (tr.graph.layers.base.LayerKind): its typed parameters with their defaults, the
BluePrint leaves it is made from, its description, and the traits the passes ask instead of testing names."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import tr.graph.blueprint as bpmod
from tr.core.errors import CompileError
from tr.graph.archplan import DATA, ArchLayer, params
from tr.graph.blueprint import (
    avgpool,
    bn,
    channel_padding,
    conv,
    dropout,
    fc,
    flatten,
    gap,
    maxpool,
    relu6,
    seq,
    softmax_ce,
)
from tr.graph.layers import FIRST_KINDS, KINDS, NODE_KINDS
from tr.graph.passes import expand, mark_first

GRAPH_SRC = Path(bpmod.__file__).parent
# BluePrint values the expand pass unfolds into several layers (or none): every other Layer is a leaf
COMPOSITES = {"Seq", "Repeat", "Add2", "SE", "Block", "CBR", "MBConv", "Identity"}


def test_every_blueprint_leaf_has_one_kind():
    leaves = {c for _, c in inspect.getmembers(bpmod, inspect.isclass)
              if issubclass(c, bpmod.Layer) and c is not bpmod.Layer and c.__name__ not in COMPOSITES}
    tr_leaves = {t for t in NODE_KINDS if t.__module__ == bpmod.__name__}  # (not a user's registered leaves)
    assert leaves == tr_leaves, sorted(c.__name__ for c in leaves ^ tr_leaves)
    for kind in dict.fromkeys(KINDS.values()):
        for node_type in kind.nodes:
            assert NODE_KINDS[node_type] is kind


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_a_typed_schema(kind):
    schema = KINDS[kind].schema
    assert dataclasses.is_dataclass(schema)
    for f in dataclasses.fields(schema):
        assert f.type not in (None, "Any"), f"{kind}.{f.name} has no type"


def test_params_are_completed_from_the_schema():
    L = ArchLayer("conv", params(out=8, k=3))
    assert dict(L.params) == {"out": 8, "k": 3, "s": 1, "p": 0, "g": 1, "bias": False}
    assert KINDS["conv"].typed(L).g == 1
    assert dict(ArchLayer("fc", params(out=4)).params) == {"out": 4, "bias": True, "activation": None,
                                                            "relu_mask": False, "drelu": False}
    assert ArchLayer("add_marker_not_a_kind", params(x=1)).params["x"] == 1  # markers keep theirs


def test_a_wrong_parameter_name_or_a_missing_one_is_refused_when_the_layer_is_made():
    with pytest.raises(CompileError, match=r"conv layer: unknown parameter\(s\) \['stride'\]"):
        ArchLayer("conv", params(out=8, k=3, stride=2))
    with pytest.raises(CompileError, match="fc layer: parameter 'out' is missing"):
        ArchLayer("fc", params(bias=False))


def test_leaves_expand_through_their_kind():
    layers = expand(seq(channel_padding(), conv(6, 3, groups=3, bias=True), bn(0.2, 1e-3), relu6(),
                        maxpool(2), avgpool(3, 1, 1), dropout(0.25), gap(), flatten(), fc(5, bias=False),
                        softmax_ce()), 3)
    got = [(L.kind, dict(L.params)) for L in layers]
    assert got == [
        ("channel_pad", {"multiple": 8}),
        ("conv", {"out": 6, "k": 3, "s": 1, "p": 0, "g": 3, "bias": True}),
        ("bn", {"momentum": 0.2, "eps": 1e-3}),
        ("act", {"kind": "relu6"}),
        ("maxpool", {"k": 2, "s": 2, "p": 0}),
        ("avgpool", {"k": 3, "s": 1, "p": 1}),
        ("dropout", {"p": 0.25}),
        ("gap", {}),
        ("flatten", {}),
        ("fc", {"out": 5, "bias": False, "activation": None, "relu_mask": False, "drelu": False}),
        ("softmax_ce", {"classes": 0}),
    ]


def test_descriptions_come_from_the_kinds():
    def d(name, **p):
        return ArchLayer(name, params(**p)).describe()

    assert d("fc", out=10, bias=False) == "fc 10 nobias"
    assert d("fc", out=10, activation="relu") == "fc 10+relu"
    assert d("conv", out=32, k=3, s=2, p=1, g=4, bias=True) == "conv 32 k3 s2 p1 g4 bias"
    assert d("cbr", out=8, k=3, p=1, act="relu", pool=(2, 2, 0)) == "cbr 8 k3 s1 p1+relu+maxpool k2 s2 p0"
    assert d("cbr", out=8, k=1, act="relu6", residual=True) == "cbr 8 k1 s1 p0+add+relu6"
    assert d("maxpool", k=3, s=2, p=1) == "maxpool k3 s2 p1"
    assert d("act", kind="silu") == "silu"
    assert d("add", activation="relu") == "add+relu"
    assert d("dropout", p=0.5) == "dropout 0.5"
    assert d("channel_pad", multiple=8) == "channel_pad 8"
    assert d("mse", classes=7) == "mse 7"
    assert d("gap") == "gap" and d("add2_begin") == "add2_begin"


def test_the_first_layer_kinds_are_the_kinds_that_say_so():
    assert set(FIRST_KINDS) == {"fc", "conv", "cbr", "flatten", "channel_pad"}
    with pytest.raises(CompileError, match="must be one of"):
        mark_first([ArchLayer("act", params(kind="relu"), "", 0, (DATA,))])


def _kind_tests(tree: ast.AST) -> list[str]:
    """`x.kind in ("a", "b")`-style tests: a set of kind names switched on, which a kind trait should say."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                    found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("module", ["archplan.py", "passes.py", "compiler.py", "graph.py"])
def test_the_compile_path_asks_kinds_instead_of_switching_on_name_sets(module):
    src = (GRAPH_SRC / module).read_text()
    assert _kind_tests(ast.parse(src)) == []
    assert ".params.get(" not in src, "params are complete (the kind's schema): index them"
