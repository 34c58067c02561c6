"""Layer norm over the C values of each N*H*W row (csrc/ops/layernorm.cu; argument rules:
tr.backend.rules.layernorm).

ln_fwd: a warp per row (a block per row when C > 1024), 16-byte vector loads when C and the pointers allow,
float64 row sums, the CPU backend's float32 expressions. ln_bwd: the same row kernel for dx (skipped when dx is
None), and dgamma/dbeta as deterministic two-stage column sums (per block over a fixed chunk of rows in row
order, four rows in float32 then float64, a fixed tree across the block, the chunks added in chunk order by a
second kernel; no atomics).

The residual join fused in (tr.graph.passes.fuse_add_norm): ln_fwd's first pass reads x and z, rounds x + z to the
feature dtype and writes it to sum, and the later passes re-read the row from sum (each thread its own elements, so
sum may be x or z); without sum (inference, where nothing else reads it) every pass recomputes the rounded x + z.
ln_bwd's dx kernel adds dx2 to the rounded dx as it stores it."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.layernorm import LN_BWD, LN_FWD
from tr.backend.rules.layernorm import ln_bwd_rules, ln_fwd_rules


@cuda_op("ln_fwd")
def ln_fwd(b: CudaBinder) -> Any:
    r = ln_fwd_rules(b)  # the saved statistics: both in training, neither in inference
    return b.make(LN_FWD, x=b.dev("x"), gamma=b.dev("gamma"), beta=b.dev("beta"), y=b.dev("y"),
                  saved_mean=b.dev("saved_mean"), saved_rstd=b.dev("saved_rstd"), z=b.dev("z"), sum=b.dev("sum"),
                  rows=r.rows, c=r.c, eps=r.eps)


@cuda_op("ln_bwd")
def ln_bwd(b: CudaBinder) -> Any:
    r = ln_bwd_rules(b)  # dx None: a first layer
    return b.make(LN_BWD, x=b.dev("x"), gamma=b.dev("gamma"), dy=b.dev("dy"), saved_mean=b.dev("saved_mean"),
                  saved_rstd=b.dev("saved_rstd"), dgamma=b.dev("dgamma"), dbeta=b.dev("dbeta"), dx=b.dev("dx"),
                  dx2=b.dev("dx2"), rows=r.rows, c=r.c)
