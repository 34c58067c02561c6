"""Where a captured training step spends its time, op by op, against the device's ceilings.

Compiles a model as benchmarks/cnn.py does (vgg16_bn, resnet50, mobilenet_v2, efficientnet_b0, vit_b_16: its
AdamW) or the MNIST MLP, runs one epoch so every graph is built, then captures every op of the full-batch training
step ALONE in its own graph and times ``--reps`` launches of it between two events (CUDA; on the CPU backend a wall
clock, for smoke tests only). The per-op times add up to a little more than the whole step (each op then runs without
its neighbours' overlap and pays one graph launch, a few microseconds, which dominates the smallest ops),
which ``step`` reports beside them.

For every op the table gives what it must move and compute, from the op call in the compiled Program:
* bytes: the sum of its tensor arguments' sizes on the device (channel padding included), inputs and outputs,
  an ``inout`` argument counted twice (read and written), a span (range ops) by its byte range; what
  the op reads or writes more than once (a two-pass reduction, a conv re-reading its input) is not counted,
  so achieved GB/s is a lower bound of the traffic;
* FLOPs, for convolutions, fully connected layers and attention only: 2*N*P*Q*K*C*R*S per direction (conv_bwd:
  dgrad, when it has dx, plus wgrad; a ViT's per-token linear layers are 1x1 convs), 2*N*in*out for an FC (fc_bwd:
  dW plus dX when it has dx), attention's matrix products 4*N*T*T*D forward (QK^T and PV) and 10*N*T*T*D
  backward (QK^T recomputed, dV, dP, dQ, dK), whatever engine runs them;
* achieved GB/s and TFLOP/s, and their percentages of the ceilings ``--peak-gbs`` (default 4300: the H200's
  measured device-to-device copy, bytes read + written) and ``--peak-tflops`` (default 790: its measured dense
  FP16/BF16 tensor rate; pass the FP32 figure for --no-amp runs);
* ops that read a skip flag (the optimizer, the flagged BN statistics copy) are timed with it cleared, so
  they do their work whatever the relaunched ops before them left in the gradients;
* the backend's ``info`` for the op (which engine ran: cuDNN plan, cuBLASLt epilogue, direct kernel), where
  the backend exposes one.

Op kinds are not hard-coded: rows are grouped by the op's catalogue name (new ops and attributes, e.g. a
bn_fwd with a fused activation and residual input, appear under their own name and count their extra
tensors), and a summary by op name is printed last.

    python benchmarks/step_profile.py --model vgg16_bn --batch 64 --top 25 --json profile.json
    python benchmarks/step_profile.py --model resnet50 --batch 256 --json profile_resnet50.json
    python benchmarks/step_profile.py --model mlp_mnist --batch 128
    python benchmarks/step_profile.py --model vit_b_16 --batch 256 --amp-dtype bf16 --json profile_vit_b_16.json
    python benchmarks/step_profile.py --device cpu --model resnet50 --batch 2 --resolution 32 --classes 10 \\
        --no-amp --reps 1                                                 # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MODELS = ("vgg16_bn", "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "mlp_mnist")


def build(a: argparse.Namespace) -> Any:
    from cnn import VIT_BETAS, VIT_WD, synthetic, tr_model

    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD, AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    if a.model == "mlp_mnist":
        sys.path.insert(0, str(HERE.parent))
        from examples.models import mlp_mnist

        model, res, ch, classes = mlp_mnist, 28, 1, 10
    else:
        model, res, ch, classes = tr_model(a.classes, a.model), a.resolution, 3, a.classes
    mode = a.amp_dtype if a.amp else "off"
    dtype = np.float16 if mode == "fp16" else np.float32
    x, y = synthetic(2 * a.batch, res, classes, dtype, 123)
    if ch == 1:
        x = x[..., :1].copy()
    feeder = ArrayFeeder((x, y), None, a.batch, shuffle=False, drop_last=True, num_classes=classes,
                         dtype="bfloat16" if mode == "bf16" else dtype)
    opt = (AdamW().betas(*VIT_BETAS).weight_decay(VIT_WD) if a.model.startswith("vit") else
           SGD().momentum(0.9).nesterov(True).weight_decay(1e-4))
    task = (DeepLearningTask(Settings().amp(mode).manual_seed(123).global_batch_size(a.batch)).device(a.device)
            .quiet().model(model).loss(CrossEntropyLoss().label_smoothing(0.1))
            .optimizer(opt)
            .scheduler(ConstantLR().base_lr(1e-3)).total_epochs(1).data(feeder))
    task.compile()
    task.run()
    return task


# --- what an op call moves and computes ---------------------------------------------------------------

def tensor_bytes(t: Any) -> int:
    """Bytes of a DTensor in the device layout (channels padded to pad_c), else its compact size."""
    try:
        n, h, w, _ = t.shape.dims
        return int(n * h * w * t.padded_c * t.dtype.itemsize)
    except (AttributeError, ValueError, TypeError):
        return int(getattr(t, "nbytes", 0))


def call_bytes(call: Any, layout: Any) -> tuple[int, int]:
    """(bytes read, bytes written) of an op call, from its arguments' roles in the catalogue."""
    from tr.core.memory import Span
    from tr.core.ops import CATALOGUE

    opdef = CATALOGUE.get(call.op)
    roles = {arg.name: arg.role for arg in opdef.args} if opdef is not None else {}
    read = written = 0
    for name, v in call.args.items():
        if v is None:
            continue
        if isinstance(v, Span):
            lo, hi = layout.span(v)
            size = hi - lo
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            size = tensor_bytes(v)
        else:
            continue
        role = roles.get(name, "in")
        if role in ("in", "inout"):
            read += size
        if role in ("out", "inout"):
            written += size
    return read, written


