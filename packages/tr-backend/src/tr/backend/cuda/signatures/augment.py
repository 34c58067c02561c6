"""Native op of csrc/ops/augment.cu: augment_affine, a batch of resident images drawn, transformed and normalised
on the device (tr.backend.rules.augment has the attributes these fields carry)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, f64s, i64, native_op, tensor

AUGMENT_AFFINE = native_op(
    "augment_affine", "y[i] = src[index[i]] scaled, rotated and shifted (bilinear, zeros outside), normalised, "
    "flipped and erased, with the parameters tr.data's workers draw for the sample.",
    tensor("src", "UINT8 [n, h, w, c]: the resident images"),
    tensor("index", "INT32 [batch]: the sample of each row (one outside 0..n-1 gives zeros before normalising)"),
    tensor("key", "INT32 [2]: the epoch's key prefix, one little-endian uint64"),
    tensor("y", "FP32, FP16 or BF16 [batch, h, w, c_out]"),
    i64("n", "samples in src"), i64("h", "image height"), i64("w", "image width"),
    i64("c", "channels of src (1 to 4)"), i64("c_out", "channels of y (c to 4; the extra ones are zeros)"),
    i64("batch", "rows of y (0: nothing is launched)"),
    i64("pad", "Pad(pad) + RandomCrop: a shift of -pad..pad (0: none)"),
    i64("crop_slot", "the crop's chain slot: its Philox stream"),
    i64("rotation_slot", "the rotation's chain slot"), i64("scale_slot", "the scale's chain slot"),
    f64("degrees", "RandomRotation(-degrees, degrees) (0: none)"),
    f64("scale_lo", "RandomScale's low factor"), f64("scale_hi", "RandomScale's high factor (1, 1: none)"),
    f64("erase_p", "RandomErasing's probability (0: none)"),
    f64("erase_scale_lo", "the erased area's low fraction"), f64("erase_scale_hi", "its high fraction"),
    f64("erase_ratio_lo", "the erased box's low aspect ratio"), f64("erase_ratio_hi", "its high aspect ratio"),
    f64("erase_value", "the erased pixels' value (normalised)"),
    f64("flip_p", "the horizontal flip's probability"),
    f64s("mean", "c values: the mean subtracted from x / 255, per channel"),
    f64s("std", "c values (> 0): the divisor after the mean, per channel"))

OPS = (AUGMENT_AFFINE,)
