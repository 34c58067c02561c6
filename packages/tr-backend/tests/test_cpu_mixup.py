"""The mixup op (tr.core.mixup) and softmax_ce's lam on the CPU backend, against timm's formulas.

Given the draw (recomputed here from the advanced seed with tr.core.mixup.draw), the mixed batch is timm's
Mixup._mix_batch in torch to the byte (x.mul_(lam).add_(x.flip(0).mul_(1 - lam)) in float32, or the CutMix box
pasted from x.flip(0)), the box is timm's rand_bbox of that lam and centre, and lam is timm's corrected one.
The loss with lam equals timm's SoftTargetCrossEntropy on mixup_target (float64 torch; the op sums float32
log-probabilities in float64: 1e-6 relative, the plain loss test's bound) and its gradient matches torch's
autograd and central finite differences of the float64 formula. The sampler: log and exp against math to
the last bits, Beta(a, a) moments over 4000 draws, reproducible draws, fresh ones every step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, op, run

from tr.algo.loss import cross_entropy_per_sample
from tr.core import mixup as mx
from tr.core import philox
from tr.core.errors import BackendError, ConfigError

SEED = 0x0123456789ABCDEF


def _setup(shape, dtype="fp32", seed=SEED):
    a = SimpleArena()
    t = {"x": a.add("x", shape, dtype), "lam": a.add("lam", (1,)), "seed": a.add("seed", (2,), "int32")}
    be = a.allocate()
    be.write(t["seed"], np.array([seed], dtype="<u8").view(np.int32))
    return be, t


def _mix(t, cfg: mx.MixupConfig):
    return op("mixup", x=t["x"], seed=t["seed"], lam=t["lam"], mixup_alpha=cfg.mixup_alpha,
              cutmix_alpha=cfg.cutmix_alpha, prob=cfg.prob, switch_prob=cfg.switch_prob)


def _timm_bbox(h: int, w: int, lam: float, cy: int, cx: int) -> tuple[tuple[int, int, int, int], float]:
    """timm's rand_bbox (the centre given) and cutmix_bbox_and_lam's correction."""
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    yl, yh = np.clip(cy - cut_h // 2, 0, h), np.clip(cy + cut_h // 2, 0, h)
    xl, xh = np.clip(cx - cut_w // 2, 0, w), np.clip(cx + cut_w // 2, 0, w)
    return (int(yl), int(yh), int(xl), int(xh)), 1.0 - (yh - yl) * (xh - xl) / float(h * w)


def _timm_mix(x: np.ndarray, lam: float, cutmix: bool, box) -> np.ndarray:
    """timm's Mixup._mix_batch on the NCHW torch view of an NHWC batch, given lam and the box."""
    xt = torch.from_numpy(x.copy()).permute(0, 3, 1, 2)
    if lam == 1.0:
        pass
    elif cutmix:
        yl, yh, xl, xh = box
        xt[:, :, yl:yh, xl:xh] = xt.flip(0)[:, :, yl:yh, xl:xh]
    else:
        x_flipped = xt.flip(0).mul_(1.0 - lam)
        xt.mul_(lam).add_(x_flipped)
    return xt.permute(0, 2, 3, 1).numpy()


def test_log_and_exp_are_accurate_to_the_last_bits():
    for x in np.exp(np.linspace(-700, 700, 2001)):
        assert abs(mx.det_log(float(x)) - math.log(x)) <= 4e-16 * max(1.0, abs(math.log(x)))
    for x in np.linspace(-700, 700, 2001):  # |r| <= ln2/2 after the reduction: n * ln2's rounding dominates
        assert abs(mx.det_exp(float(x)) - math.exp(x)) <= 2e-13 * math.exp(x)
    assert mx.det_exp(710.0) == math.inf and mx.det_exp(-709.0) == 0.0


@pytest.mark.parametrize("alpha", [0.05, 0.2, 0.8, 1.0, 4.0])
def test_beta_samples_have_beta_moments(alpha):
    s = np.array([mx.beta_symmetric(philox.splitmix64(i + 1000 * int(alpha * 100)), alpha) for i in range(4000)])
    var = 1.0 / (4.0 * (2.0 * alpha + 1.0))  # Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1))
    assert ((s >= 0) & (s <= 1)).all()  # tiny alphas round some draws to 0 or 1, as numpy's beta does
    assert abs(s.mean() - 0.5) < 4 * math.sqrt(var / len(s))
    assert abs(s.var() / var - 1) < 0.08
    # the fourth central moment of Beta(a, a): 3 / (16 (2a + 1)(2a + 3)) ... checked loosely, shape not just spread
    m4 = 3.0 / (16.0 * (2 * alpha + 1) * (2 * alpha + 3))
    assert abs(((s - 0.5) ** 4).mean() / m4 - 1) < 0.15


