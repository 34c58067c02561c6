"""Gradient clipping on the CPU. clip_grad_norm: the sum of squares in float64 (numpy's pairwise sum over a float64
copy: a fixed order for a given span), then the norm and the optimizer's divisor. clip_agc: per unit float64 sums
of squares of the weights and gradients, the factor (tr.backend.rules.clip), each unit's gradient times it in
float32."""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import clip as rules


@cpu_op("clip_grad_norm")
def clip_grad_norm(b: Binder) -> Step:
    n, max_norm = rules.clip_grad_norm(b)
    g = b.span("g", np.float32)[:n]
    scale, flag, div, norm = b.flat("scale"), b.flat("flag"), b.flat("divisor"), b.flat("norm")
    wide = b.scratch((n,), np.float64)

    def run() -> None:
        np.copyto(wide, g)
        np.square(wide, out=wide)
        s = float(scale[0])
        nrm, d = rules.divisor(float(np.sum(wide)), s, max_norm)
        norm[0] = nrm
        div[0] = s if flag[0] else d

    return run


@cpu_op("clip_agc")
def clip_agc(b: Binder) -> Step:
    units, per, clip, eps = rules.clip_agc(b)
    w, g = b.flat("w").reshape(units, per), b.flat("g").reshape(units, per)
    scale, flag = b.flat("scale"), b.flat("flag")
    wide = b.scratch((units, per), np.float64)

    def sums(x: np.ndarray) -> np.ndarray:
        np.copyto(wide, x)
        np.square(wide, out=wide)
        return wide.sum(axis=1)

    def run() -> None:
        if flag[0]:
            return
        w_sq = sums(w)  # (a copy: sums() reuses its scratch)
        factors = rules.agc_factor(w_sq, sums(g), float(scale[0]), clip, eps).astype(np.float32)
        np.multiply(g, factors[:, None], out=g)  # (a kept unit's factor is exactly 1: its bits stay)

    return run