def call_flops(call: Any) -> float:
    """Multiply-add FLOPs (2 per MAC) of conv and fc calls; 0 for every other op."""
    args = call.args

    def numel(name: str) -> int:
        t = args.get(name)
        return 0 if t is None else int(np.prod(t.shape.dims))

    if call.op in ("conv_fwd", "conv_bwd"):
        w = args["w"].shape.dims  # K, R, S, C
        per_out = int(w[1] * w[2] * w[3])
        out = numel("y") if call.op == "conv_fwd" else numel("dy")  # N*P*Q*K
        passes = 1 if call.op == "conv_fwd" else 1 + (args.get("dx") is not None)  # wgrad (+ dgrad)
        return 2.0 * out * per_out * passes
    if call.op in ("fc_fwd", "fc_bwd"):
        n = args["x"].shape.n
        passes = 1 if call.op == "fc_fwd" else 1 + (args.get("dx") is not None)  # dW (+ dX)
        return 2.0 * n * numel("w") * passes
    if call.op in ("attention_fwd", "attention_bwd"):
        n, _, t, d = args["y"].shape.dims  # [N, 1, T, D]
        return (4.0 if call.op == "attention_fwd" else 10.0) * n * t * t * d
    return 0.0


# --- timing -----------------------------------------------------------------------------------------

def empty(g: Any) -> bool:
    """Nothing to run (e.g. a one-rank all-reduce): a CUDA graph without native graph, a CPU graph without steps."""
    if hasattr(g, "graph"):
        return g.graph is None
    return not getattr(g, "steps", True)


def time_graph(be: Any, g: Any, reps: int) -> float:
    """Milliseconds per launch of ``g``: device events where the backend has streams, else a wall clock."""
    be.launch(g)
    be.synchronize()
    if be.streams:  # every backend has event(); the CPU's refuses (it launches synchronously)
        start, stop = be.event(), be.event()
        start.record(g.stream)
        for _ in range(reps):
            be.launch(g)
        stop.record(g.stream)
        stop.synchronize()
        return stop.elapsed_ms(start) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        be.launch(g)
    be.synchronize()
    return (time.perf_counter() - t0) * 1e3 / reps