def test_draws_follow_the_setting_and_are_reproducible():
    keys = [philox.splitmix64(i) for i in range(600)]
    both = mx.MixupConfig(0.8, 1.0, prob=0.7, switch_prob=0.3)
    draws = [mx.draw(k, both, 24, 32) for k in keys]
    assert draws == [mx.draw(k, both, 24, 32) for k in keys]  # a pure function of the key
    mixed = [d for d in draws if d.lam != 1.0]
    assert abs(len(mixed) / len(draws) - 0.7) < 0.06
    assert abs(sum(d.cutmix for d in mixed) / len(mixed) - 0.3) < 0.07
    blends = [d.lam for d in mixed if not d.cutmix]  # CutMix's corrected lams are box areas: they repeat
    assert len(set(blends)) == len(blends)  # a fresh lam every draw
    assert all(not mx.draw(k, mx.MixupConfig(0.8, 0.0), 8, 8).cutmix for k in keys[:50])
    assert all(mx.draw(k, mx.MixupConfig(0.0, 1.0), 8, 8).cutmix for k in keys[:50])
    assert all(mx.draw(k, mx.MixupConfig(prob=0.0), 8, 8).lam == 1.0 for k in keys[:50])


def test_cutmix_box_is_timms_rand_bbox_with_the_corrected_lam():
    cfg = mx.MixupConfig(0.0, 1.0)
    seen = 0
    for i in range(200):
        key = philox.splitmix64(i)
        d = mx.draw(key, cfg, 24, 32)
        if d.lam == 1.0 and not d.cutmix:
            continue
        raw_lam = mx.beta_symmetric(key, 1.0)
        cy, cx = int(philox.raw(key, 2)[0]) % 24, int(philox.raw(key, 3)[0]) % 32
        box, lam = _timm_bbox(24, 32, raw_lam, cy, cx)
        assert d.box == box and d.lam == lam
        seen += 1
    assert seen > 150


@pytest.mark.parametrize("cfg", [mx.MixupConfig(0.8, 0.0), mx.MixupConfig(0.0, 1.0), mx.MixupConfig()],
                         ids=["mixup", "cutmix", "both"])
@pytest.mark.parametrize("n", [8, 7])
def test_the_op_mixes_the_batch_as_timm_does_and_advances_the_seed(cfg, n):
    shape = (n, 12, 10, 3)
    be, t = _setup(shape)
    g = be.capture("g", [_mix(t, cfg)])
    rng = np.random.default_rng(n)
    seed, draws = SEED, []
    for _ in range(4):
        x = rng.standard_normal(shape).astype(np.float32)
        be.write(t["x"], x)
        be.launch(g)
        seed = philox.splitmix64(seed)
        assert int(be.read(t["seed"]).reshape(-1).view("<u8")[0]) == seed
        d = mx.draw(seed, cfg, 12, 10)
        lam = float(be.read(t["lam"]).reshape(-1)[0])
        assert lam == float(np.float32(d.lam))
        np.testing.assert_array_equal(be.read(t["x"]), _timm_mix(x, d.lam, d.cutmix, d.box))
        draws.append((d.lam, d.box))
    assert len(set(draws)) == 4  # a fresh draw every step


def test_half_batches_are_mixed_in_float32_and_rounded_once():
    shape = (6, 5, 5, 4)
    be, t = _setup(shape, "fp16")
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float16)
    be.write(t["x"], x)
    cfg = mx.MixupConfig(0.8, 0.0)
    run(be, _mix(t, cfg))
    d = mx.draw(philox.splitmix64(SEED), cfg, 5, 5)
    ref = x.astype(np.float32)
    ref = (ref * np.float32(d.lam) + ref[::-1] * np.float32(1.0 - d.lam)).astype(np.float16)
    np.testing.assert_array_equal(be.read(t["x"]), ref)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="both are 0"):
        mx.MixupConfig(0.0, 0.0)
    with pytest.raises(ConfigError, match="cutmix_alpha"):
        mx.MixupConfig(0.8, -1.0)
    with pytest.raises(ConfigError, match="switch_prob"):
        mx.MixupConfig(switch_prob=1.5)
    with pytest.raises(ConfigError, match="prob"):
        mx.MixupConfig(prob=float("nan"))
    be, t = _setup((4, 2, 2, 1))
    with pytest.raises(BackendError, match="both are 0"):
        run(be, op("mixup", x=t["x"], seed=t["seed"], lam=t["lam"], mixup_alpha=0.0, cutmix_alpha=0.0, prob=1.0,
                   switch_prob=0.5))


# --- the loss with lam ------------------------------------------------------------------------------------------


