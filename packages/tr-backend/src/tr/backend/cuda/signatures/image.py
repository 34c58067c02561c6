"""Native ops of csrc/ops/image.cu: decoded JPEG regions resized with tr.data's filter (image_resample) and colour
jittered (image_jitter), then flipped, erased and normalised per sample as geom's row says (tr.backend.rules.image
has geom's columns and the coefficients)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64s, i64, native_op, tensor

_GEOM = tensor("geom", "INT32 [batch, GEOM_COLS]: each sample's geometry, flip, erasing (and jitter) row")
_OUT = (i64("batch", "samples (0: nothing is launched)"), i64("h", "output height"), i64("w", "output width"),
        i64("c_out", "channels of y: 3 to 8, the ones past 3 zeros (3 for a UINT8 y)"))
_NORM = (f64s("norm_a", "3 values, one a channel: y = px * norm_a + norm_b (float32 values)"),
         f64s("norm_b", "3 values, one a channel"),
         f64s("erase", "3 values, one a channel: an erased pixel's normalised value"))

IMAGE_RESAMPLE = native_op(
    "image_resample", "y = each sample's crop of its decoded region resized to h x w with tr.data's antialiased "
    "bilinear filter (its int16 weights and integer passes), flipped, erased and normalised; a UINT8 y takes the "
    "resized pixels alone (image_jitter's x).",
    tensor("src", "UINT8: the decode buffer; each sample's RGB region at geom's byte offset"), _GEOM,
    tensor("y", "FP32, FP16, BF16 [batch, h, w, c_out], or UINT8 [batch, h, w, 3]"), *_OUT, *_NORM)

IMAGE_JITTER = native_op(
    "image_jitter", "y = each sample's ColorJitter (geom's jitter columns: tr.data's color.cpp formulas) of x, "
    "flipped, erased and normalised.",
    tensor("x", "UINT8 [batch, h, w, 3]: the resized pixels"), _GEOM,
    tensor("y", "FP32, FP16 or BF16 [batch, h, w, c_out]"), *_OUT, *_NORM)

OPS = (IMAGE_RESAMPLE, IMAGE_JITTER)
