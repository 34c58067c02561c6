"""tr.algo may import only the standard library, numpy, tr.core and itself (docs/DESIGN.md)."""

import ast
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tr" / "algo"


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_only_allowed_imports():
    files = sorted(SRC.glob("*.py"))
    assert len(files) >= 6
    for f in files:
        for name in _imports(f):
            top = name.split(".")[0]
            ok = top in sys.stdlib_module_names or top == "numpy" or name.startswith(("tr.core", "tr.algo"))
            assert ok, f"{f.name} imports {name}"
            assert name != "tr", f"{f.name} imports the bare tr namespace"


def test_importing_tr_algo_loads_no_other_tr_package():
    code = (
        "import sys, tr.algo; "
        "bad = sorted(m for m in sys.modules if m.startswith('tr.') and m.split('.')[1] not in ('core', 'algo')); "
        "heavy = [m for m in ('torch', 'scipy') if m in sys.modules]; "
        "print(bad + heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert not (SRC.parent / "__init__.py").exists()  # PEP 420: no tr/__init__.py
