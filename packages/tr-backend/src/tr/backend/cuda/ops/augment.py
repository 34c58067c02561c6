"""augment_affine on the device (csrc/ops/augment.cu): one block per sample draws its parameters from the same
Philox streams as the CPU backend (cpu/ops/augment.py) and tr.data's workers, then samples the source once per
output pixel. The rule (attributes, shapes, dtypes) is tr/backend/rules/augment.py's."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.augment import AUGMENT_AFFINE
from tr.backend.rules.augment import per_channel, shapes_of, spec_of


@cuda_op("augment_affine")
def augment_affine(b: CudaBinder) -> Any:
    s = spec_of(b)
    sh = shapes_of(b, s)
    return b.make(AUGMENT_AFFINE, src=b.dev("src"), index=b.dev("index"), key=b.dev("key"), y=b.dev("y"), n=sh.n,
                  h=sh.h, w=sh.w, c=sh.c, c_out=sh.c_out, batch=sh.batch, pad=s.pad, crop_slot=s.crop_slot,
                  rotation_slot=s.rotation_slot, scale_slot=s.scale_slot, degrees=s.degrees, scale_lo=s.scale[0],
                  scale_hi=s.scale[1], erase_p=s.erase_p, erase_scale_lo=s.erase_scale[0],
                  erase_scale_hi=s.erase_scale[1], erase_ratio_lo=s.erase_ratio[0], erase_ratio_hi=s.erase_ratio[1],
                  erase_value=s.erase_value, flip_p=s.flip_p, mean=per_channel(s.mean, sh.c),
                  std=per_channel(s.std, sh.c))
