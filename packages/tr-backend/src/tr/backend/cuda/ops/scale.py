"""Channel scaling (squeeze-excitation's join): no CUDA kernel yet. The builders check the call with the shared
rule, then refuse by name, so a model with SE layers compiles for the CPU backend only."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import scale as rules


@cuda_op("scale_fwd")
def scale_fwd(b: CudaBinder) -> Any:
    rules.scale_fwd(b)
    b.fail("scale_fwd (squeeze-excitation) has no CUDA implementation yet (the CPU backend runs it)")


@cuda_op("scale_bwd")
def scale_bwd(b: CudaBinder) -> Any:
    rules.scale_bwd(b)
    b.fail("scale_bwd (squeeze-excitation) has no CUDA implementation yet (the CPU backend runs it)")
