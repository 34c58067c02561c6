"""Make the shared test helpers (backend_testkit.py, next to this file) importable by the test modules."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
