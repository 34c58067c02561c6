"""Should tr take BN statistics from cuDNN's convolution epilogue (issue [18])? A measurement before any plan uses it.

NVIDIA's ResNet training fuses batch norm into the convolutions: the statistics come out of the convolution's
epilogue (conv + genstats) and the previous BN's scale, bias and ReLU run in the next convolution's prologue
(scale-bias-relu-conv-genstats). tr's BN computes its statistics in a pass of its own over the convolution's output
(fixed-order float64 sums: docs/decisions/2026-12-01-batch-norm-carries-what-follows.md). Before a plan uses the
fusion, this asks cuDNN, for every convolution of a network that a BN follows (FP16 NHWC, the only type cuDNN's
runtime fusion takes genstats in), through tr.backend._native.cudnn_conv_genstats_probe:

- whether an engine without the NONDETERMINISTIC and REDUCED_PRECISION_REDUCTION notes builds (tr's rule), and
  whether two executions write the same sums (determinism is a feature: a fusion that breaks it is an opt-in);
- how far its FP32 sum and sum of squares lie from float64 sums of the same y, and the variance derived from them
  (tr's own pass subtracts a shift first so that E[x^2] - E[x]^2 does not cancel);
- the fused graph's time against the plain convolution's under the same rule; the saving to weigh it against is tr's
  BN statistics pass over that y (`benchmarks/step_profile.py`'s bn_fwd rows, same call).

Each unique shape runs once with the plain input and, where the convolution's input is a BN + ReLU output that
feeds nothing else (the bottleneck's 3x3 and last 1x1), once more with the scale-bias-relu prologue.

    python benchmarks/conv_genstats_probe.py --model resnet50 --json auto          # a GPU with cuDNN
    bash benchmarks/h200_session.sh build genstats-resnet50                         # on the H200 (stage genstats)

No GPU here: ``--list`` prints the shapes it would measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ("resnet50", "vgg16_bn", "mobilenet_v2", "efficientnet_b0")


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int
    pad: int
    prologue: bool  # its input is a BN + ReLU output read by it alone


def conv_shapes(model: str, batch: int, resolution: int) -> Counter[ConvShape]:
    """Every convolution of examples/models.py's ``model`` that a BN follows (cbr layers, and a conv whose only reader
    is a bn2d), with its count; grouped (depthwise) convolutions left out (no genstats fusion for them)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.models import MODELS as EXAMPLES
    from tr.graph.compiler import arch_plan
    from tr.graph.spec import CompileSpec

    plan = arch_plan(EXAMPLES[model], CompileSpec(input_shape=(resolution, resolution, 4), num_classes=1000,
                                                  batch=batch, amp=True))
    readers: Counter[int] = Counter(u for layer in plan.layers for u in layer.inputs)
    out: Counter[ConvShape] = Counter()
    for i, layer in enumerate(plan.layers):
        p = layer.params
        if layer.kind not in ("cbr", "conv") or p.get("g", 1) != 1:
            continue
        if layer.kind == "conv" and not any(m.kind == "bn2d" and m.inputs == (i,) for m in plan.layers):
            continue
        x = plan.in_shapes(i)[0]
        src = layer.inputs[0]
        prev = plan.layers[src] if src >= 0 else None
        prologue = (prev is not None and prev.kind == "cbr" and prev.params.get("act") == "relu"
                    and not prev.params.get("residual") and prev.params.get("pool") is None and readers[src] == 1)
        c = x.dims[3] + (x.dims[3] % 2)  # (the stem's 3 or 4 channels: tr pads to 4 under AMP)
        out[ConvShape(batch, c, x.dims[1], x.dims[2], p["out"], p["k"], p["k"], p["s"], p["p"], prologue)] += 1
    return out


def probe(native: Any, device: int, shape: ConvShape, prologue: bool, reps: int) -> dict:
    d = asdict(shape)
    args = {k: d[k] for k in ("n", "c", "h", "w", "k", "r", "s", "stride", "pad")}
    t0 = time.perf_counter()
    from tr.core.errors import DeviceUnavailableError

    try:
        r = dict(native.cudnn_conv_genstats_probe(device, **args, prologue=prologue, reps=reps))
    except DeviceUnavailableError as e:  # no GPU or no cuDNN: nothing else can be measured either
        raise SystemExit(f"conv_genstats_probe: {e}") from None
    except Exception as e:  # noqa: BLE001 (recorded: one shape's failure is an answer too)
        r = {"error": f"{type(e).__name__}: {e}"}
    return {**d, "prologue": prologue, **r, "wall_s": time.perf_counter() - t0}


