"""The CUDA token ops (csrc/ops/tokens.cu: tokens_fwd, tokens_bwd, token_pick_*) against the CPU backend
(tr/backend/cpu/ops/tokens.py, which test_cpu_tokens.py holds to torch). GPU-only. Each output is one float32
expression rounded once on both backends, and dcls / dpos add the samples in order as float32 running sums on both:
every case byte for byte, FP32, FP16 and BF16, with and without the class token, the position embedding and dx."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin

pytestmark = pytest.mark.gpu


def _twin(n, h, w, c, dtype, cls):
    t_ = h * w + int(cls)
    tw = Twin()
    for name, shape, dt in (("x", (n, h, w, c), dtype), ("y", (n, 1, t_, c), dtype), ("dy", (n, 1, t_, c), dtype),
                            ("dx", (n, h, w, c), dtype), ("pick", (n, 1, 1, c), dtype), ("dtok", (n, 1, t_, c), dtype),
                            ("cls", (1, 1, 1, c), "fp32"), ("pos", (1, 1, t_, c), "fp32"),
                            ("dcls", (1, 1, 1, c), "fp32"), ("dpos", (1, 1, t_, c), "fp32")):
        tw.add(name, shape, dt)
    tw.allocate()
    rng = np.random.default_rng(n + h + w + c)
    for name in ("x", "dy", "cls", "pos"):
        tw.write(name, rng.standard_normal(tw[name].shape.dims))
    return tw


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("cls,pos,dx", [(True, True, True), (False, True, True), (True, False, False),
                                        (False, False, True)])
@pytest.mark.parametrize("n,h,w,c", [(2, 3, 3, 8), (5, 14, 14, 24), (1, 1, 1, 3)])
def test_tokens_are_the_cpus_byte_for_byte(n, h, w, c, cls, pos, dx, dtype):
    tw = _twin(n, h, w, c, dtype, cls)
    params = {**({"cls": tw["cls"]} if cls else {}), **({"pos": tw["pos"]} if pos else {})}
    grads = {**({"dcls": tw["dcls"]} if cls else {}), **({"dpos": tw["dpos"]} if pos else {}),
             **({"dx": tw["dx"]} if dx else {})}
    tw.run(op("tokens_fwd", x=tw["x"], y=tw["y"], **params), op("tokens_bwd", dy=tw["dy"], **grads),
           op("token_pick_fwd", x=tw["y"], y=tw["pick"]), op("token_pick_bwd", dy=tw["pick"], dx=tw["dtok"]),
           poison=("y", "dx", "dcls", "dpos", "pick", "dtok"))
    for name in ["y", "pick", "dtok"] + [k for k in ("dcls", "dpos", "dx") if k in grads]:
        cpu, gpu = tw.both(name)
        assert gpu.tobytes() == cpu.tobytes(), name
