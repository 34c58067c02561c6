"""Fixtures of the tr.tensor tests: the parser fuzzer of tools/testkit/parser_fuzz.py (fixture ``fuzz``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# ---- parser fuzzing: tools/testkit/parser_fuzz.py, shared with the other package's tests ------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "testkit"))
from parser_fuzz import EXTREME_U32, SLOW_CASE_S, Outcome, mutate, run_fuzz  # noqa: E402,F401


@pytest.fixture
def fuzz():
    return run_fuzz
