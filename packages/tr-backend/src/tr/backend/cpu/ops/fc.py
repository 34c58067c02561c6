"""Fully connected layer: x [N,H,W,C] read as [N, K=H*W*C], w [O,1,1,K], b [O], y [N,1,1,O].

Forward is one BLAS GEMM ``y = x @ w^T`` written straight into the output view (``w.T`` is a transposed
view, so BLAS reads it in place), then the bias and the optional fused ReLU in place (and its bit mask,
packed as tr.backend.rules.fc describes). Backward is two GEMMs (``dw = dy^T x``, ``dx = dy w``, zeroed where
the input's relu mask is clear) and one column sum (``db``), each into its output view.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import fc as fc_rules


@cpu_op("fc_fwd")
def fc_fwd(b: Binder) -> Step:
    sh, relu = fc_rules.fwd(b)
    n, k, o = sh.n, sh.k, sh.o
    x, load_x = b.load("x", (n, k))
    w, load_w = b.load("w", (o, k))
    y, store_y = b.store("y", (n, o))
    wt = w.T
    steps = [load_x, load_w, partial(np.matmul, x, wt, out=y)]
    if b.has("b"):
        bias, load_b = b.load("b", (o,))
        steps += [load_b, partial(np.add, y, bias, out=y)]
    if b.has("mask"):
        bits = b.private((n, fc_rules.mask_ld(o)), np.bool_)  # the padding bits stay 0
        code = b.view("mask", (n, fc_rules.mask_bytes(o))).view(np.uint8)

        def pack() -> None:
            np.greater(y, np.float32(0), out=bits[:, :o])  # the pre-activation, before the relu
            code[...] = np.packbits(bits, axis=1, bitorder="little")

        steps.append(pack)
    if relu:
        steps.append(partial(np.maximum, y, np.float32(0), out=y))
    steps.append(store_y)
    return seq(*steps)


@cpu_op("fc_bwd")
def fc_bwd(b: Binder) -> Step:
    sh = fc_rules.bwd(b)
    n, k, o = sh.n, sh.k, sh.o
    x, load_x = b.load("x", (n, k))
    dy, load_dy = b.load("dy", (n, o))
    dw, store_dw = b.store("dw", (o, k))
    steps = [load_x, load_dy, partial(np.matmul, dy.T, x, out=dw), store_dw]
    if b.has("db"):
        db, store_db = b.store("db", (o,))
        steps += [partial(np.sum, dy, axis=0, out=db), store_db]
    if b.has("dx"):
        w, load_w = b.load("w", (o, k))
        dx, store_dx = b.store("dx", (n, k))
        steps += [load_w, partial(np.matmul, dy, w, out=dx)]
        if b.has("mask"):
            code = b.view("mask", (n, fc_rules.mask_bytes(k))).view(np.uint8)

            def drelu() -> None:  # a select, as cuBLASLt's DRELU: dx = 0 where the relu did not pass
                bits = np.unpackbits(code, axis=1, count=k, bitorder="little")
                np.copyto(dx, np.float32(0), where=bits == 0)

            steps.append(drelu)
        steps.append(store_dx)
    return seq(*steps)
