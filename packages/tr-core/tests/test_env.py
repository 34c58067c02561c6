"""tr.core.env: every variable declared once, parsed strictly (a wrong value is a ConfigError naming the
variable, the value and what it accepts), read through get(), and the plan- and numerics-changing ones recorded."""

from __future__ import annotations

import pytest

from tr.core import env
from tr.core.env import Var
from tr.core.errors import ConfigError

FLAG = Var("TR_T_FLAG", "flag", False, "t", "a flag", why="a test")
ON_FLAG = Var("TR_T_ON", "flag", True, "t", "a flag on by default", why="a test")
INT = Var("TR_T_INT", "int", 1024, "t", "an int", above=0, unit="MiB", what="the cap", why="a test")
FLOAT = Var("TR_T_FLOAT", "float", 300.0, "t", "seconds", above=0, unit="seconds", what="the timeout", why="a test")
CHOICE = Var("TR_T_CHOICE", "choice", "auto", "t", "a choice", choices=("auto", "cudnn", "direct"), why="a test")
PATH = Var("TR_T_PATH", "path", None, "t", "a path", why="a test")
TEXT = Var("TR_T_STR", "str", "80;90", "t", "text", read="build")


@pytest.mark.parametrize("var,raw,want", [
    (FLAG, "1", True), (FLAG, "true", True), (FLAG, " ON ", True), (FLAG, "Yes", True),
    (FLAG, "0", False), (FLAG, "off", False), (FLAG, "FALSE", False), (FLAG, "no", False),
    (FLAG, "", False), (FLAG, "  ", False), (ON_FLAG, "", True), (ON_FLAG, "0", False),
    (INT, "1", 1), (INT, " 2048 ", 2048), (INT, "+7", 7), (INT, "", 1024),
    (FLOAT, "7.5", 7.5), (FLOAT, "45", 45.0), (FLOAT, "1e3", 1000.0), (FLOAT, ".5", 0.5), (FLOAT, "", 300.0),
    (CHOICE, "cudnn", "cudnn"), (CHOICE, " DIRECT ", "direct"), (CHOICE, "", "auto"),
    (PATH, "/opt/lib/libcudnn.so.9", "/opt/lib/libcudnn.so.9"), (PATH, "", None),
    (TEXT, "90", "90"), (TEXT, "", "80;90"),
])
def test_good_values_parse_to_their_values(var, raw, want):
    got = var.parse(raw)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("var,raw,message", [
    # the old readers took these silently: TR_FC_DRELU "true" as off (only "1" was on), TR_CUBLASLT_EPILOGUES
    # "off" and "no" as on (anything but "0" was), TR_DATA_OFFLINE "false" as on (anything but "" and "0" was)
    (FLAG, "2", "TR_T_FLAG='2': expected a flag: 1, true, yes or on, or 0, false, no or off (unset or empty: 0)"),
    (FLAG, "enabled", "TR_T_FLAG='enabled': expected a flag"),
    (ON_FLAG, "y", "(unset or empty: 1)"),
    (INT, "1.5", "TR_T_INT='1.5' is not a number: expected a whole number of MiB > 0"),
    (INT, "12abc", "TR_T_INT='12abc' is not a number"),
    (INT, "1_000", "TR_T_INT='1_000' is not a number"),
    (INT, "\u0661", "is not a number"),  # int() takes the Arabic-Indic one
    (INT, "0", "TR_T_INT='0': the cap must be > 0 MiB, got 0"),
    (INT, "-5", "the cap must be > 0 MiB, got -5"),
    (FLOAT, "soon", "TR_T_FLOAT='soon' is not a number: expected a number of seconds > 0"),
    (FLOAT, "nan", "TR_T_FLOAT='nan' is not a number"),
    (FLOAT, "inf", "TR_T_FLOAT='inf' is not a number"),
    (FLOAT, "1e999", "TR_T_FLOAT='1e999' is not a finite number"),
    (FLOAT, "-1", "TR_T_FLOAT='-1': the timeout must be > 0 seconds, got -1.0"),
    (FLOAT, "0", "the timeout must be > 0 seconds, got 0.0"),
    (CHOICE, "fastest", "TR_T_CHOICE='fastest': expected one of ['auto', 'cudnn', 'direct']"),
    (CHOICE, "cudnn,direct", "expected one of"),
])
def test_bad_values_are_config_errors_naming_the_variable_the_value_and_what_is_accepted(var, raw, message):
    with pytest.raises(ConfigError) as e:
        var.parse(raw)
    assert message in str(e.value) and str(e.value).startswith(f"environment variable {var.name}=")


def test_get_reads_the_environment_on_every_call(monkeypatch):
    monkeypatch.delenv("TR_FC_DRELU", raising=False)
    assert env.get("TR_FC_DRELU") is False
    monkeypatch.setenv("TR_FC_DRELU", "yes")
    assert env.get("TR_FC_DRELU") is True
    monkeypatch.setenv("TR_FC_DRELU", "")
    assert env.get("TR_FC_DRELU") is False
    monkeypatch.setenv("TR_FC_DRELU", "sometimes")
    with pytest.raises(ConfigError, match="TR_FC_DRELU='sometimes'"):
        env.get("TR_FC_DRELU")


