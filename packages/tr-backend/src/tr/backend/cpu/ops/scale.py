"""Channel scaling, squeeze-excitation's join: y = x * s with s [N,1,1,C] broadcast over H and W."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import scale as rules


@cpu_op("scale_fwd")
def scale_fwd(b: Binder) -> Step:
    n, hw, c = rules.scale_fwd(b)
    x, load_x = b.load("x", (n, hw, c))
    s, load_s = b.load("s", (n, 1, c))
    y, store_y = b.store("y", (n, hw, c))
    return seq(load_x, load_s, partial(np.multiply, x, s, out=y), store_y)


@cpu_op("scale_bwd")
def scale_bwd(b: Binder) -> Step:
    n, hw, c, with_dx = rules.scale_bwd(b)
    x, load_x = b.load("x", (n, hw, c))
    s, load_s = b.load("s", (n, 1, c))
    dy, load_dy = b.load("dy", (n, hw, c))
    ds, store_ds = b.store("ds", (n, c))
    steps = [load_x, load_s, load_dy, partial(np.einsum, "nkc,nkc->nc", dy, x, out=ds), store_ds]
    if with_dx:
        dx, store_dx = b.store("dx", (n, hw, c))
        steps += [partial(np.multiply, dy, s, out=dx), store_dx]
    return seq(*steps)
