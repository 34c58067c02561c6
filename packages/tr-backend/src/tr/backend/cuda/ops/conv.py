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
from tr.backend.cuda.signatures._types import NativeOp
from tr.backend.cuda.signatures.conv import CONV_BWD, CONV_FWD
from tr.backend.rules import conv as rules

TENSORS = {CONV_FWD.name: ("x", "w", "b", "y"), CONV_BWD.name: ("x", "w", "dy", "dw", "db", "dx")}


def conv_fields(b: CudaBinder, sig: NativeOp, rule: tuple[Geometry, int, int]) -> dict[str, Any]:
    """Every field of ``sig``'s record (CONV_FWD or CONV_BWD) for the call ``b`` binds, from its rule's
    (geometry, K, groups): the one place the record's values come from, for the op (make_op) and for the
    lookup of its plans (conv_engines.note)."""
    g, k, groups = rule
    geo = g.as_ints()
    geo["ih"], geo["iw"] = geo.pop("h"), geo.pop("w")  # the record's w is the weight tensor
    return {**{name: b.dev(name) for name in TENSORS[sig.name]}, **geo, "k": k, "groups": groups,
            "engine": conv_engine(), "tf32": bool(b.backend.use_tf32), "autotune": bool(autotune(b.backend))}


def _build(b: CudaBinder, sig: NativeOp, fields: dict[str, Any]) -> Any:
    try:
        made = b.make(sig, **fields)
    finally:
        log_plan_cache_warnings()  # planning may have met a corrupt or stale autotuning cache
    conv_engines.note(b, sig, fields, made)
    return made


@cuda_op("conv_fwd")
def conv_fwd(b: CudaBinder) -> Any:
    return _build(b, CONV_FWD, conv_fields(b, CONV_FWD, rules.conv_fwd(b)))


@cuda_op("conv_bwd")
def conv_bwd(b: CudaBinder) -> Any:
    return _build(b, CONV_BWD, conv_fields(b, CONV_BWD, rules.conv_bwd(b)))
