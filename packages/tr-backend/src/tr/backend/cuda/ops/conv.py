"""2-D convolution, NHWC cross-correlation with KRSC weights, no bias: cuDNN's frontend graphs (deterministic
engines, autotuned at capture; csrc/ops/conv_cudnn.cpp), or the direct deterministic kernels (csrc/ops/conv.cu)
where cuDNN is missing or ``TR_CONV=direct`` (see tr.backend.cuda.cudnn). The op's ``info`` says which ran."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.cudnn import autotune, conv_engine, log_plan_cache_warnings
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.ops._window import window
from tr.core.errors import DTypeError, ShapeError


def _geometry(b: CudaBinder, y: str) -> dict[str, int]:
    xt, wt = b.tensor("x"), b.tensor("w")
    k, r, s, c = wt.shape.dims
    if c != xt.shape.c:
        b.fail(f"w {wt.shape} (KRSC) has C={c} but x {xt.shape} has C={xt.shape.c}", ShapeError)
    g = window(b, "x", y, (r, s))
    if b.tensor(y).shape.c != k:
        b.fail(f"{y} {b.tensor(y).shape} must have C={k} (the weight's K)", ShapeError)
    if xt.dtype is not wt.dtype:
        b.fail(f"x is {xt.dtype.name} but w is {wt.dtype.name}; expected one dtype", DTypeError)
    g["k"] = k
    g.update(engine=conv_engine(), tf32=b.backend.use_tf32, autotune=autotune())
    return g


@cuda_op("conv_fwd")
def conv_fwd(b: CudaBinder) -> Any:
    g = _geometry(b, "y")
    b.expect_float("x", "w", "y")
    try:
        return b.native("conv_fwd", ["x", "w", "y"], ints=g)
    finally:
        log_plan_cache_warnings()  # planning may have met a corrupt or stale autotuning cache


@cuda_op("conv_bwd")
def conv_bwd(b: CudaBinder) -> Any:
    g = _geometry(b, "dy")
    b.expect_numel("dw", g["k"] * g["kh"] * g["kw"] * g["c"])
    b.expect_float("x", "w", "dy", "dw", "dx")
    if b.has("dx") and b.tensor("dx").shape != b.tensor("x").shape:
        b.fail(f"dx {b.tensor('dx').shape} must have x's shape {b.tensor('x').shape}", ShapeError)
    try:
        return b.native("conv_bwd", ["x", "w", "dy", "dw", "dx"], ints=g)
    finally:
        log_plan_cache_warnings()
