"""Architecture check: a tr package may import only the packages DESIGN.md's table allows.

Run as ``python tools/archcheck/archcheck.py [ROOT]``; exits 1 and lists every violation. It reads every
``.py`` file under ``packages/tr-<name>/src`` with ``ast`` (imports inside functions count too) and every
``pyproject.toml`` (a package may depend only on the tr distributions it may import).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

# package -> tr packages it may import (docs/DESIGN.md, "Packages and their direction")
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "tensor": frozenset({"core"}),
    "graph": frozenset({"tensor", "core"}),
    "algo": frozenset({"core"}),
    "data": frozenset({"core"}),
    "backend": frozenset({"tensor", "core"}),
    "task": frozenset({"core", "tensor", "graph", "algo", "data", "backend"}),
}
UMBRELLA = "renaissance"  # shipped by tr-task, may import everything; nobody may import it
# modules that must stay ignorant of some others: the compiler, the graph builder, CompileSpec and the executor
# call the input protocol (tr.graph.input_plan) and name no input (issue [20])
INPUT_MODULES = ("tr.graph.resident", "tr.graph.jpeg_input", "tr.task.resident", "tr.task.jpeg_feeder")
MODULE_FORBIDDEN: dict[str, tuple[str, ...]] = {
    "tr.graph.compiler": INPUT_MODULES,
    "tr.graph.graph": INPUT_MODULES,
    "tr.graph.spec": INPUT_MODULES,
    "tr.task.executor": INPUT_MODULES,
}


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    package: str
    imported: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: tr.{self.package} may not import {self.imported}"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tr":  # from tr import graph
                out += [(node.lineno, f"tr.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def _target(module: str) -> str | None:
    """The tr package a module name belongs to ('tr.graph.compiler' -> 'graph'), or the umbrella."""
    if module == UMBRELLA or module.startswith(UMBRELLA + "."):
        return UMBRELLA
    m = re.match(r"tr\.(\w+)", module)
    return m.group(1) if m else None


def check_sources(root: Path) -> list[Violation]:
    found: list[Violation] = []
    for pkg_dir in sorted((root / "packages").glob("tr-*")):
        pkg = pkg_dir.name[3:]
        allowed = ALLOWED.get(pkg)
        if allowed is None:
            continue
        for py in sorted((pkg_dir / "src").rglob("*.py")):
            is_umbrella = UMBRELLA in py.relative_to(pkg_dir / "src").parts[:1]
            tree = ast.parse(py.read_text(encoding="utf-8"), filename=str(py))
            for line, mod in _imported_modules(tree):
                tgt = _target(mod)
                if tgt is None or tgt == pkg or (is_umbrella and tgt != UMBRELLA):
                    continue
                if tgt == UMBRELLA or tgt not in allowed:
                    found.append(Violation(py.relative_to(root), line, pkg, mod))
    return found


def check_modules(root: Path) -> list[str]:
    """MODULE_FORBIDDEN: each listed module imports none of its forbidden ones (at any depth of the file)."""
    problems: list[str] = []
    for module, forbidden in MODULE_FORBIDDEN.items():
        parts = module.split(".")
        py = root / "packages" / f"tr-{parts[1]}" / "src" / Path(*parts).with_suffix(".py")
        if not py.exists():
            continue
        tree = ast.parse(py.read_text(encoding="utf-8"), filename=str(py))
        for line, mod in _imported_modules(tree):
            if any(mod == f or mod.startswith(f + ".") for f in forbidden):
                problems.append(f"{py.relative_to(root)}:{line}: {module} may not import {mod} (it calls the "
                                "input protocol, tr.graph.input_plan)")
    return problems


def check_dependencies(root: Path) -> list[str]:
    problems: list[str] = []
    for pkg_dir in sorted((root / "packages").glob("tr-*")):
        pkg = pkg_dir.name[3:]
        pp = pkg_dir / "pyproject.toml"
        if pkg not in ALLOWED or not pp.exists():
            continue
        deps = tomllib.loads(pp.read_text()).get("project", {}).get("dependencies", [])
        for d in deps:
            m = re.match(r"tr-(\w+)", d)
            if m and m.group(1) not in ALLOWED[pkg]:
                problems.append(f"{pp.relative_to(root)}: tr-{pkg} may not depend on tr-{m.group(1)}")
        missing = {x for x in ALLOWED[pkg]} - {m.group(1) for d in deps if (m := re.match(r"tr-(\w+)", d))}
        if missing and pkg == "task":
            problems.append(f"{pp.relative_to(root)}: tr-task must depend on {sorted(missing)}")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[2])
    problems = [str(v) for v in check_sources(root)] + check_modules(root) + check_dependencies(root)
    for p in problems:
        print(p)
    print(f"architecture check: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
