"""Fully connected layer through cuBLASLt: x [N,H,W,C] read as [N, K=H*W*C], w [O,1,1,K], b [O], y [N,1,1,O].

fc_fwd is one cuBLASLt matmul with the bias (and ReLU) epilogue; fc_bwd one matmul for dw with the BGRADB
epilogue for db, and one for dx. Where cuBLASLt offers no fused algorithm, the native op adds a bias/ReLU or
column-sum kernel (csrc/ops/fc.cu). FP32 computes in FP32, or TF32 with ``CudaBackend(use_tf32=True)``;
FP16/BF16 inputs accumulate in FP32 (AMP: FP16 x, w and bias, so the epilogue fuses; FP16 or FP32 y; dw FP32,
so BGRADB writes the FP32 bias gradient).
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import fc as fc_rules


@cuda_op("fc_fwd")
def fc_fwd(b: CudaBinder) -> Any:
    sh, relu = fc_rules.fwd(b)
    return b.native("fc_fwd", ["x", "w", "b", "y"],
                    ints={"n": sh.n, "k": sh.k, "o": sh.o, "relu": relu, "tf32": b.backend.use_tf32})


@cuda_op("fc_bwd")
def fc_bwd(b: CudaBinder) -> Any:
    sh = fc_rules.bwd(b)
    return b.native("fc_bwd", ["x", "w", "dy", "dw", "db", "dx"],
                    ints={"n": sh.n, "k": sh.k, "o": sh.o, "tf32": b.backend.use_tf32})
