"""Make the shared helpers next to this file (resident_chain.py, the worker scripts) and the parser fuzzer of
tools/testkit/parser_fuzz.py (test_fuzz_torch_io.py; fixture ``fuzz``) importable by the tests; the fuzzer's
per-suite summary ends the run."""

import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent / "tools" / "testkit")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import parser_fuzz  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    parser_fuzz.install(config)  # the fixture ``fuzz`` and the per-suite summary
