"""CUDA implementations of the op catalogue: one module per op family (tr.core.ops OpDef.family).

Each builder checks its call with the family's rule (tr.backend.rules, the checks the CPU backend runs too) and
binds it to a native op of the extension (csrc/ops/<family>.cu). Importing this package registers every builder
under backend "cuda"; it needs no driver (builders run only at capture).
"""

from tr.backend.cuda.ops import (  # noqa: F401  (imported for their registrations)
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
