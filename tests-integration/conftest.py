"""Make the shared helpers next to this file (resident_chain.py, the worker scripts) importable by the tests."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
