"""One process of test_cuda_cudnn_cache.py: compile a small CNN's training step on the CUDA backend, train it
for three steps, print one JSON line (what cuDNN planning cost, the losses, a digest of the weights, which
engines the convolutions run, the cache file). The settings come from the environment (TR_CACHE_DIR,
TR_CUDNN_CACHE, TR_CONV); argv[1] is "fp32" or "tf32".

conv3x3 (8 -> 16) -> relu -> conv3x3 stride 2 (16 -> 32) -> relu -> GAP -> FC -> softmax-CE, momentum SGD:
five cuDNN plans (two fprop, two wgrad, one dgrad; the first layer has no dgrad).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys

import numpy as np
from backend_testkit import (
    A_DATA,
    A_LABEL,
    ACTIVATION_FP32,
    DEEP_CONV,
    FC_B,
    FC_W,
    FIRST_CONV,
    MASK,
    RESULT,
    SCALAR_FP32,
    SCALAR_INT32,
    SimpleArena,
    op,
)

from tr.backend.cuda import CudaBackend, cudnn_plan_cache_path, cudnn_plan_stats
from tr.core.log import configure_logging
from tr.core.memory import Region, Role, Span

N, H, C0, C1, C2, K = 8, 16, 8, 16, 32, 10
PARAMS = [("fcb", (K,), FC_B), ("fcw", (K, 1, 1, C2), FC_W), ("w1", (C1, 3, 3, C0), FIRST_CONV),
          ("w2", (C2, 3, 3, C1), DEEP_CONV)]


def build() -> tuple[SimpleArena, dict, list]:
    a = SimpleArena()
    t = {}
    # layout order: master parameters, gradients, the step result, momenta
    for prefix, role in (("W", Role.PARAM), ("G", Role.GRAD), ("R", Role.RESULT), ("M", Role.MOMENT1)):
        if role is Role.RESULT:
            t["result"] = a.add("result", (3,), region=RESULT)
            continue
        for name, shape, group in PARAMS:
            t[prefix + name] = a.add(prefix + name, shape, region=Region(role, group))
    t["labels"] = a.add("labels", (N,), "int32", Region(Role.INPUT, A_LABEL))
    t["x"] = a.add("x", (N, H, H, C0), region=Region(Role.INPUT, A_DATA))
    h2 = H // 2
    feat = {"c1": (N, H, H, C1), "r1": (N, H, H, C1), "c2": (N, h2, h2, C2), "r2": (N, h2, h2, C2),
            "g": (N, 1, 1, C2), "z": (N, 1, 1, K), "probs": (N, 1, 1, K)}
    for name, shape in feat.items():
        t[name] = a.add(name, shape, region=ACTIVATION_FP32)
    for name, shape in feat.items():
        if name != "probs":
            t["d" + name] = a.add("d" + name, shape, region=ACTIVATION_FP32)
    t["lr"] = a.add("lr", (1,), region=SCALAR_FP32)
    t["one"] = a.add("one", (1,), region=SCALAR_FP32)
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    t["mask1"] = a.add("mask1", (N, H, H, C1), "int8", MASK)
    t["mask2"] = a.add("mask2", (N, h2, h2, C2), "int8", MASK)
    c1 = {"kernel": 3, "stride": 1, "padding": 1}
    c2 = {"kernel": 3, "stride": 2, "padding": 1}
    calls = [
        op("conv_fwd", layer=0, x=t["x"], w=t["Ww1"], y=t["c1"], **c1),
        op("act_fwd", x=t["c1"], y=t["r1"], mask=t["mask1"], kind="relu"),
        op("conv_fwd", layer=1, x=t["r1"], w=t["Ww2"], y=t["c2"], **c2),
        op("act_fwd", x=t["c2"], y=t["r2"], mask=t["mask2"], kind="relu"),
        op("gap_fwd", x=t["r2"], y=t["g"]), op("fc_fwd", x=t["g"], w=t["Wfcw"], b=t["Wfcb"], y=t["z"]),
        op("softmax_ce_fwd", logits=t["z"], labels=t["labels"], probs=t["probs"], result=t["result"]),
        op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["one"], dlogits=t["dz"]),
        op("fc_bwd", x=t["g"], w=t["Wfcw"], dy=t["dz"], dw=t["Gfcw"], db=t["Gfcb"], dx=t["dg"]),
        op("gap_bwd", dy=t["dg"], dx=t["dr2"]),
        op("act_bwd", x=t["c2"], dy=t["dr2"], dx=t["dc2"], mask=t["mask2"], kind="relu"),
        op("conv_bwd", layer=1, x=t["r1"], w=t["Ww2"], dy=t["dc2"], dw=t["Gw2"], dx=t["dr1"], **c2),
        op("act_bwd", x=t["c1"], dy=t["dr1"], dx=t["dc1"], mask=t["mask1"], kind="relu"),
        op("conv_bwd", layer=0, x=t["x"], w=t["Ww1"], dy=t["dc1"], dw=t["Gw1"], **c1),
        op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD), m=Span.of(Role.MOMENT1), lr=t["lr"],
           flag=t["flag"], grad_scale=t["one"], rule="momentum", beta1=0.9),
    ]
    return a, t, calls


def main() -> None:
    configure_logging("WARNING")  # the plan cache's warnings go to stderr, where the test looks for them
    be = CudaBackend(use_tf32=sys.argv[1] == "tf32")
    arena, t, calls = build()
    be.allocate(arena.layout())
    rng = np.random.default_rng(0)
    for name, shape, _ in PARAMS:
        be.write(t["W" + name], 0.3 * rng.standard_normal(shape))
    be.write(t["lr"], [0.05])
    be.write(t["one"], [1.0])
    be.write(t["x"], rng.standard_normal((N, H, H, C0)))
    be.write(t["labels"], rng.integers(0, K, N))
    before = cudnn_plan_stats()
    step = be.capture("step", calls)
    stats = cudnn_plan_stats() - before
    losses = []
    for _ in range(3):
        be.launch(step)
        be.synchronize()
        losses.append(float(be.read(t["result"]).ravel()[0]))
    digest = hashlib.sha256(b"".join(be.read(t["W" + name]).tobytes() for name, *_ in PARAMS)).hexdigest()
    infos = [o.info for c, o in zip(calls, step.ops) if c.op.startswith("conv")]
    print(json.dumps({"stats": dataclasses.asdict(stats), "losses": losses, "digest": digest, "infos": infos,
                      "cache": cudnn_plan_cache_path(be.device)}))


if __name__ == "__main__":
    main()
