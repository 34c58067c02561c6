"""The counts people quote about tr, read from the code: ops, op families, layer kinds, memory roles, step parts,
environment variables, packages and source lines per package. Prose states a count only if this prints it: the
test tests-integration/test_facts.py checks every count README.md and docs/*.md state against these, and holds
each package's source lines to its budget in tools/line_budget.json.

    python tools/facts.py            # the table
    python tools/facts.py --json     # the same as JSON
    python tools/facts.py --check    # the counts README.md and docs/*.md state, against these (exit 1 if any differs)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_SUFFIXES = (".py", ".cpp", ".hpp", ".h", ".cu", ".cuh")
BUDGET_FILE = ROOT / "tools" / "line_budget.json"

# how prose names each count: "75 catalogue ops", "26 op families", ... (a number before the noun; "ops" alone is
# too common a word: "4 ops fewer per step")
NOUNS = {
    "ops": r"(?:catalogue ops|catalogued ops|ops in (?:the|its|tr's) catalogue)",
    "op_families": r"op famil(?:y|ies)",
    "layer_kinds": r"(?:built-in )?layer kinds?",
    "memory_roles": r"(?:memory )?roles",
    "step_parts": r"step parts?",
    "env_variables": r"(?:environment|env) variables?",
    "packages": r"(?:separately )?(?:installable )?packages",
}
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
         "ten": 10, "eleven": 11, "twelve": 12}


def package_lines(root: Path = ROOT) -> dict[str, int]:
    """Lines of the tracked source files (Python, C++, CUDA) under each package's src/ and csrc/."""
    out: dict[str, int] = {}
    for pkg in sorted(p for p in (root / "packages").iterdir() if (p / "pyproject.toml").is_file()):
        files = subprocess.run(["git", "-C", str(root), "ls-files", "--", f"{pkg.relative_to(root)}/src",
                                f"{pkg.relative_to(root)}/csrc"], capture_output=True, text=True, check=True)
        paths = [root / f for f in files.stdout.splitlines() if f.endswith(SOURCE_SUFFIXES)]
        out[pkg.name] = sum(len(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in paths
                            if p.is_file())
    return out


def facts(root: Path = ROOT) -> dict[str, int | dict[str, int]]:
    from tr.core.env import VARIABLES
    from tr.core.memory import Role
    from tr.core.ops import CATALOGUE
    from tr.graph.layers import BUILTIN_KINDS
    from tr.graph.steps import Part

    lines = package_lines(root)
    return {"ops": len(CATALOGUE), "op_families": len({d.family for d in CATALOGUE.values()}),
            "layer_kinds": len(BUILTIN_KINDS), "memory_roles": len(list(Role)), "step_parts": len(list(Part)),
            "env_variables": len(VARIABLES), "packages": len(lines), "lines": lines}


@dataclass(frozen=True)
class Stated:
    where: str  # file:line
    fact: str
    said: int
    text: str


def stated_counts(text: str, where: str) -> list[Stated]:
    """Every "<number> <noun>" of NOUNS in ``text`` (digits or a number word up to twelve)."""
    number = r"(\d[\d,]*|" + "|".join(WORDS) + r")"
    found: list[Stated] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for fact, noun in NOUNS.items():
            for m in re.finditer(rf"\b{number}\s+{noun}\b", line, flags=re.IGNORECASE):
                raw = m.group(1).lower()
                said = WORDS[raw] if raw in WORDS else int(raw.replace(",", ""))
                found.append(Stated(f"{where}:{lineno}", fact, said, m.group(0)))
    return found


def wrong_counts(documents: Iterable[tuple[str, str]], known: dict) -> list[tuple[Stated, int]]:
    """(statement, the real count) for every stated count that differs from ``known``."""
    return [(s, known[s.fact]) for where, text in documents for s in stated_counts(text, where)
            if s.said != known[s.fact]]


def documents(root: Path = ROOT) -> list[tuple[str, str]]:
    paths = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [(str(p.relative_to(root)), p.read_text(encoding="utf-8")) for p in paths if p.is_file()]


def over_budget(lines: dict[str, int], budget: dict[str, int]) -> list[str]:
    """The packages whose source lines exceed their budget (or have none), as messages."""
    out = []
    for pkg, n in lines.items():
        if pkg not in budget:
            out.append(f"{pkg}: {n} lines and no budget in {BUDGET_FILE.name}")
        elif n > budget[pkg]:
            out.append(f"{pkg}: {n} lines, over its budget of {budget[pkg]} (raise it in {BUDGET_FILE.name} only "
                       f"with a reason in the commit; first look for what can go)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true", help="the counts the docs state, against the code's")
    a = ap.parse_args(argv)
    known = facts()
    if a.check:
        wrong = wrong_counts(documents(), known)
        for s, real in wrong:
            print(f"{s.where}: says {s.text!r}; the code has {real} {s.fact.replace('_', ' ')}")
        return 1 if wrong else 0
    if a.json:
        print(json.dumps(known, indent=1))
        return 0
    for k, v in known.items():
        if isinstance(v, dict):
            for pkg, n in v.items():
                print(f"lines {pkg:<12} {n:>7}")
        else:
            print(f"{k:<18} {v:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
