"""image_resample and image_jitter on the device (csrc/ops/image.cu): one block per output row of a sample computes
tr.data's resize weights in double and its two integer passes, then flips, erases and normalises (or writes the
u8 pixels for image_jitter, one block a sample) as the CPU backend does (cpu/ops/image.py). The rule (geometry table,
attributes, shapes) is tr/backend/rules/image.py's."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules.image import CHANNELS, coefficients, per_channel, shapes_of, spec_of


def _native(b: CudaBinder, op: str, src: str) -> Any:
    spec, sh = spec_of(b), shapes_of(b, src)
    a, bias = coefficients(spec)  # float32 values: passed as doubles, exact
    ev = per_channel(spec.erase_value)
    floats = {}
    for c in range(CHANNELS):
        floats[f"a{c}"], floats[f"b{c}"], floats[f"erase{c}"] = float(a[c]), float(bias[c]), ev[c]
    ints = {"batch": sh.batch, "h": sh.h, "w": sh.w, "c_out": sh.c_out}
    return b.native(op, [src, "geom", "y"], ints=ints, floats=floats)


@cuda_op("image_resample")
def image_resample(b: CudaBinder) -> Any:
    return _native(b, "image_resample", "src")


@cuda_op("image_jitter")
def image_jitter(b: CudaBinder) -> Any:
    """One block a sample (csrc/ops/image.cu): the colour jitter, then the flip, normalisation and erasing."""
    return _native(b, "image_jitter", "x")
