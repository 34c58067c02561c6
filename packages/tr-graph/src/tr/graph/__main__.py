"""``python -m tr.graph FILE.py:NAME --batch B --resolution R [--amp] [--json]``."""

import sys

from tr.graph.cli import main

sys.exit(main())
