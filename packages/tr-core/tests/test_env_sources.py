"""The source tree against tr.core.env's registry: tr's Python code reads no TR_ variable but through
tr.core.env.get, every TR_ name it mentions is declared, and every variable the native code, CMake, the
packages' build settings and tools/bootstrap.sh read is declared with that reader; no declaration is stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tr.core import env

ROOT = Path(__file__).resolve().parents[3]
REGISTRY = ROOT / "packages/tr-core/src/tr/core/env.py"
# Variables of the tools and benchmarks themselves, which tr's packages never read (out of the registry's scope).
TOOLS_OWN = {
    "TR_TREE_HASH": "the tree's hash for the reports, set by benchmarks/h200_session.sh on the device",
    "TR_IMAGE_SOURCES": "tools/make_image_folder.py's list of image URLs",
}
_TR = re.compile(r"TR_[A-Z0-9_]+")


def _python_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in ROOT.glob(top) if p.suffix == ".py")


def _is_environ(node: ast.AST) -> bool:
    """``os.environ``, a bare ``environ`` (from os import environ), or ``(os.environ if ... else other)``."""
    if isinstance(node, ast.IfExp):
        return _is_environ(node.body) or _is_environ(node.orelse)
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every direct environment access whose key is a string constant or a module-level
    name bound to one: os.getenv(k), os.environ.get(k) (and setdefault, pop), os.environ[k], k in os.environ."""
    tree = ast.parse(source)
    names = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
             for t in n.targets if isinstance(t, ast.Name)}

    def key(k: ast.AST) -> str | None:
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            return k.value
        return names.get(k.id) if isinstance(k, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        k = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop") and _is_environ(f.value)) \
                    or (isinstance(f, ast.Attribute) and f.attr == "getenv") \
                    or (isinstance(f, ast.Name) and f.id == "getenv"):
                k = key(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            k = key(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            k = key(node.left)
        if k is not None:
            found.append((node.lineno, k))
    return found


def _tr_constants(source: str) -> set[str]:
    """Every string constant that is a TR_ name (a registry read's argument, a module constant), not prose."""
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and _TR.fullmatch(n.value)}


def test_the_scanner_finds_every_form_of_a_direct_read():
    src = ('import os\nfrom os import environ, getenv\nNAME = "TR_E"\n'
           'a = os.environ.get("TR_A", "0")\nb = os.getenv("TR_B")\nc = os.environ["TR_C"]\nd = "TR_D" in environ\n'
           'e = os.environ.get(NAME)\nf = getenv("TR_F")\nos.environ.setdefault("TR_G", "1")\n'
           'g = os.environ.get(unknown)\nh = {}.get("TR_H")\ni = (os.environ if m is None else m).get("TR_I")\n')
    assert sorted(k for _, k in environment_reads(src)) == ["TR_A", "TR_B", "TR_C", "TR_D", "TR_E", "TR_F", "TR_G",
                                                           "TR_I"]
    assert _tr_constants(src) == {"TR_A", "TR_B", "TR_C", "TR_D", "TR_E", "TR_F", "TR_G", "TR_H", "TR_I"}


def test_tr_python_code_reads_tr_variables_only_through_the_registry():
    files = [p for p in _python_files("packages/*/src/**/*") if p != REGISTRY]
    assert len(files) > 100  # the scan saw the packages
    direct = [f"{p.relative_to(ROOT)}:{line}: {k}" for p in files
              for line, k in environment_reads(p.read_text(encoding="utf-8")) if k.startswith("TR_")]
    assert direct == [], "read these through tr.core.env.get (declare them there first)"


def test_every_tr_name_in_tr_python_code_is_declared():
    undeclared = {f"{p.relative_to(ROOT)}: {k}" for p in _python_files("packages/*/src/**/*")
                  for k in _tr_constants(p.read_text(encoding="utf-8")) if k not in env.VARIABLES}
    assert undeclared == set()


def test_the_tools_read_declared_variables_or_their_own():
    files = _python_files("tools/**/*", "benchmarks/**/*", "examples/**/*")
    assert files
    unknown = {f"{p.relative_to(ROOT)}:{line}: {k}" for p in files for line, k in
               environment_reads(p.read_text(encoding="utf-8"))
               if k.startswith("TR_") and k not in env.VARIABLES and k not in TOOLS_OWN}
    assert unknown == set(), "declare these in tr.core.env when tr reads them, else add them to TOOLS_OWN"
    assert not set(TOOLS_OWN) & set(env.VARIABLES)


def _native_reads() -> set[str]:
    pattern = re.compile(r'(?:getenv|library_candidates)\(\s*"(TR_[A-Z0-9_]+)"')
    return {m for p in ROOT.glob("packages/*/csrc/**/*") if p.suffix in (".cpp", ".cu", ".hpp", ".cuh", ".h")
            for m in pattern.findall(p.read_text(encoding="utf-8", errors="replace"))}


def _build_reads() -> set[str]:
    cmake = [*ROOT.glob("packages/*/CMakeLists.txt"), *ROOT.glob("packages/*/csrc/**/*.cmake"),
             *ROOT.glob("packages/*/csrc/**/CMakeLists.txt")]
    out: set[str] = set()
    for p in cmake:
        text = p.read_text(encoding="utf-8")
        out |= set(re.findall(r"ENV\{(TR_[A-Z0-9_]+)\}", text))
        for roots in re.findall(r"tr_search_roots\(\s*\w+\s+VARS\s+(.*?)(?:\bSITE\b|\))", text, re.S):
            out |= set(_TR.findall(roots))  # each named root: a CMake variable, else the environment's
    for p in ROOT.glob("packages/*/pyproject.toml"):
        out |= set(re.findall(r'env\s*=\s*"(TR_[A-Z0-9_]+)"', p.read_text(encoding="utf-8")))
    return out


def _setup_reads() -> set[str]:
    shell = set(re.findall(r"\$\{?(TR_[A-Z0-9_]+|PYTHON)\b", (ROOT / "tools/bootstrap.sh").read_text()))
    stamp = {k for _, k in environment_reads((ROOT / "tools/bootstrap_stamp.py").read_text())}
    return shell | {k for k in stamp if k.startswith("TR_")}


@pytest.mark.parametrize("reader,found", [("native", _native_reads), ("build", _build_reads),
                                          ("setup", _setup_reads)])
def test_every_variable_read_outside_python_is_declared_with_its_reader(reader, found):
    names = found()
    assert names, f"the scan found no {reader} reads: has the tree moved?"
    wrong = {n: getattr(env.VARIABLES.get(n), "read", "undeclared") for n in names
             if n not in env.VARIABLES or env.VARIABLES[n].read != reader}
    assert wrong == {}


def test_no_declaration_is_stale():
    python = set().union(*(_tr_constants(p.read_text(encoding="utf-8"))
                           for p in _python_files("packages/*/src/**/*") if p != REGISTRY))
    read = {"python": python, "native": _native_reads(), "build": _build_reads(), "setup": _setup_reads()}
    stale = {n: v.read for n, v in env.VARIABLES.items() if n not in read[v.read]}
    assert stale == {}, "declared, but nothing reads them so"