def test_get_reads_a_given_mapping_instead_of_the_environment(monkeypatch):
    monkeypatch.setenv("TR_DIST_TIMEOUT", "5")
    assert env.get("TR_DIST_TIMEOUT", {}) == 300.0
    assert env.get("TR_DIST_TIMEOUT", {"TR_DIST_TIMEOUT": "12.5"}) == 12.5
    assert env.get("TR_DIST_TIMEOUT") == 5.0


def test_an_undeclared_variable_cannot_be_read():
    with pytest.raises(ConfigError, match="'TR_NOT_A_VARIABLE' is not declared in tr.core.env; declared: "
                                          "TR_DIST_TIMEOUT, "):
        env.get("TR_NOT_A_VARIABLE")


@pytest.mark.parametrize("var,message", [
    (Var("TR_FC_DRELU", "flag", False, "t", "again", why="w"), "declared twice"),
    (Var("TR_T_X", "bool", False, "t", "d", why="w"), "type 'bool'"),
    (Var("TR_T_X", "flag", False, "t", "d", effect="speed", why="w"), "effect 'speed'"),
    (Var("TR_T_X", "flag", False, "t", "d", read="later", why="w"), "read 'later'"),
    (Var("TR_T_X", "choice", "a", "t", "d", why="w"), "choices ()"),
    (Var("TR_T_X", "str", "a", "t", "d", choices=("a",), why="w"), "choices ('a',)"),
    (Var("TR_T_X", "flag", False, "t", "d", effect="plan"), "says why its effect is 'plan'"),
    (Var("TR_T_X", "flag", False, "t", "d", read="native"), "says why"),
    (Var("TR_T_X", "flag", False, "t", "d", read="build", effect="plan"), "effect must be 'none'"),
    (Var("TR_T_X", "int", 0, "t", "d", above=0, why="w"), "the default 0 is not a value of type 'int'"),
    (Var("TR_T_X", "choice", "fast", "t", "d", choices=("a", "b"), why="w"), "expected one of ['a', 'b']"),
    (Var("TR_T_X", "flag", "yes", "t", "d", why="w"), "the default 'yes' is not a value of type 'flag' (it reads "
                                                      "back as another value)"),
])
def test_a_declaration_is_complete_and_made_once(var, message):
    before = dict(env.VARIABLES)
    with pytest.raises(ConfigError, match="declaring ") as e:
        env.declare(var)
    assert message in str(e.value) and dict(env.VARIABLES) == before


def test_the_registry_cannot_be_changed_but_through_declare():
    with pytest.raises(TypeError):
        env.VARIABLES["TR_T_X"] = FLAG  # type: ignore[index]


def test_every_declaration_says_what_it_changes_and_why():
    assert {v.effect for v in env.VARIABLES.values()} == set(env.EFFECTS)
    for v in env.VARIABLES.values():
        assert v.doc and v.package and v.name.isupper(), v
        if v.read in ("python", "native"):
            assert len(v.why) > 20, v.name  # a reason, not a word
        if v.default is not None:
            assert v.parse(v.show(v.default)) == v.default, v.name


def test_the_variables_that_change_the_plan_or_the_numbers():
    assert {n: v.effect for n, v in env.VARIABLES.items() if v.effect in env.RECORDED} == {
        "TR_FC_DRELU": "plan", "TR_CUBLASLT_EPILOGUES": "numerics"}
    assert env.recorded({}) == env.recorded_defaults() == {"TR_CUBLASLT_EPILOGUES": True, "TR_FC_DRELU": False}
    assert list(env.recorded({})) == sorted(env.recorded({}))  # a stable order for the checkpoint's description
    assert env.recorded({"TR_FC_DRELU": "on", "TR_CONV": "direct"}) == {"TR_CUBLASLT_EPILOGUES": True,
                                                                          "TR_FC_DRELU": True}
    with pytest.raises(ConfigError, match="TR_CUBLASLT_EPILOGUES='maybe'"):
        env.recorded({"TR_CUBLASLT_EPILOGUES": "maybe"})


def test_show_writes_values_as_one_would_set_them():
    assert [FLAG.show(True), FLAG.show(False), FLOAT.show(300.0), FLOAT.show(7.5), INT.show(1024), PATH.show(None),
            CHOICE.show("auto")] == ["1", "0", "300", "7.5", "1024", "unset", "auto"]
    assert [v.accepts() for v in (FLAG, INT, FLOAT, CHOICE, PATH, TEXT)] == [
        "a flag", "a whole number of MiB > 0", "a number of seconds > 0", "one of auto, cudnn, direct", "a path",
        "text"]


def test_the_variables_native_code_reads_are_parsed_strictly_before_it_does():
    """C's atol reads TR_CUDNN_WORKSPACE_MB=2G as 2 MiB (and 'abc' as the default): check_native refuses such a
    value naming the variable (the CUDA backend calls it first: packages/tr-backend/tests/test_cuda_env.py)."""
    env.check_native({"TR_CUDNN_WORKSPACE_MB": "256", "TR_CUDNN_CACHE": "0"})
    for name, value in (("TR_CUDNN_WORKSPACE_MB", "2G"), ("TR_CUDNN_WORKSPACE_MB", "0"), ("TR_CUDNN_CACHE", "maybe")):
        with pytest.raises(ConfigError, match=name):
            env.check_native({name: value})
