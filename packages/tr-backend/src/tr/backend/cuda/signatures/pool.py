"""Native ops of csrc/ops/pool.cu: max, average and global average pooling over NHWC, inputs and outputs each
FP32, FP16 or BF16 (max pooling's mask INT8)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import i64, native_op, tensor

# tr.backend.binding.Geometry's fields, in its order (a builder passes **geometry.as_ints())
WINDOW = (i64("n", "samples"), i64("h", "input height"), i64("w", "input width"), i64("c", "channels"),
          i64("kh", "window height"), i64("kw", "window width"), i64("sh", "vertical stride"),
          i64("sw", "horizontal stride"), i64("ph", "padding above and below"),
          i64("pw", "padding left and right"), i64("p", "output height"), i64("q", "output width"))
_GAP = (i64("n", "samples"), i64("hw", "positions per sample (H*W)"), i64("c", "channels"))
_MASK = "INT8 [n, p, q, c]: the window position of each maximum (the first one)"

MAXPOOL_FWD = native_op(
    "maxpool_fwd", "y = the window's maximum (-inf padding), and its position in mask.",
    tensor("x", "[n, h, w, c]"), tensor("y", "[n, p, q, c]"), tensor("mask", _MASK), *WINDOW)

MAXPOOL_INF = native_op(
    "maxpool_inf", "y = the window's maximum (-inf padding; NaN wins), writing no mask.",
    tensor("x", "[n, h, w, c]"), tensor("y", "[n, p, q, c]"), *WINDOW)

MAXPOOL_BWD = native_op(
    "maxpool_bwd", "dx = the sum of dy over the windows whose mask points at the element.",
    tensor("dy", "[n, p, q, c]"), tensor("mask", _MASK + ", the forward's"), tensor("dx", "[n, h, w, c]"),
    *WINDOW)

AVGPOOL_FWD = native_op(
    "avgpool_fwd", "y = the window's mean, padding left out of the count.",
    tensor("x", "[n, h, w, c]"), tensor("y", "[n, p, q, c]"), *WINDOW)

AVGPOOL_BWD = native_op(
    "avgpool_bwd", "dx = the sum of dy / count over the windows holding the element.",
    tensor("dy", "[n, p, q, c]"), tensor("dx", "[n, h, w, c]"), *WINDOW)

GAP_FWD = native_op(
    "gap_fwd", "y = the mean over hw.",
    tensor("x", "[n, hw, c]"), tensor("y", "[n, c]"), *_GAP)

GAP_BWD = native_op(
    "gap_bwd", "dx = dy / hw at every position.",
    tensor("dy", "[n, c]"), tensor("dx", "[n, hw, c]"), *_GAP)

OPS = (MAXPOOL_FWD, MAXPOOL_INF, MAXPOOL_BWD, AVGPOOL_FWD, AVGPOOL_BWD, GAP_FWD, GAP_BWD)