def clear_flags(be: Any, call: Any) -> list[str]:
    """Zero the skip flags an op reads (the optimizer, the flagged BN statistics copy): alone and relaunched, the
    op would otherwise see whatever flag the repeated ops before it left and may skip its work."""
    from tr.core.ops import CATALOGUE

    opdef = CATALOGUE.get(call.op)
    cleared = []
    for arg in opdef.args if opdef is not None else ():
        v = call.args.get(arg.name)
        if "flag" in arg.name and arg.role == "in" and v is not None and hasattr(v, "shape"):
            be.write(v, np.zeros(v.numel, v.dtype.np_dtype))
            cleared.append(arg.name)
    return cleared


def profile(task: Any, reps: int) -> tuple[list[dict], float]:
    be, prog = task.backend, task.program
    calls = prog.step("train_a").calls
    rows = []
    for i, call in enumerate(calls):
        g = be.capture(f"op{i}", [call])
        if empty(g):
            continue
        cleared = clear_flags(be, call)
        ms = time_graph(be, g, reps)
        read, written = call_bytes(call, prog.layout)
        info = "; ".join(str(o.info) for o in getattr(g, "ops", None) or [] if getattr(o, "info", ""))
        attrs = {k: v for k, v in call.attrs.items() if v is not None}
        rows.append({"index": i, "op": call.op, "layer": call.layer, "label": call.label, "attrs": attrs,
                     "info": info, "ms": ms, "bytes_read": read, "bytes_written": written,
                     "bytes": read + written, "flops": call_flops(call), "flags_cleared": cleared})
    step_ms = task.time_train_step(reps, 3) * 1e3
    return rows, step_ms


def rates(ms: float, nbytes: float, flops: float, a: argparse.Namespace) -> dict[str, float]:
    s = ms / 1e3
    gbs = nbytes / s / 1e9 if s > 0 else 0.0
    tflops = flops / s / 1e12 if s > 0 else 0.0
    return {"gb_s": gbs, "pct_bw": 100 * gbs / a.peak_gbs, "tflop_s": tflops, "pct_flops": 100 * tflops / a.peak_tflops}


def describe(attrs: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in attrs.items() if k in ("activation", "kind", "kernel", "stride", "rule"))


