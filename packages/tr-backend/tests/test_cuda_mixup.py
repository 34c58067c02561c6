"""The CUDA mixup op (csrc/ops/mixup.cu) and softmax_ce's lam against the CPU backend (test_cpu_mixup.py holds that
to timm). GPU-only.

Exact: the draw is the same float64 operations on both sides (explicitly rounded intrinsics, the polynomial log and
exp), the pixels one float32 product each and a sum rounded once (or a swap), so seed, lam and the mixed batch are
compared byte for byte over many steps (Mixup, CutMix, both; even and odd batches; FP32, FP16, BF16; tiny and
large alphas, whose samplers take the log-space and the rejection paths). The loss backward with lam is an
elementwise op on the same probabilities: byte for byte; the forward's loss sums float32 log-probabilities
(the device's expf and logf): within 1e-6 relative, as the plain loss.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin

from tr.core import mixup as mx

pytestmark = pytest.mark.gpu

CONFIGS = [mx.MixupConfig(0.8, 0.0), mx.MixupConfig(0.0, 1.0), mx.MixupConfig(), mx.MixupConfig(0.02, 0.05),
           mx.MixupConfig(6.0, 3.0, prob=0.6, switch_prob=0.3)]
IDS = ["mixup", "cutmix", "both", "tiny-alphas", "large-alphas"]


def exact(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert c.dtype == g.dtype and np.array_equal(c.view(np.uint8), g.view(np.uint8)), f"{name} differs"


@pytest.mark.parametrize("dt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", [(8, 12, 10, 3), (7, 5, 9, 4), (64, 32, 32, 3)], ids=["even", "odd", "cifar"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_mixed_batch_seed_and_lam_are_the_cpu_s_bytes(cfg, shape, dt):
    tw = Twin()
    tw.add("x", shape, dt)
    tw.add("lam", (1,))
    tw.add("seed", (2,), "int32")
    tw.allocate()
    tw.write("seed", np.array([0x0BADF00D12345678], dtype="<u8").view(np.int32))
    call = op("mixup", x=tw["x"], seed=tw["seed"], lam=tw["lam"], mixup_alpha=cfg.mixup_alpha,
              cutmix_alpha=cfg.cutmix_alpha, prob=cfg.prob, switch_prob=cfg.switch_prob)
    gc, gg = None, None
    lams = set()
    for _ in range(12):
        tw.fill("x")
        if gc is None:
            gc, gg = tw.run(call, poison=("lam",))
        else:
            tw.cpu.launch(gc)
            tw.gpu.launch(gg)
            tw.gpu.synchronize()
        exact(tw, "seed", "lam", "x")
        lams.add(float(tw.gpu.read(tw["lam"]).reshape(-1)[0]))
    assert len(lams) > 1


@pytest.mark.parametrize("dt", ["fp32", "fp16", "bf16"])
def test_loss_backward_with_lam_is_the_cpu_s_bytes_and_the_loss_close(dt):
    n, k, ls = 33, 100, 0.1
    tw = Twin()
    tw.add("logits", (n, 1, 1, k), dt)
    tw.add("probs", (n, 1, 1, k))
    tw.add("dlogits", (n, 1, 1, k), dt)
    tw.add("labels", (n, 1, 1, 1), "int32")
    tw.add("result", (3,))
    tw.add("scale", (1,))
    tw.add("lam", (1,))
    tw.allocate()
    tw.fill("logits", -4.0, 4.0)
    tw.write("labels", np.random.default_rng(0).integers(0, k, n).astype(np.int32))
    tw.write("scale", [1024.0])
    tw.write("lam", [0.6171875])
    fwd = op("softmax_ce_fwd", logits=tw["logits"], labels=tw["labels"], probs=tw["probs"], result=tw["result"],
             lam=tw["lam"], label_smoothing=ls)
    tw.run(fwd, poison=("probs", "result"))
    c, g = tw.both("result")
    assert abs(float(g.reshape(-1)[0]) - float(c.reshape(-1)[0])) <= 1e-6 * abs(float(c.reshape(-1)[0]))
    tw.write("probs", tw.cpu.read(tw["probs"]))  # the backward reads the same probabilities on both sides
    bwd = op("softmax_ce_bwd", probs=tw["probs"], labels=tw["labels"], scale=tw["scale"], dlogits=tw["dlogits"],
             lam=tw["lam"], label_smoothing=ls)
    tw.run(bwd, poison=("dlogits",))
    exact(tw, "dlogits")
