"""Native ops of csrc/ops/conv.cu: 2-D convolution over NHWC with KRSC weights, grouped or not, through cuDNN
or the direct kernels, with an optional bias; tensors FP32, FP16 or BF16 (db FP32)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import code, flag, i64, native_op, tensor

# tr.backend.binding.Geometry's fields in its order, its h and w named ih and iw (w is the weight tensor), then
# the output channels and the groups (tr.backend.cuda.ops.conv.conv_fields maps a Geometry onto them)
GEOMETRY = (i64("n", "samples"), i64("ih", "input height"), i64("iw", "input width"), i64("c", "input channels"),
            i64("kh", "window height (the weights' R)"), i64("kw", "window width (the weights' S)"),
            i64("sh", "vertical stride"), i64("sw", "horizontal stride"), i64("ph", "padding above and below"),
            i64("pw", "padding left and right"), i64("p", "output height"), i64("q", "output width"),
            i64("k", "output channels"), i64("groups", "channel groups; divides c and k (1: not grouped)"))
# how the op is planned (tr.backend.cuda.cudnn: TR_CONV, autotuning; CudaBackend.use_tf32)
CHOICE = (code("engine", "conv_engine", "TR_CONV (tr.core.ops.CONV_ENGINE_CODES): auto (cuDNN, else the direct "
               "kernels), cudnn (or an error) or direct"),
          flag("tf32", "FP32 convolutions may round their inputs to TF32"),
          flag("autotune", "time cuDNN's first candidate engines and keep the fastest (or the cached winner)"))
_KRSC = "[k, kh, kw, c / groups] (KRSC)"
_W = tensor("w", _KRSC + ", of x's dtype")

CONV_FWD = native_op(
    "conv_fwd", "y = the cross-correlation of x with w, plus b when given (one more kernel).",
    tensor("x", "[n, ih, iw, c]"), _W, tensor("b", "[k]; absent: no bias", optional=True),
    tensor("y", "[n, p, q, k]"), *GEOMETRY, *CHOICE)

CONV_BWD = native_op(
    "conv_bwd", "dw (wgrad), dx (dgrad) when given, and db = the column sums of dy when given (computed first).",
    tensor("x", "[n, ih, iw, c]"), _W, tensor("dy", "[n, p, q, k]"), tensor("dw", _KRSC),
    tensor("db", "FP32 [k]; absent: no bias gradient", optional=True),
    tensor("dx", "[n, ih, iw, c]; absent: wgrad only", optional=True), *GEOMETRY, *CHOICE)

OPS = (CONV_FWD, CONV_BWD)
