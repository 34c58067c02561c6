"""Every kernel of the captured training step as the GPU ran it: CUPTI's trace (through torch.profiler) of a few
launches of tr's whole step graph, in graph order, with the idle time between kernels.

step_profile.py times each op alone in its own graph (each op pays a launch and runs without neighbours); this
script looks at the real step: the kernels of one launch in order (name, microseconds, the gap before it), the
same kernels summed by name over all traced launches, and the step's busy and idle time. A BN op is three
kernels (reduce, finish, apply), so this is where their split shows.

    python benchmarks/kernel_trace.py --model resnet50 --batch 256 --json trace_resnet50.json
    python benchmarks/kernel_trace.py --model vgg16_bn --batch 256 --top 30

Needs a CUDA build of tr-backend and a PyTorch with CUPTI (torch.profiler) in the same process: CUPTI records
every kernel of the process's context, those of tr's graph included.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def short(name: str) -> str:
    """A demangled kernel name without our namespaces, its return type and its argument list."""
    name = re.sub(r"(tr::native::|\(anonymous namespace\)::|bnk::|kern::)", "", name)
    if name.endswith(")"):  # the argument list: from the parenthesis that closes at the end
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name.removeprefix("void ").strip()[:120]


def trace(task: Any, launches: int) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    be, g = task.backend, task._steps.train[0]
    for _ in range(3):
        be.launch(g)
    be.synchronize()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(launches):
            be.launch(g)
        be.synchronize()
    kernels = []
    for e in prof.events():
        if e.device_type.name != "CUDA" or "memcpy" in e.name.lower() or "memset" in e.name.lower():
            continue
        start = e.time_range.start
        kernels.append({"name": short(e.name), "start_us": start, "us": e.time_range.end - start})
    kernels.sort(key=lambda k: k["start_us"])
    return kernels


def split_launches(kernels: list[dict], launches: int) -> list[list[dict]]:
    """Cut the trace into launches at its `launches - 1` largest gaps (one graph launch after another)."""
    if launches <= 1 or len(kernels) < launches:
        return [kernels]
    gaps = sorted(range(1, len(kernels)), key=lambda i: kernels[i]["start_us"] -
                  (kernels[i - 1]["start_us"] + kernels[i - 1]["us"]), reverse=True)[:launches - 1]
    cuts = [0, *sorted(gaps), len(kernels)]
    per = [kernels[a:b] for a, b in zip(cuts, cuts[1:])]
    n = len(per[0])
    return per if all(len(p) == n for p in per) else [kernels]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("vgg16_bn", "resnet50", "mlp_mnist"), default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--launches", type=int, default=3, help="step launches traced")
    ap.add_argument("--top", type=int, default=40, help="kernel names listed by total time")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.launches < 1 or a.batch < 1:
        ap.error("--launches and --batch must be >= 1")
    from step_profile import build

    a.device = "cuda"
    t0 = time.perf_counter()
    task = build(a)
    print(f"compiled and ran one epoch in {time.perf_counter() - t0:.1f} s", flush=True)
    step_ms = task.time_train_step(10, 3) * 1e3
    kernels = trace(task, a.launches)
    per = split_launches(kernels, a.launches)
    one = per[-1]
    seq = []
    for i, k in enumerate(one):
        gap = k["start_us"] - (one[i - 1]["start_us"] + one[i - 1]["us"]) if i else 0.0
        seq.append({"name": k["name"], "us": round(k["us"], 2), "gap_us": round(gap, 2)})
    busy = sum(k["us"] for k in one)
    span = (one[-1]["start_us"] + one[-1]["us"] - one[0]["start_us"]) if one else 0.0
    by_name: dict[str, dict] = defaultdict(lambda: {"count": 0, "us": 0.0})
    for k in kernels:
        by_name[k["name"]]["count"] += 1
        by_name[k["name"]]["us"] += k["us"]
    n = len(per)  # launches the by-name sums cover
    print(f"\n{a.model} batch {a.batch} {'AMP' if a.amp else 'FP32'}: step {step_ms:.3f} ms (timed launches); "
          f"one traced launch: {len(one)} kernels, span {span / 1e3:.3f} ms, busy {busy / 1e3:.3f} ms, "
          f"idle between kernels {(span - busy) / 1e3:.3f} ms")
    print(f"\nkernels by total time per launch ({n} launch{'es' if n > 1 else ''} traced):")
    print(f"{'ms/launch':>9} {'n':>5} {'us each':>8}  kernel")
    total = sum(v["us"] for v in by_name.values())
    for name, v in sorted(by_name.items(), key=lambda kv: -kv[1]["us"])[:a.top]:
        print(f"{v['us'] / n / 1e3:9.3f} {v['count'] // n:5d} {v['us'] / v['count']:8.1f}  {name}")
    print(f"{total / n / 1e3:9.3f} {len(kernels) // n:5d} {'':8}  all kernels")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "command": sys.argv, "model": a.model, "batch": a.batch, "resolution": a.resolution, "amp": a.amp,
            "step_ms": step_ms, "launches_traced": len(per), "span_us": span, "busy_us": busy,
            "by_name": {k: {"count": v["count"] // n, "us_per_launch": v["us"] / n} for k, v in by_name.items()},
            "sequence": seq}, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
