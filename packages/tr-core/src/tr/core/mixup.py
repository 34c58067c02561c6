"""Mixup and CutMix with soft targets (timm's ``Mixup``, mode 'batch', ``correct_lam=True``): the setting and
the per-step draw that every backend follows bit for bit.

Per training step the batch x [N, H, W, C] is mixed with its reverse x.flip(0) (sample n with sample N-1-n):

* with probability ``prob`` the step mixes; if both alphas are > 0 it uses CutMix with probability
  ``switch_prob`` (else Mixup), otherwise the one whose alpha is > 0;
* lam ~ Beta(alpha, alpha) of the chosen method;
* Mixup: x[n] = x[n] * lam + x[N-1-n] * (1 - lam) (float32, each product rounded, then the sum);
* CutMix: timm's rand_bbox (a box of sides int(H sqrt(1-lam)), int(W sqrt(1-lam)) around a uniform centre,
  clipped to the image) takes x[N-1-n]'s pixels, and lam becomes 1 - box area / (H W);
* an odd batch's middle sample is paired with itself (timm asserts an even batch; an epoch's last batch may be
  odd here): Mixup computes x*lam + x*(1-lam) for it, CutMix leaves it;
* the loss then trains on lam * smooth(onehot(y)) + (1 - lam) * smooth(onehot(y.flip(0))) (timm's
  mixup_target, SoftTargetCrossEntropy).

The draw is keyed by one uint64 (the step's advanced ``dropout_seed`` stream: seeded from the run's seed and
rank, advanced on the device every step, checkpointed) through Philox4x32-10, counter by counter:
0: mix or not, 1: CutMix or Mixup, 2 and 3: the box centre's row and column (r0 mod H, r0 mod W), from
``FIRST_BETA`` on: the Beta sampler's uniforms, one counter each. Uniforms are (2k + 1) 2^-53 with k the top
52 bits of (r0, r1): in (0, 1), exact in float64.

Beta(a, a) = G1 / (G1 + G2) with G ~ Gamma(a): Marsaglia and Tsang (2000) for a >= 1, normals by Marsaglia's
polar method, and Gamma(a) = Gamma(a + 1) U^(1/a) for a < 1, carried in log space so tiny alphas cannot
underflow (lam = 1 / (1 + exp(log G2 - log G1))). The only operations are IEEE float64 +, -, *, /, sqrt and
exact scalings (frexp, ldexp, floor); log and exp are the fixed polynomials below, so numpy here and the CUDA
kernel (csrc/ops/mixup.cu, with explicitly rounded intrinsics: no fused multiply-adds) give the same bits.
A rejection loop that has not accepted after ``MAX_DRAWS`` uniforms (probability far below 1e-100) takes
its last candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tr.core import philox
from tr.core.errors import ConfigError

FIRST_BETA = 16  # the first counter of the Beta sampler's uniforms
MAX_DRAWS = 4096  # the sampler's uniforms at most (counters FIRST_BETA .. FIRST_BETA + MAX_DRAWS - 1)

# log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: sum of s^(2k+1) / (2k+1), k < 12 (Horner in s^2)
_LOG_C = tuple(float.fromhex(h) for h in (
    "0x1.0000000000000p+0", "0x1.5555555555555p-2", "0x1.999999999999ap-3", "0x1.2492492492492p-3",
    "0x1.c71c71c71c71cp-4", "0x1.745d1745d1746p-4", "0x1.3b13b13b13b14p-4", "0x1.1111111111111p-4",
    "0x1.e1e1e1e1e1e1ep-5", "0x1.af286bca1af28p-5", "0x1.8618618618618p-5", "0x1.642c8590b2164p-5"))
# exp(r) for |r| <= 0.35: sum of r^k / k!, k < 18 (Horner)
_EXP_C = tuple(float.fromhex(h) for h in (
    "0x1.0000000000000p+0", "0x1.0000000000000p+0", "0x1.0000000000000p-1", "0x1.5555555555555p-3",
    "0x1.5555555555555p-5", "0x1.1111111111111p-7", "0x1.6c16c16c16c17p-10", "0x1.a01a01a01a01ap-13",
    "0x1.a01a01a01a01ap-16", "0x1.71de3a556c734p-19", "0x1.27e4fb7789f5cp-22", "0x1.ae64567f544e4p-26",
    "0x1.1eed8eff8d898p-29", "0x1.6124613a86d09p-33", "0x1.93974a8c07c9dp-37", "0x1.ae7f3e733b81fp-41",
    "0x1.ae7f3e733b81fp-45", "0x1.952c77030ad4ap-49"))
LN2 = float.fromhex("0x1.62e42fefa39efp-1")
INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")


@dataclass(frozen=True)
class MixupConfig:
    """timm's Mixup(mixup_alpha, cutmix_alpha, prob=prob, switch_prob=switch_prob, mode='batch'); the label
    smoothing is the loss's (CrossEntropyLoss().label_smoothing), mixed into the targets as timm's is."""

    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    prob: float = 1.0
    switch_prob: float = 0.5

    def __post_init__(self) -> None:
        for name in ("mixup_alpha", "cutmix_alpha"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"mixup {name} must be a finite number >= 0 (0: off), got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.mixup_alpha == 0 and self.cutmix_alpha == 0:
            raise ConfigError("mixup needs mixup_alpha > 0 or cutmix_alpha > 0 (both are 0: nothing would mix)")
        for name in ("prob", "switch_prob"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ConfigError(f"mixup {name} must be a probability in [0, 1], got {v!r}")
            object.__setattr__(self, name, float(v))


@dataclass(frozen=True)
class MixDraw:
    """One step's draw: lam (float64, after CutMix's correction; 1.0: the step does not mix), whether it is
    CutMix, and the box rows [y0, y1) and columns [x0, x1) (empty for Mixup)."""

    lam: float
    cutmix: bool
    box: tuple[int, int, int, int]

    @property
    def lam32(self) -> np.float32:
        """What the op writes to its lam output and the loss reads."""
        return np.float32(self.lam)


def det_log(x: float) -> float:
    """Natural log of a positive finite float64 by a fixed polynomial (the CUDA kernel's det_log)."""
    m, e = math.frexp(x)  # x = m 2^e, m in [0.5, 1)
    if m < SQRT_HALF:
        m *= 2.0
        e -= 1
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = _LOG_C[-1]
    for c in reversed(_LOG_C[:-1]):
        p = p * z + c
    return (2.0 * s) * p + float(e) * LN2


def det_exp(x: float) -> float:
    """exp of a float64 by a fixed polynomial (the CUDA kernel's det_exp); 0 below -708, inf above 709."""
    if x > 709.0:
        return math.inf
    if x < -708.0:
        return 0.0
    n = math.floor(x * INV_LN2 + 0.5)
    r = x - float(n) * LN2
    p = _EXP_C[-1]
    for c in reversed(_EXP_C[:-1]):
        p = p * r + c
    return math.ldexp(p, n)


class _Uniforms:
    """The sampler's uniforms in (0, 1) at consecutive Philox counters of one key, drawn in blocks of 64."""

    def __init__(self, key: int) -> None:
        self.key, self.u, self.i = key, [], 0

    def next(self) -> float | None:
        if self.i >= MAX_DRAWS:
            return None
        if self.i == len(self.u):
            raw = philox.raw(self.key, FIRST_BETA + self.i, 64).astype(np.uint64)
            k = (raw[:, 0] << np.uint64(20)) | (raw[:, 1] >> np.uint64(12))  # 52 bits
            self.u.extend(float(2 * int(v) + 1) * 2.0**-53 for v in k)
        self.i += 1
        return self.u[self.i - 1]


def uniform_at(key: int, counter: int) -> float:
    """The (2k + 1) 2^-53 uniform at one counter (k: the top 52 bits of r0, r1)."""
    r = philox.raw(key, counter)
    return float(2 * ((int(r[0]) << 20) | (int(r[1]) >> 12)) + 1) * 2.0**-53


def _log_gamma(a: float, u: _Uniforms) -> float:
    """log of a Gamma(a) sample (Marsaglia-Tsang; a < 1 through Gamma(a + 1) U^(1/a))."""
    boost = a < 1.0
    aa = a + 1.0 if boost else a
    d = aa - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    v = 1.0
    while True:
        # a standard normal by Marsaglia's polar method
        u1, u2 = u.next(), u.next()
        if u1 is None or u2 is None:
            break
        p, q = 2.0 * u1 - 1.0, 2.0 * u2 - 1.0
        s = p * p + q * q
        if s >= 1.0 or s == 0.0:
            continue
        xn = p * math.sqrt((-2.0 * det_log(s)) / s)
        t = 1.0 + c * xn
        if t <= 0.0:
            continue
        v = t * t * t
        w = u.next()
        if w is None:
            break
        x2 = xn * xn
        if w < 1.0 - 0.0331 * (x2 * x2) or det_log(w) < 0.5 * x2 + d * ((1.0 - v) + det_log(v)):
            break
    lg = det_log(d * v)
    if boost:
        w = u.next()
        lg += det_log(w if w is not None else 0.5) / a
    return lg


def beta_symmetric(key: int, alpha: float) -> float:
    """A Beta(alpha, alpha) sample (float64) from the uniforms of ``key`` from counter FIRST_BETA on."""
    u = _Uniforms(key)
    lg1 = _log_gamma(alpha, u)
    lg2 = _log_gamma(alpha, u)
    return 1.0 / (1.0 + det_exp(lg2 - lg1))


def draw(key: int, cfg: MixupConfig, h: int, w: int) -> MixDraw:
    """The step's draw for images H x W, from the advanced stream value ``key`` (timm's _params_per_batch,
    then cutmix_bbox_and_lam with correct_lam)."""
    none = MixDraw(1.0, False, (0, 0, 0, 0))
    if not uniform_at(key, 0) < cfg.prob:
        return none
    if cfg.mixup_alpha > 0 and cfg.cutmix_alpha > 0:
        cut = uniform_at(key, 1) < cfg.switch_prob
    else:
        cut = cfg.cutmix_alpha > 0
    lam = beta_symmetric(key, cfg.cutmix_alpha if cut else cfg.mixup_alpha)
    if lam == 1.0:
        return none
    if not cut:
        return MixDraw(lam, False, (0, 0, 0, 0))
    ratio = math.sqrt(1.0 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    cy = int(philox.raw(key, 2)[0]) % h
    cx = int(philox.raw(key, 3)[0]) % w
    y0, y1 = min(max(cy - cut_h // 2, 0), h), min(max(cy + cut_h // 2, 0), h)
    x0, x1 = min(max(cx - cut_w // 2, 0), w), min(max(cx + cut_w // 2, 0), w)
    lam = 1.0 - float((y1 - y0) * (x1 - x0)) / float(h * w)
    return MixDraw(lam, True, (y0, y1, x0, x1))


def mix_batch(x: np.ndarray, d: MixDraw) -> None:
    """Mix an NHWC float batch with its reverse in place, as the op does (float32 arithmetic, rounded once to
    x's dtype): timm's x.mul_(lam).add_(x.flip(0).mul_(1 - lam)), or the CutMix box pasted from x.flip(0)."""
    if d.lam == 1.0:
        return
    if d.cutmix:
        y0, y1, x0, x1 = d.box
        x[:, y0:y1, x0:x1] = x[::-1, y0:y1, x0:x1].copy()
        return
    a, b = np.float32(d.lam), np.float32(1.0 - d.lam)
    xf = x.astype(np.float32)
    mixed = xf * a + xf[::-1] * b  # each product rounded to float32, then the sum
    x[...] = mixed.astype(x.dtype)
