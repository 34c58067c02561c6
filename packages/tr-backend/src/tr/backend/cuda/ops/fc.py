"""Fully connected layer through cuBLASLt: x [N,H,W,C] read as [N, K=H*W*C], w [O,1,1,K], b [O], y [N,1,1,O].

fc_fwd is one cuBLASLt matmul with the bias (and ReLU) epilogue, RELU_AUX(_BIAS) when it also writes the relu
mask; fc_bwd one matmul for dw with the BGRADB epilogue for db, and one for dx, with the DRELU epilogue when
it is given the input's relu mask (the relu's backward, fused). Where cuBLASLt offers no fused algorithm, the
native op adds a bias/ReLU(/mask), column-sum or relu-gradient kernel (csrc/ops/fc.cu). FP32 computes in
FP32, or TF32 with ``CudaBackend(use_tf32=True)``; FP16/BF16 inputs accumulate in FP32 (AMP: FP16 x, w and
bias, so the epilogue fuses; FP16 or FP32 y; dw FP32, so BGRADB writes the FP32 bias gradient).
TR_CUBLASLT_EPILOGUES=0 turns the fused epilogues off (the kernels run instead: their tests, and a check).
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.fc import FC_BWD, FC_FWD
from tr.backend.rules import fc as fc_rules
from tr.core import env as tr_env


def _epilogues() -> bool:
    """Whether cuBLASLt's epilogues may fuse (TR_CUBLASLT_EPILOGUES)."""
    return bool(tr_env.get("TR_CUBLASLT_EPILOGUES"))


def _mode(b: CudaBinder) -> dict[str, bool]:
    """TF32 (the backend's) and whether cuBLASLt's epilogues may fuse."""
    return {"tf32": bool(b.backend.use_tf32), "epilogues": _epilogues()}


@cuda_op("fc_fwd")
def fc_fwd(b: CudaBinder) -> Any:
    sh, relu = fc_rules.fwd(b)
    return b.make(FC_FWD, x=b.dev("x"), w=b.dev("w"), b=b.dev("b"), y=b.dev("y"), mask=b.dev("mask"), n=sh.n,
                  k=sh.k, o=sh.o, relu=bool(relu), **_mode(b))


@cuda_op("fc_bwd")
def fc_bwd(b: CudaBinder) -> Any:
    sh = fc_rules.bwd(b)
    return b.make(FC_BWD, x=b.dev("x"), w=b.dev("w"), dy=b.dev("dy"), dw=b.dev("dw"), db=b.dev("db"),
                  dx=b.dev("dx"), mask=b.dev("mask"), n=sh.n, k=sh.k, o=sh.o, **_mode(b))