def summary(rows: list[dict], counts: dict[tuple[tuple, bool], int]) -> dict:
    """Totals over the network (each shape times its count: every convolution of the geometry for the plain-input
    rows, those with a BN + ReLU input alone for the prologue rows)."""
    out: dict[str, Any] = {}
    for kind, pro in (("conv_genstats", False), ("sbr_conv_genstats", True)):
        rs = [r for r in rows if r["prologue"] is pro and "error" not in r]
        ok = [r for r in rs if r.get("fused_engine")]
        w = {id(r): counts[key(r), pro] for r in rs}
        out[kind] = {
            "shapes": len(rs), "with_engine": len(ok),
            "convolutions": sum(w[id(r)] for r in rs),
            "plain_ms": sum(r["plain_ms"] * w[id(r)] for r in ok),
            "fused_ms": sum(r["fused_ms"] * w[id(r)] for r in ok),
            "sums_repeat_everywhere": all(r["sums_repeat"] for r in ok) if ok else None,
            "max_sum_rel_err": max((r["sum_rel_err"] for r in ok), default=None),
            "max_var_rel_err": max((r["var_rel_err"] for r in ok), default=None),
            "notes": sorted({r["fused_note"][:160] for r in rs if not r.get("fused_engine")}),
            "errors": sorted({r["error"][:160] for r in rows if r["prologue"] is pro and "error" in r}),
        }
    return out


def key(r: dict) -> tuple:
    return tuple(r[k] for k in ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--reps", type=int, default=20, help="timed executions of each plan")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--deadline-s", type=float, default=0.0, help="> 0: probe no shape after this many seconds")
    ap.add_argument("--list", action="store_true", help="print the shapes and stop (no GPU needed)")
    ap.add_argument("--json", help="write every row and the totals here, or 'auto' (benchmarks/results)")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.resolution < 32 or a.reps < 1:
        ap.error("--batch >= 1, --resolution >= 32 and --reps >= 1")
    shapes = conv_shapes(a.model, a.batch, a.resolution)
    if a.list:
        for s, n in shapes.items():
            print(f"{n:3d} x {s}")
        print(f"{sum(shapes.values())} convolutions a BN follows, {len(shapes)} shapes")
        return 0
    from tr.backend import _native

    if not hasattr(_native, "cudnn_conv_genstats_probe"):
        raise SystemExit("this tr-backend build has no CUDA part: the probe needs a GPU build (h200_session.sh build)")
    counts: dict[tuple[tuple, bool], int] = {}
    for s, n in shapes.items():
        for pro in {False, s.prologue}:  # every convolution runs plain; the eligible ones with the prologue too
            counts[key(asdict(s)), pro] = counts.get((key(asdict(s)), pro), 0) + n
    todo = [(s, False) for s in dict.fromkeys(ConvShape(**{**asdict(s), "prologue": False}) for s in shapes)]
    todo += [(s, True) for s in shapes if s.prologue]
    t_start = time.perf_counter()
    rows, not_run = [], []
    out = None
    if a.json:
        day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        out = HERE / "results" / f"conv_genstats_{a.model}_b{a.batch}_{day}.json" if a.json == "auto" else Path(a.json)
    for s, pro in todo:
        if a.deadline_s and time.perf_counter() - t_start > a.deadline_s:
            not_run.append({**asdict(s), "prologue": pro})
            continue
        r = probe(_native, a.device, s, pro, a.reps)
        rows.append(r)
        what = (f"{r['fused_engine'] or 'no engine'}: fused {r.get('fused_ms', 0):.3f} ms vs plain "
                f"{r.get('plain_ms', 0):.3f} ms, sums repeat {r.get('sums_repeat')}, var err "
                f"{r.get('var_rel_err', 0):.1e}" if "error" not in r else r["error"])
        print(f"{'sbr-' if pro else ''}conv {s.c}->{s.k} {s.r}x{s.s}/{s.stride} at {s.h}x{s.w}: {what}", flush=True)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"command": sys.argv, "model": a.model, "batch": a.batch,
                                       "resolution": a.resolution, "rows": rows, "not_run": not_run,
                                       "summary": summary(rows, counts)}, indent=1) + "\n")
    total = summary(rows, counts)
    print(json.dumps(total, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
