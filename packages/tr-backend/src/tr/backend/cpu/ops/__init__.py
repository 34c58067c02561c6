"""CPU implementations of the op catalogue: one module per op family (tr.core.ops OpDef.family).

Importing this package registers every implementation with tr.backend.registry under backend "cpu".
"""

from tr.backend.cpu.ops import (  # noqa: F401  (imported for their registrations)
    activation,
    add,
    augment,
    bn,
    bn_pool,
    conv,
    copy,
    dropout,
    fc,
    flatten,
    onehot_loss,
    pool,
    range,
    resident,
    scalar,
    scale,
    softmax_ce,
    transfer,
)
