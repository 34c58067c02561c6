"""CUDA implementations of the op catalogue: one module per op family (tr.core.ops OpDef.family).

Each builder checks its call with the family's rule (tr.backend.rules, the checks the CPU backend runs too) and
binds it to a native op of the extension (csrc/ops/<family>.cu). Importing this package imports every family's
module, which registers its builders under backend "cuda"; it needs no driver (builders run only at capture).
"""

from tr.backend.registry import import_families

import_families(__name__)