def print_tables(rows: list[dict], step_ms: float, a: argparse.Namespace) -> dict[str, dict]:
    total = sum(r["ms"] for r in rows)
    for r in rows:
        r.update(rates(r["ms"], r["bytes"], r["flops"], a))
    head = (f"{'ms':>8} {'%':>5} {'layer':>5} {'op':<16} {'MB':>9} {'GB/s':>7} {'%bw':>5} {'GFLOP':>8} "
            f"{'TFLOP/s':>7} {'%pk':>5}  label / attrs / info")

    def line(r: dict) -> str:
        fl = f"{'':8} {'':7} {'':5}"
        if r["flops"]:
            fl = f"{r['flops'] / 1e9:8.2f} {r['tflop_s']:7.1f} {r['pct_flops']:5.1f}"
        what = " ".join(x for x in (r["label"][:24], describe(r["attrs"]), r["info"][:60]) if x)
        return (f"{r['ms']:8.3f} {100 * r['ms'] / total:5.1f} {r['layer']:5d} {r['op']:<16} {r['bytes'] / 1e6:9.2f} "
                f"{r['gb_s']:7.0f} {r['pct_bw']:5.1f} {fl}  {what}")

    print(f"\nevery op of the step, in order (peaks: {a.peak_gbs:.0f} GB/s, {a.peak_tflops:.0f} TFLOP/s):")
    print(head)
    for r in rows:
        print(line(r))
    if a.top:
        print(f"\ntop {a.top} ops by time:")
        print(head)
        for r in sorted(rows, key=lambda r: -r["ms"])[:a.top]:
            print(line(r))
    by_op: dict[str, dict] = defaultdict(lambda: {"count": 0, "ms": 0.0, "bytes": 0, "flops": 0.0, "infos": {}})
    for r in rows:
        g = by_op[r["op"]]
        g["count"] += 1
        g["ms"] += r["ms"]
        g["bytes"] += r["bytes"]
        g["flops"] += r["flops"]
        key = " ".join(r["info"].split()[:2]) if r["info"] else ""
        if key:
            g["infos"][key] = g["infos"].get(key, 0) + 1
    for g in by_op.values():
        g.update(rates(g["ms"], g["bytes"], g["flops"], a))
    print(f"\nsummary by op (whole step {step_ms:.3f} ms; ops alone add up to {total:.3f} ms over {len(rows)} ops; "
          f"{a.model} batch {a.batch}{'' if a.model == 'mlp_mnist' else f' {a.resolution}x{a.resolution}'} "
          f"{('AMP BF16' if a.amp_dtype == 'bf16' else 'AMP') if a.amp else 'FP32'}):")
    print(f"{'op':<22} {'n':>4} {'ms':>9} {'%':>5} {'GB':>8} {'GB/s':>7} {'%bw':>5} {'TFLOP':>7} {'TFLOP/s':>7} "
          f"{'%pk':>5}  engines")
    for op, g in sorted(by_op.items(), key=lambda kv: -kv[1]["ms"]):
        fl = f"{'':7} {'':7} {'':5}"
        if g["flops"]:
            fl = f"{g['flops'] / 1e12:7.3f} {g['tflop_s']:7.1f} {g['pct_flops']:5.1f}"
        infos = ", ".join(f"{k} x{n}" for k, n in sorted(g["infos"].items(), key=lambda kv: -kv[1]))
        print(f"{op:<22} {g['count']:4d} {g['ms']:9.3f} {100 * g['ms'] / total:5.1f} {g['bytes'] / 1e9:8.3f} "
              f"{g['gb_s']:7.0f} {g['pct_bw']:5.1f} {fl}  {infos[:70]}")
    tb = sum(g["bytes"] for g in by_op.values())
    tf = sum(g["flops"] for g in by_op.values())
    t = rates(total, tb, tf, a)
    print(f"{'all ops':<22} {len(rows):4d} {total:9.3f} {100.0:5.1f} {tb / 1e9:8.3f} {t['gb_s']:7.0f} "
          f"{t['pct_bw']:5.1f} {tf / 1e12:7.3f} {t['tflop_s']:7.1f} {t['pct_flops']:5.1f}")
    return dict(by_op)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=MODELS, default="vgg16_bn")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--amp-dtype", choices=("fp16", "bf16"), default="fp16", help="AMP's 16-bit type")
    ap.add_argument("--reps", type=int, default=10, help="timed launches per op (after one untimed)")
    ap.add_argument("--top", type=int, default=25, help="also list the N slowest ops (0: no such list)")
    ap.add_argument("--peak-gbs", type=float, default=4300.0, help="memory ceiling, GB/s (bytes read + written)")
    ap.add_argument("--peak-tflops", type=float, default=790.0, help="compute ceiling, TFLOP/s")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.device == "cpu" and a.amp and a.amp_dtype == "fp16":
        ap.error("FP16 AMP needs --device cuda: pass --no-amp or --amp-dtype bf16 with --device cpu")
    if min(a.batch, a.reps) < 1:
        ap.error("--batch and --reps must be >= 1")
    t0 = time.perf_counter()
    task = build(a)
    print(f"compiled and ran one epoch in {time.perf_counter() - t0:.1f} s ({a.model}, batch {a.batch}, "
          f"backend {task.backend.name})", flush=True)
    rows, step_ms = profile(task, a.reps)
    from tr.core.errors import TrError
    from tr.task.executor import scalar

    flag = None
    try:
        flag = int(scalar(task.backend, task.program, "nan_flag")[0])
    except (TrError, KeyError, IndexError):
        pass
    by_op = print_tables(rows, step_ms, a)
    if flag:
        print("note: the NaN flag was set after profiling (ops relaunched alone on their own outputs); the ops "
              "that read a skip flag ran with it cleared (flags_cleared in the JSON)")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "command": sys.argv, "model": a.model, "batch": a.batch, "resolution": a.resolution, "amp": a.amp,
            "amp_dtype": a.amp_dtype if a.amp else None,
            "device": a.device, "peak_gbs": a.peak_gbs, "peak_tflops": a.peak_tflops, "step_ms": step_ms,
            "ops_total_ms": sum(r["ms"] for r in rows), "nan_flag_after": flag, "by_op": by_op, "ops": rows},
            indent=1, default=str) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
