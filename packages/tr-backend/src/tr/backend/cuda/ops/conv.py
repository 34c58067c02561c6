"""2-D convolution, NHWC cross-correlation with KRSC weights, grouped or depthwise (``groups``; weights
[K, R, S, C / groups]): cuDNN's frontend graphs (deterministic engines, chosen by a machine-independent rule
or, opted in, autotuned at capture; csrc/ops/conv_cudnn.cpp), or the direct deterministic kernels
(csrc/ops/conv.cu) where cuDNN is missing or ``TR_CONV=direct`` (see tr.backend.cuda.cudnn). An optional bias
is one kernel after the forward and a deterministic two-pass column sum before the backward (csrc/ops/
conv.cu). The op's ``info`` says which ran; each op's engines are recorded on its backend
(tr.backend.cuda.conv_engines)."""

from __future__ import annotations

from typing import Any

from tr.backend.binding import Geometry
from tr.backend.cuda import conv_engines
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.cudnn import autotune, conv_engine, log_plan_cache_warnings
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import conv as rules


def _ints(rule: tuple[Geometry, int, int], b: CudaBinder) -> dict[str, int]:
    g, k, groups = rule
    return {**g.as_ints(), "k": k, "groups": groups, "engine": conv_engine(), "tf32": b.backend.use_tf32,
            "autotune": autotune(b.backend)}


def _build(b: CudaBinder, op: str, tensors: list[str], ints: dict[str, int]) -> Any:
    ptrs, full = b.native_args(tensors, ints=ints)
    try:
        made = b.native(op, ptrs=ptrs, ints=full)
    finally:
        log_plan_cache_warnings()  # planning may have met a corrupt or stale autotuning cache
    conv_engines.note(b, op, full, made)
    return made


@cuda_op("conv_fwd")
def conv_fwd(b: CudaBinder) -> Any:
    return _build(b, "conv_fwd", ["x", "w", "b", "y"], _ints(rules.conv_fwd(b), b))


@cuda_op("conv_bwd")
def conv_bwd(b: CudaBinder) -> Any:
    return _build(b, "conv_bwd", ["x", "w", "dy", "dw", "db", "dx"], _ints(rules.conv_bwd(b), b))
