"""CPU implementations of the op catalogue: one module per op family (tr.core.ops OpDef.family).

Importing this package imports every family's module, which registers its implementations with
tr.backend.registry under backend "cpu".
"""

from tr.backend.registry import import_families

import_families(__name__)
