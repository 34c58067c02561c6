"""The package direction of docs/DESIGN.md holds, and the checker catches a planted violation."""

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("archcheck", ROOT / "tools" / "archcheck" / "archcheck.py")
archcheck = importlib.util.module_from_spec(_spec)
sys.modules["archcheck"] = archcheck
_spec.loader.exec_module(archcheck)


def test_repository_respects_the_table():
    assert archcheck.check_sources(ROOT) == []
    assert archcheck.check_modules(ROOT) == []
    assert archcheck.check_dependencies(ROOT) == []


def test_checker_catches_the_compiler_naming_an_input(tmp_path):
    root = _fixture(tmp_path)
    compiler = root / "packages/tr-graph/src/tr/graph/compiler.py"
    compiler.write_text("from tr.graph.input_plan import INPUT_REGIONS\n")
    assert archcheck.check_modules(root) == []
    compiler.write_text("from tr.graph.input_plan import INPUT_REGIONS\n\ndef f():\n    import tr.graph.resident\n")
    (msg,) = archcheck.check_modules(root)
    assert msg.startswith("packages/tr-graph/src/tr/graph/compiler.py:4: tr.graph.compiler may not import "
                          "tr.graph.resident")


def _fixture(tmp_path: Path) -> Path:
    for pkg in ("core", "tensor", "graph", "backend"):
        src = tmp_path / "packages" / f"tr-{pkg}" / "src" / "tr" / pkg
        src.mkdir(parents=True)
        (src / "__init__.py").write_text("")
    (tmp_path / "packages/tr-graph/src/tr/graph/ok.py").write_text("from tr.tensor import DTensor\nimport tr.core\n")
    return tmp_path


def test_checker_catches_upward_import(tmp_path):
    root = _fixture(tmp_path)
    assert archcheck.check_sources(root) == []
    planted = root / "packages/tr-backend/src/tr/backend/bad.py"
    planted.write_text("import numpy\n\ndef f():\n    from tr.graph.compiler import compile_program\n")
    (v,) = archcheck.check_sources(root)
    assert v.package == "backend" and v.imported == "tr.graph.compiler" and v.line == 4


def test_checker_catches_sideways_and_from_tr_import(tmp_path):
    root = _fixture(tmp_path)
    (root / "packages/tr-core/src/tr/core/bad.py").write_text("from tr import tensor\n")
    (v,) = archcheck.check_sources(root)
    assert v.package == "core" and v.imported == "tr.tensor"


def test_checker_catches_bad_dependency(tmp_path):
    root = _fixture(tmp_path)
    shutil.copy(ROOT / "packages/tr-tensor/pyproject.toml", root / "packages/tr-tensor/pyproject.toml")
    assert archcheck.check_dependencies(root) == []
    pp = root / "packages/tr-tensor/pyproject.toml"
    pp.write_text(pp.read_text().replace('"tr-core==0.1.0"', '"tr-core==0.1.0", "tr-graph==0.1.0"'))
    (msg,) = archcheck.check_dependencies(root)
    assert msg == "packages/tr-tensor/pyproject.toml: tr-tensor may not depend on tr-graph"
