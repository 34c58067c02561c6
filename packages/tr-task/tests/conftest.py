"""tr-task test configuration: the parser fuzzer of tools/testkit/parser_fuzz.py (fixture ``fuzz``;
test_fuzz_checkpoint.py imports its structure-aware driver), and its per-suite summary at the end of the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTKIT = str(Path(__file__).resolve().parents[3] / "tools" / "testkit")
if _TESTKIT not in sys.path:
    sys.path.insert(0, _TESTKIT)

import parser_fuzz  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    parser_fuzz.install(config)


@pytest.fixture
def fuzz():
    return parser_fuzz.run_fuzz
