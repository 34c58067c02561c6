"""Fixtures of the tr.tensor tests: the parser fuzzer of tools/testkit/parser_fuzz.py (fixture ``fuzz``) and its
per-suite summary at the end of the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# ---- parser fuzzing: tools/testkit/parser_fuzz.py, shared with the other package's tests ------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "testkit"))
import parser_fuzz  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tsr_files (--import-mode=importlib adds no path)


def pytest_configure(config: pytest.Config) -> None:
    parser_fuzz.install(config)  # the fixture ``fuzz`` and the per-suite summary
