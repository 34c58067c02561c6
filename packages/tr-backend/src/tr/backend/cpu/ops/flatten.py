"""flatten_fwd/bwd ([N,H,W,C] <-> [N,1,1,H*W*C]) and channel_pad_fwd/bwd (zero-padded channels).

On the CPU every tensor is compact NHWC, so flatten is a copy of equal bytes; channel padding copies the
first C channels and zeroes the rest.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import flatten as rules


def _flat_copy(b: Binder, src: str, dst: str) -> Step:
    rules.flat_copy(b, src, dst)
    return partial(np.copyto, b.flat(dst), b.flat(src))


@cpu_op("flatten_fwd")
def flatten_fwd(b: Binder) -> Step:
    return _flat_copy(b, "x", "y")


@cpu_op("flatten_bwd")
def flatten_bwd(b: Binder) -> Step:
    return _flat_copy(b, "dy", "dx")


@cpu_op("channel_pad_fwd")
def channel_pad_fwd(b: Binder) -> Step:
    _, c, cp = rules.narrow_wide(b, "x", "y")
    y = b.view("y")
    copy = partial(np.copyto, y[..., :c], b.view("x"))
    return seq(copy, partial(y[..., c:].fill, 0) if cp > c else None)


@cpu_op("channel_pad_bwd")
def channel_pad_bwd(b: Binder) -> Step:
    _, c, _ = rules.narrow_wide(b, "dx", "dy")
    return partial(np.copyto, b.view("dx"), b.view("dy")[..., :c])
