"""tr-graph test configuration: the helper module and the example models."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tr_graph_testlib import load_models  # noqa: E402


@pytest.fixture(scope="session")
def models():
    return load_models()
