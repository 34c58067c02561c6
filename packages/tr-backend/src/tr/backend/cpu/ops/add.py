"""Residual join: y = a + b, optionally followed by relu; y may share the bytes of a or b."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import add as rules


@cpu_op("add_fwd")
def add_fwd(b: Binder) -> Step:
    n, relu_after = rules.add_fwd(b)
    a, load_a = b.load("a", (n,))
    c, load_c = b.load("b", (n,))
    y, store_y = b.store("y", (n,))
    relu = partial(np.maximum, y, np.float32(0), out=y) if relu_after else None
    return seq(load_a, load_c, partial(np.add, a, c, out=y), relu, store_y)
