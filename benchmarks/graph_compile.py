"""Compile time and arena size of the example models (tr.graph; CPU only, nothing executes).

    python benchmarks/graph_compile.py            # one JSON line per result

For each model: the first compile in a fresh process (imports excluded) and the best of three more,
with the plan checker on (as compile_program runs by default); the arena size of our plan, of the seed's
allocation scheme for the same model, and of our tensors without reuse.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import time
from pathlib import Path

from tr.graph.compiler import compile_with_plan
from tr.graph.seed_scheme import seed_arena_bytes
from tr.graph.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = [  # (model, batch, resolution, amp)
    ("mlp_mnist", 128, 28, False),
    ("mlp_mnist", 128, 28, True),
    ("vgg16_bn", 256, 224, True),
    ("resnet50", 256, 224, True),
    ("resnet50", 256, 224, False),
]


def _models():
    spec = importlib.util.spec_from_file_location("examples_models", ROOT / "examples" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    models = _models()
    device = f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    date = datetime.date.today().isoformat()
    for name, batch, res, amp in WORKLOADS:
        bp = getattr(models, name)
        spec = CompileSpec(bp.input_shape, bp.num_classes, batch, train_resolution=res, amp=amp)
        workload = f"{name} batch {batch} res {res} {'amp' if amp else 'fp32'}"
        t = time.perf_counter()
        c = compile_with_plan(bp, spec)
        first = time.perf_counter() - t
        best = min(compile_with_plan(bp, spec).seconds for _ in range(3))
        m = c.program.meta
        seed = seed_arena_bytes(c.arch, spec, c.program)
        for metric, value in (("compile_seconds_first", round(first, 4)), ("compile_seconds_best_of_3", round(best, 4)),
                              ("arena_bytes", m["arena_bytes"]), ("seed_scheme_arena_bytes", seed),
                              ("no_reuse_arena_bytes", m["no_reuse_bytes"]), ("pooled_bytes", m["pooled_bytes"]),
                              ("pooled_lower_bound_bytes", m["pooled_lower_bound"]), ("num_ops", c.program.num_ops),
                              ("num_tensors", len(c.program.tensors))):
            print(json.dumps({"framework": "tr", "workload": workload, "metric": metric, "value": value,
                              "device": device, "date": date}))


if __name__ == "__main__":
    main()
