"""Where a captured training step spends its time, op by op (CUDA backend).

Compiles a model as benchmarks/vgg16_bn.py does (or the MNIST MLP), runs one epoch so every graph is built,
then captures every op of the full-batch training step ALONE in its own graph and times ``--reps`` launches
of it between two events. The per-op times add up to a little more than the whole step (each op then runs
without its neighbours' overlap and pays one launch), which ``step`` reports beside them.

    python benchmarks/step_profile.py --model vgg16_bn --batch 64 --top 25 --json profile.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


def build(a: argparse.Namespace):
    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    if a.model == "vgg16_bn":
        from vgg16_bn import synthetic, tr_model

        model, res, ch, classes = tr_model(a.classes), a.resolution, 3, a.classes
    else:
        sys.path.insert(0, str(ROOT.parent))
        from vgg16_bn import synthetic

        from examples.models import mlp_mnist

        model, res, ch, classes = mlp_mnist, 28, 1, 10
    dtype = np.float16 if a.amp else np.float32
    x, y = synthetic(2 * a.batch, res, classes, dtype, 123)
    if ch == 1:
        x = x[..., :1].copy()
    feeder = ArrayFeeder((x, y), None, a.batch, shuffle=False, drop_last=True, dtype=dtype, num_classes=classes)
    task = (DeepLearningTask(Settings().amp(a.amp).manual_seed(123).global_batch_size(a.batch)).device("cuda")
            .quiet().model(model).loss(CrossEntropyLoss().label_smoothing(0.1))
            .optimizer(SGD().momentum(0.9).nesterov(True).weight_decay(1e-4))
            .scheduler(ConstantLR().base_lr(1e-3)).total_epochs(1).data(feeder))
    task.compile()
    task.run()
    return task


def profile(task, reps: int) -> tuple[list[dict], float]:
    from tr.backend.base import serial_calls
    from tr.task.executor import branches, train_step_branches

    be, prog = task.backend, task.program
    calls = serial_calls(branches(prog, "train", train_step_branches(0, False)))
    start, stop = be.event(), be.event()
    rows = []
    for i, call in enumerate(calls):
        g = be.capture(f"op{i}", [call])
        if g.graph is None:  # nothing to run (e.g. a one-rank all-reduce)
            continue
        be.launch(g)
        be.synchronize()
        start.record(1)
        for _ in range(reps):
            be.launch(g)
        stop.record(1)
        stop.synchronize()
        ms = stop.elapsed_ms(start) / reps
        rows.append({"index": i, "op": call.op, "layer": call.layer, "label": call.label,
                     "info": "; ".join(o.info for o in g.ops if o.info), "ms": ms})
    step_ms = task.time_train_step(reps, 3) * 1e3
    return rows, step_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("vgg16_bn", "mlp_mnist"), default="vgg16_bn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    t0 = time.perf_counter()
    task = build(a)
    print(f"compiled and ran one epoch in {time.perf_counter() - t0:.1f} s")
    rows, step_ms = profile(task, a.reps)
    total = sum(r["ms"] for r in rows)
    by_op: dict[str, float] = defaultdict(float)
    for r in rows:
        by_op[r["op"]] += r["ms"]
    print(f"\nwhole step {step_ms:.3f} ms; ops alone add up to {total:.3f} ms over {len(rows)} ops\n")
    print("by op kind:")
    for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:22s} {ms:9.3f} ms  {100 * ms / total:5.1f} %")
    print(f"\ntop {a.top} ops:")
    for r in sorted(rows, key=lambda r: -r["ms"])[:a.top]:
        print(f"  {r['ms']:8.3f} ms  L{r['layer']:<3d} {r['op']:18s} {r['label'][:28]:28s} {r['info'][:70]}")
    if a.json:
        a.json.write_text(json.dumps({"command": sys.argv, "step_ms": step_ms, "ops": rows,
                                      "by_op": by_op}, indent=1))


if __name__ == "__main__":
    main()
