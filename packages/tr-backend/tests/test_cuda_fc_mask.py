"""The fc relu mask on CUDA (csrc/ops/fc.cu) against the CPU backend: fc_fwd's RELU_AUX(_BIAS) epilogue and
fc_bwd's DRELU, and (TR_CUBLASLT_EPILOGUES=0) the kernels that replace them where cuBLASLt has no fused
algorithm. Both write the mask in one layout (tr/backend/rules/fc.py), so a fused forward and an unfused
backward agree; the first test checks cuBLASLt's own bits against the CPU's packing.

Tolerances as test_cuda_ops.py: FP32 1e-5, FP16 outputs 2e-3. Mask bits are compared where the CPU's
pre-activation is clear of zero by more than the GEMMs' difference (elsewhere either sign is right).
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

from tr.core.ops import relu_mask_bytes, relu_mask_ld

pytestmark = pytest.mark.gpu

TOL = {"fp32": 1e-5, "fp16": 2e-3}


def _pair(dt: str, n: int, k: int, hidden: int, o: int, bias: bool) -> Twin:
    """x [n, k] -> fc(hidden, relu, mask) -> h -> fc(o) backward with the mask."""
    tw = Twin()
    tw.add("x", (n, 1, 1, k), dt)
    tw.add("w1", (hidden, 1, 1, k), dt)
    if bias:
        tw.add("b1", (hidden,), dt)
    tw.add("h", (n, 1, 1, hidden), dt)
    tw.add("pre", (n, 1, 1, hidden), "fp32")
    tw.add("mask", (n, 1, 1, relu_mask_bytes(hidden)), "int8")
    tw.add("w2", (o, 1, 1, hidden), dt)
    tw.add("dy", (n, 1, 1, o), dt)
    tw.add("dw2", (o, 1, 1, hidden), "fp32")
    tw.add("db2", (o,), "fp32")
    tw.add("dh", (n, 1, 1, hidden), dt)
    tw.allocate()
    for name in ("x", "w1", "w2", "dy") + (("b1",) if bias else ()):
        tw.fill(name)
    return tw


def _bits(mask: np.ndarray, n: int, hidden: int) -> np.ndarray:
    return np.unpackbits(mask.reshape(n, -1).view(np.uint8), axis=1, bitorder="little")[:, :relu_mask_ld(hidden)]


CASES = [("fp32", 64, 96, 200, 10, True), ("fp16", 128, 784, 1024, 512, True), ("fp16", 200, 256, 256, 10, True),
         ("fp16", 32, 64, 130, 7, False), ("fp32", 8, 40, 128, 3, False)]
IDS = [f"{c[0]}-n{c[1]}-h{c[3]}" + ("" if c[5] else "-nobias") for c in CASES]


@pytest.mark.parametrize("epilogues", ["1", "0"], ids=["cublaslt", "kernels"])
@pytest.mark.parametrize("dt,n,k,hidden,o,bias", CASES, ids=IDS)
def test_relu_mask_forward_and_drelu_backward(dt, n, k, hidden, o, bias, epilogues, monkeypatch):
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", epilogues)
    tw = _pair(dt, n, k, hidden, o, bias)
    b1 = tw["b1"] if bias else None
    _, g = tw.run(op("fc_fwd", x=tw["x"], w=tw["w1"], b=b1, y=tw["pre"]),
                  op("fc_fwd", x=tw["x"], w=tw["w1"], b=b1, y=tw["h"], mask=tw["mask"], activation="relu"),
                  poison=("h", "mask"))
    info = g.ops[1].info
    print(f"\nfc_fwd {dt} n={n} hidden={hidden} bias={bias} epilogues={epilogues}: {info}")
    assert "mask kernel" in info if epilogues == "0" else ("relu mask" in info or "mask kernel" in info)
    close(*reversed(tw.both("h")), TOL[dt], "h")
    pre = tw.cpu.read(tw["pre"]).reshape(n, hidden).astype(np.float64)
    cpu_bits, gpu_bits = (_bits(m, n, hidden) for m in tw.both("mask"))
    clear = np.abs(pre) > 10 * TOL[dt] * max(1.0, np.abs(pre).max())
    assert (gpu_bits[:, :hidden][clear] == (pre[clear] > 0)).all(), "the GPU's mask bits disagree with the signs"
    if epilogues == "0":  # our kernel zeroes the padding; cuBLASLt leaves it as it was (nothing reads it)
        assert not gpu_bits[:, hidden:].any(), "padding bits set"
    assert (cpu_bits[:, :hidden][clear] == gpu_bits[:, :hidden][clear]).all()

    tw.cpu.write(tw["mask"], tw.gpu.read(tw["mask"]))  # one mask (and input) for both backwards
    tw.cpu.write(tw["h"], tw.gpu.read(tw["h"]))
    _, g = tw.run(op("fc_bwd", x=tw["h"], w=tw["w2"], dy=tw["dy"], dw=tw["dw2"], db=tw["db2"], dx=tw["dh"],
                     mask=tw["mask"]), poison=("dw2", "db2", "dh"))
    info = g.ops[0].info
    print(f"fc_bwd {dt} epilogues={epilogues}: {info}")
    assert "relu-gradient kernel" in info if epilogues == "0" else ("DRELU" in info or "relu-gradient" in info)
    cpu_dh, gpu_dh = tw.both("dh")
    close(gpu_dh, cpu_dh, TOL[dt], "dh")
    passed = _bits(tw.gpu.read(tw["mask"]), n, hidden)[:, :hidden].astype(bool)
    assert (gpu_dh.reshape(n, hidden).astype(np.float32)[~passed] == 0).all(), "dh not zero where the relu blocked"
    close(*reversed(tw.both("dw2")), 1e-5, "dw2")
    close(*reversed(tw.both("db2")), 1e-5, "db2")


def test_relu_mask_is_deterministic():
    tw = _pair("fp16", 128, 784, 1024, 512, True)
    calls = [op("fc_fwd", x=tw["x"], w=tw["w1"], b=tw["b1"], y=tw["h"], mask=tw["mask"], activation="relu"),
             op("fc_bwd", x=tw["h"], w=tw["w2"], dy=tw["dy"], dw=tw["dw2"], db=tw["db2"], dx=tw["dh"],
                mask=tw["mask"])]
    graph = tw.gpu.capture("pair", calls)
    seen = set()
    for _ in range(3):
        tw.gpu.launch(graph)
        tw.gpu.synchronize()
        seen.add(b"".join(tw.gpu.read(tw[n]).tobytes() for n in ("h", "mask", "dh", "dw2")))
    assert len(seen) == 1
