"""Element-wise activations (tr.core.ops.ACTIVATIONS): forward with the optional INT8 mask [x > 0],
backward recomputed from x (or read from relu's mask), inference. Formulas: csrc/ops/activation.cu."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import activation as rules


def _forward(b: CudaBinder, with_mask: bool) -> Any:
    r = rules.act_fwd(b, with_mask)
    names = ["x", "y"] + (["mask"] if r.mask else [])
    return b.native("act_fwd" if with_mask else "act_inf", names, ints={"n": r.n, "kind": r.code})


@cuda_op("act_fwd")
def act_fwd(b: CudaBinder) -> Any:
    return _forward(b, True)


@cuda_op("act_inf")
def act_inf(b: CudaBinder) -> Any:
    return _forward(b, False)


@cuda_op("act_bwd")
def act_bwd(b: CudaBinder) -> Any:
    r = rules.act_bwd(b)
    names = ["x", "dy", "dx"] + (["mask"] if r.mask else [])
    return b.native("act_bwd", names, ints={"n": r.n, "kind": r.code})
