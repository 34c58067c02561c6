"""tr.core.ops.register_op / unregister_op: an op made outside tr joins the live catalogue (every module that
imported CATALOGUE sees it), in a family of its own, and leaves it again; tr's own entries stay."""

import pytest

import tr.core
from tr.core.errors import CompileError, ConfigError
from tr.core.ops import CATALOGUE, TR_FAMILIES, TR_OPS, Arg, OpCall, OpDef, op_def, register_op, unregister_op

CUBE = OpDef("cube_fwd", "cube", (Arg("x", "in"), Arg("y", "out")), ("scale",), doc="y = scale * x^3")


@pytest.fixture
def cube():
    register_op(CUBE)
    yield CUBE
    unregister_op("cube_fwd")


def test_tr_s_own_entries_are_recorded():
    assert TR_OPS == frozenset(CATALOGUE) and "fc_fwd" in TR_OPS
    assert TR_FAMILIES == {d.family for d in CATALOGUE.values()} and "activation" in TR_FAMILIES


def test_a_registered_op_is_in_the_live_catalogue_until_unregistered(cube):
    assert CATALOGUE["cube_fwd"] is CUBE and tr.core.CATALOGUE["cube_fwd"] is CUBE  # the one live view
    assert op_def("cube_fwd") is CUBE
    call = OpCall.make("cube_fwd", {"x": "a tensor", "y": "another"}, {"scale": 2.0})  # (tensors: tr.tensor's)
    assert call.attrs["scale"] == 2.0
    with pytest.raises(CompileError, match="op cube_fwd: unknown attribute 'power'"):
        OpCall.make("cube_fwd", {"x": "a tensor", "y": "another"}, {"power": 3})
    with pytest.raises(TypeError):
        CATALOGUE["other"] = CUBE  # type: ignore[index]  (a read-only view)
    assert unregister_op("cube_fwd") is CUBE
    assert "cube_fwd" not in CATALOGUE
    register_op(CUBE)  # (the fixture removes it)


def test_a_name_clash_is_refused(cube):
    with pytest.raises(ConfigError, match=r"op 'cube_fwd' is already in the catalogue \(family 'cube'\)"):
        register_op(CUBE)
    with pytest.raises(ConfigError, match="op 'fc_fwd' is already in the catalogue"):
        register_op(OpDef("fc_fwd", "cube", (Arg("x", "in"),)))


@pytest.mark.parametrize("entry, message", [
    ("cube_fwd", "register_op takes a tr.core.ops.OpDef, got str"),
    (OpDef("cube fwd", "cube", (Arg("x", "in"),)), "an op's name must be a Python identifier"),
    (OpDef("cube_fwd", "activation", (Arg("x", "in"),)), "family 'activation' is one of tr's own"),
    (OpDef("cube_fwd", "cube", ()), "args must be a non-empty tuple of Arg"),
    (OpDef("cube_fwd", "cube", [Arg("x", "in")]), "args must be a non-empty tuple of Arg"),
    (OpDef("cube_fwd", "cube", (("x", "in"),)), "every argument must be a tr.core.ops.Arg"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in"), Arg("x", "out"))), "argument 'x' is listed twice"),
    (OpDef("cube_fwd", "cube", (Arg("x", "input"),)), "argument 'x' has role 'input'"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in", "array"),)), "kind 'array'"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in"),), ("a", "a")), "attrs must be a tuple of distinct names"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in"),), kind="fused"), "kind 'fused' is not one of"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in"), Arg("y", "out")), inplace=(("x", "y"),)),
     r"inplace pair \('x', 'y'\) must name an out"),
    (OpDef("cube_fwd", "cube", (Arg("x", "in"), Arg("y", "out")), inplace=(("y", "z"),)), r"inplace pair"),
])
def test_a_malformed_entry_is_refused_naming_the_bad_value(entry, message):
    with pytest.raises(ConfigError, match=message):
        register_op(entry)
    assert "cube_fwd" not in CATALOGUE


def test_tr_s_own_ops_cannot_be_unregistered():
    with pytest.raises(ConfigError, match="op 'act_fwd' is tr's own"):
        unregister_op("act_fwd")
    with pytest.raises(ConfigError, match="op 'cube_fwd' is not registered"):
        unregister_op("cube_fwd")
    assert "act_fwd" in CATALOGUE
