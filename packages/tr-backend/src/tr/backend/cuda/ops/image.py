"""image_resample and image_jitter on the device (csrc/ops/image.cu): one block per output row of a sample computes
tr.data's resize weights in double and its two integer passes, then flips, erases and normalises (or writes the
u8 pixels for image_jitter, one block a sample) as the CPU backend does (cpu/ops/image.py). The rule (geometry table,
attributes, shapes) is tr/backend/rules/image.py's."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.image import IMAGE_JITTER, IMAGE_RESAMPLE
from tr.backend.rules.image import coefficients, per_channel, shapes_of, spec_of


def _fields(b: CudaBinder, src: str) -> dict[str, Any]:
    """The fields both native ops take, after the rule's checks (``src``: the op's pixel input)."""
    spec, sh = spec_of(b), shapes_of(b, src)
    a, bias = coefficients(spec)  # float32 values: passed as doubles, exact
    return {"geom": b.dev("geom"), "y": b.dev("y"), "batch": sh.batch, "h": sh.h, "w": sh.w, "c_out": sh.c_out,
            "norm_a": [float(v) for v in a], "norm_b": [float(v) for v in bias],
            "erase": per_channel(spec.erase_value)}


@cuda_op("image_resample")
def image_resample(b: CudaBinder) -> Any:
    fields = _fields(b, "src")
    return b.make(IMAGE_RESAMPLE, src=b.dev("src"), **fields)


@cuda_op("image_jitter")
def image_jitter(b: CudaBinder) -> Any:
    """One block a sample (csrc/ops/image.cu): the colour jitter, then the flip, normalisation and erasing."""
    fields = _fields(b, "x")
    return b.make(IMAGE_JITTER, x=b.dev("x"), **fields)
