"""Channel scaling, squeeze-excitation's join: y = x * s with s [N,1,1,C] broadcast over H and W (csrc/ops/scale.cu).

scale_fwd is element-wise (16-byte vectors when C and the pointers allow); scale_bwd writes ds = the sum over
H*W of dy * x in one pass that also writes dx = dy * s when dx is given. The ds sums are deterministic: float64
per thread in row order, a fixed tree per block, chunks of rows added in order by a second kernel, no atomics.
x, s, y (dy, ds, dx) may each be FP32, FP16 or BF16; every product is a float multiply rounded to its output.
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.scale import SCALE_BWD, SCALE_FWD
from tr.backend.rules import scale as rules


@cuda_op("scale_fwd")
def scale_fwd(b: CudaBinder) -> Any:
    n, hw, c = rules.scale_fwd(b)
    return b.make(SCALE_FWD, x=b.dev("x"), s=b.dev("s"), y=b.dev("y"), n=n, hw=hw, c=c)


@cuda_op("scale_bwd")
def scale_bwd(b: CudaBinder) -> Any:
    n, hw, c, _ = rules.scale_bwd(b)  # dx is passed when given: the native op writes it when its pointer is there
    return b.make(SCALE_BWD, x=b.dev("x"), s=b.dev("s"), dy=b.dev("dy"), ds=b.dev("ds"), dx=b.dev("dx"), n=n, hw=hw,
                  c=c)