def _loss_setup(n, k):
    a = SimpleArena()
    t = {"logits": a.add("logits", (n, 1, 1, k)), "probs": a.add("probs", (n, 1, 1, k)),
         "dlogits": a.add("dlogits", (n, 1, 1, k)), "d0": a.add("d0", (n, 1, 1, k)),
         "labels": a.add("labels", (n, 1, 1, 1), "int32"), "result": a.add("result", (3,)),
         "scale": a.add("scale", (1,)), "lam": a.add("lam", (1,))}
    return a.allocate(), t


def _loss_ops(t, ls, lam=True, d="dlogits"):
    extra = {"lam": t["lam"]} if lam else {}
    return (op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"],
               label_smoothing=ls, **extra),
            op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["scale"], dlogits=t[d],
               label_smoothing=ls, **extra))


def _timm_soft_ce(z: np.ndarray, y: np.ndarray, lam: float, ls: float, k: int):
    """timm's mixup_target and SoftTargetCrossEntropy in float64 torch: (loss, dloss/dz)."""
    zt = torch.from_numpy(z.astype(np.float64)).requires_grad_()
    yt = torch.from_numpy(y.astype(np.int64))
    off, on = ls / k, 1.0 - ls + ls / k
    y1 = torch.full((len(y), k), off, dtype=torch.float64).scatter_(1, yt.view(-1, 1), on)
    y2 = torch.full((len(y), k), off, dtype=torch.float64).scatter_(1, yt.flip(0).view(-1, 1), on)
    target = y1 * lam + y2 * (1.0 - lam)
    loss = torch.sum(-target * torch.nn.functional.log_softmax(zt, dim=-1), dim=-1).mean()
    loss.backward()
    return loss.item(), zt.grad.numpy()


@pytest.mark.parametrize("n,k,ls,lam", [(8, 10, 0.0, 0.3), (16, 10, 0.1, 0.71875), (7, 3, 0.2, 0.05),
                                        (32, 100, 0.1, 1.0)])
def test_loss_is_soft_target_cross_entropy_on_timms_mixed_targets(n, k, ls, lam):
    be, t = _loss_setup(n, k)
    rng = np.random.default_rng(n + k)
    z = (3 * rng.standard_normal((n, k))).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    y[0] = y[-1]  # a pair with the same label: both shares land on one class
    be.write(t["logits"], z)
    be.write(t["labels"], y)
    be.write(t["scale"], [1.0])
    be.write(t["lam"], [lam])
    run(be, *_loss_ops(t, ls))
    want, grad = _timm_soft_ce(z, y, float(np.float32(lam)), ls, k)
    assert abs(float(be.read(t["result"]).reshape(-1)[0]) - want) <= 1e-6 * max(1.0, abs(want))
    np.testing.assert_allclose(be.read(t["dlogits"]).reshape(n, k), grad, rtol=0, atol=1e-6 / n * 4)


def test_gradient_matches_finite_differences_of_the_mixed_loss():
    n, k, ls, lam = 6, 5, 0.1, 0.375
    be, t = _loss_setup(n, k)
    rng = np.random.default_rng(5)
    z = rng.standard_normal((n, k)).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    for name, v in (("logits", z), ("labels", y), ("scale", [1.0]), ("lam", [lam])):
        be.write(t[name], v)
    run(be, *_loss_ops(t, ls))
    g = be.read(t["dlogits"]).reshape(n, k).astype(np.float64)

    def loss(zz: np.ndarray) -> float:  # lam * CE(y) + (1 - lam) * CE(y reversed), float64
        return float((lam * cross_entropy_per_sample(zz, y, ls)
                      + (1 - lam) * cross_entropy_per_sample(zz, y[::-1], ls)).mean())

    z64, h = z.astype(np.float64), 1e-5
    fd = np.zeros_like(z64)
    for i in range(n):
        for j in range(k):
            e = np.zeros_like(z64)
            e[i, j] = h
            fd[i, j] = (loss(z64 + e) - loss(z64 - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=0, atol=2e-7)  # float32 probabilities' rounding over N


def test_lam_one_gives_the_plain_loss_s_bytes():
    n, k, ls = 9, 7, 0.1
    be, t = _loss_setup(n, k)
    rng = np.random.default_rng(9)
    for name, v in (("logits", rng.standard_normal((n, k)).astype(np.float32)),
                    ("labels", rng.integers(0, k, n).astype(np.int32)), ("scale", [128.0]), ("lam", [1.0])):
        be.write(t[name], v)
    run(be, *_loss_ops(t, ls, lam=False, d="d0"))
    plain = be.read(t["result"]).copy()
    run(be, *_loss_ops(t, ls))
    np.testing.assert_array_equal(be.read(t["dlogits"]), be.read(t["d0"]))
    np.testing.assert_array_equal(be.read(t["result"]), plain)
