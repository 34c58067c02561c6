"""augment_affine on CUDA against the CPU backend on the same inputs (GPU tests): the draws are the same, so
the erased pixels, the padded channels and the flips agree exactly; the sampled values agree to 1e-5 of the
normalised range (cos/sin of the angle in CUDA's double math, then the same float32 operations, --fmad=false).
Not run yet: written in a session without device time left."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

pytestmark = pytest.mark.gpu

SPEC = dict(pad=2, degrees=20.0, scale=(0.8, 1.2), erase_p=0.5, flip_p=0.5, mean=(0.1307,), std=(0.3081,),
            crop_slot=2, rotation_slot=3, scale_slot=4)


@pytest.mark.parametrize("ydt, c, c_out", [("fp32", 1, 1), ("fp16", 1, 4), ("fp16", 3, 4)])
def test_augment_matches_the_cpu_backend(ydt, c, c_out):
    rng = np.random.default_rng(3)
    imgs = rng.integers(0, 256, (64, 7, 7, c), dtype=np.uint8).repeat(4, 1).repeat(4, 2)
    tw = Twin()
    tw.add("src", imgs.shape, "uint8")
    tw.add("index", (200,), "int32")
    tw.add("key", (2,), "int32")
    tw.add("y", (200, 28, 28, c_out), ydt)
    tw.allocate()
    tw.write("src", imgs)
    tw.write("index", rng.integers(0, 64, 200).astype(np.int32))
    tw.write("key", np.array([0xFEEDFACECAFEBEEF], "<u8").view(np.int32))
    spec = dict(SPEC) if c == 1 else dict(SPEC, mean=(0.5, 0.4, 0.3), std=(0.25, 0.2, 0.3))
    tw.run(op("augment_affine", src=tw["src"], index=tw["index"], key=tw["key"], y=tw["y"], **spec), poison=("y",))
    cpu, gpu = tw.both("y")
    close(gpu.astype(np.float32), cpu.astype(np.float32), 1e-5 if ydt == "fp32" else 2e-3, "y")
    assert (gpu[..., c:] == 0).all()
    assert (np.abs(gpu.astype(np.float32) - cpu.astype(np.float32)) > 0.05).mean() < 1e-4  # no sample drawn apart
