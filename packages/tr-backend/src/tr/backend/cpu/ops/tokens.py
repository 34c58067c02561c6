"""A Vision Transformer's token sequence (argument rules: tr.backend.rules.tokens).

tokens_fwd: y[n, 0] = cls + pos[0] with a class token, and y[n, c0 + p] = x[n, p] + pos[c0 + p] for the H*W patch
tokens in row order (c0 = 1 with a class token, else 0; without pos nothing is added), in float32, rounded once to
y's type. tokens_bwd: dx[n, p] = dy[n, c0 + p]; dcls = the sum over the batch of dy[n, 0]; dpos = the sum over the
batch of dy, float32 sums adding the samples in order (as csrc/ops/tokens.cu: one running float32 sum per element,
sample 0 first), so both backends give the same bytes. token_pick_fwd copies token 0 (class-token pooling),
token_pick_bwd writes its gradient there and zeros at the other tokens.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import tokens as rules


def _batch_sum(src: np.ndarray, out: np.ndarray) -> None:
    """out = src[0] + src[1] + ... in float32, in sample order."""
    np.copyto(out, src[0])
    for k in range(1, src.shape[0]):
        np.add(out, src[k], out=out)


@cpu_op("tokens_fwd")
def tokens_fwd(b: Binder) -> Step:
    s = rules.tokens_fwd(b)
    c0 = int(s.cls)
    x, load_x = b.load("x", (s.n, s.p, s.c))
    y, store_y = b.store("y", (s.n, s.t, s.c))
    cls = b.load("cls", (s.c,))[0] if s.cls else None
    pos = b.load("pos", (s.t, s.c))[0] if s.pos else None

    def core() -> None:
        y[:, c0:] = x
        if cls is not None:
            y[:, 0] = cls
        if pos is not None:
            np.add(y, pos, out=y)

    return seq(load_x, core, store_y)


@cpu_op("tokens_bwd")
def tokens_bwd(b: Binder) -> Step:
    s = rules.tokens_bwd(b)
    c0 = int(s.cls)
    dy, load_dy = b.load("dy", (s.n, s.t, s.c))
    dx, store_dx = b.store("dx", (s.n, s.p, s.c)) if b.has("dx") else (None, None)
    dcls = b.store("dcls", (s.c,))[0] if s.cls else None
    dpos = b.store("dpos", (s.t, s.c))[0] if s.pos else None

    def core() -> None:
        if dx is not None:
            np.copyto(dx, dy[:, c0:])
        if dcls is not None:
            _batch_sum(dy[:, 0], dcls)
        if dpos is not None:
            _batch_sum(dy, dpos)

    return seq(load_dy, core, store_dx)


@cpu_op("token_pick_fwd")
def token_pick_fwd(b: Binder) -> Step:
    n, t, c = rules.token_pick(b, "x", "y")
    x, load_x = b.load("x", (n, t, c))
    y, store_y = b.store("y", (n, c))
    return seq(load_x, lambda: np.copyto(y, x[:, 0]), store_y)


@cpu_op("token_pick_bwd")
def token_pick_bwd(b: Binder) -> Step:
    n, t, c = rules.token_pick(b, "dx", "dy")
    dy, load_dy = b.load("dy", (n, c))
    dx, store_dx = b.store("dx", (n, t, c))

    def core() -> None:
        dx.fill(0)
        dx[:, 0] = dy

    return seq(load_dy, core, store_dx)
