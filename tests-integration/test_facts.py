"""tools/facts.py: every count README.md and docs/*.md state is the code's count, a planted wrong count is caught,
and each package's source stays within its line budget (tools/line_budget.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import facts  # noqa: E402


def test_every_count_the_docs_state_is_the_codes():
    wrong = facts.wrong_counts(facts.documents(), facts.facts())
    assert wrong == [], "\n".join(f"{s.where}: {s.text!r}, the code has {real}" for s, real in wrong)


def test_a_planted_wrong_count_is_caught_and_a_right_one_is_not():
    known = facts.facts()
    text = (f"tr is {known['packages']} separately installable packages with {known['ops'] + 1} catalogue ops\n"
            f"in three op families; the plan fuses 4 ops fewer per step.\n")
    wrong = facts.wrong_counts([("PLANTED.md", text)], known)
    assert [(s.fact, s.said, s.where) for s, _ in wrong] == [("ops", known["ops"] + 1, "PLANTED.md:1"),
                                                            ("op_families", 3, "PLANTED.md:2")]
    assert [real for _, real in wrong] == [known["ops"], known["op_families"]]


def test_the_counts_come_from_the_code():
    from tr.core.ops import CATALOGUE
    from tr.graph.layers import BUILTIN_KINDS

    known = facts.facts()
    assert known["ops"] == len(CATALOGUE) and known["layer_kinds"] == len(BUILTIN_KINDS)
    assert known["packages"] == 7 and set(known["lines"]) == {f"tr-{p}" for p in
                                                             ("algo", "backend", "core", "data", "graph", "task",
                                                              "tensor")}


def test_every_package_is_within_its_line_budget():
    budget = json.loads(facts.BUDGET_FILE.read_text())["budget"]
    assert facts.over_budget(facts.package_lines(), budget) == []


def test_a_package_over_its_budget_or_without_one_is_named():
    msgs = facts.over_budget({"tr-x": 101, "tr-y": 5}, {"tr-x": 100})
    assert len(msgs) == 2 and msgs[0].startswith("tr-x: 101 lines, over its budget of 100")
    assert msgs[1].startswith("tr-y: 5 lines and no budget")
