"""Cross-machine determinism: VGG16-BN and ResNet-50 trained 20 steps from one seed on the CUDA backend, the
SHA-256 of the weights (and of every state tensor) and the engines their convolutions used, as JSON.

Two fresh machines of one GPU model and one library stack must print the same hashes: the convolutions choose
their cuDNN engines by a rule of the GPU model, the cuDNN and frontend versions and the shape (tr.task.engines),
not by timing. Each run gets an empty plan cache (a temporary TR_CACHE_DIR) unless --cache-dir names one, so a
run sees what a fresh machine sees.

    python benchmarks/cross_machine.py --json $OUT/cross_a.json     # device call 1 (machine A)
    python benchmarks/cross_machine.py --json $OUT/cross_b.json     # device call 2 (machine B)
    python benchmarks/cross_machine.py --compare cross_a.json cross_b.json   # anywhere: the differences, if any

Autotuned engines (TR_CUDNN_AUTOTUNE=1, or --autotune) may differ between machines; recorded on one and
pinned on the other they give its bytes:

    python benchmarks/cross_machine.py --autotune --json $OUT/tuned_a.json                 # machine A
    python benchmarks/cross_machine.py --autotune --pin-from tuned_a.json --json tuned_b.json  # machine B

The configuration is tests-integration/test_gpu_cnn_training.py's (tools/testkit/op_diff.py's example and
build_task): batch 4, 32x32 inputs (``--resolution``), 10 classes, SGD with Nesterov momentum at a constant 1e-4,
seed 11; ``--precision amp,fp32`` (default both).
tests-integration/test_gpu_determinism.py runs this script in fresh processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLASSES = 10
MODELS = ("vgg16_bn", "resnet50")


def task(name: str, amp: bool, steps: int, batch: int, res: int) -> tuple[Any, list[float]]:
    """The uncompiled CUDA task of ``name`` and the list its step losses go to."""
    if str(ROOT / "tools" / "testkit") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools" / "testkit"))
    from op_diff import build_task, example

    t = build_task(example(name, CLASSES), "cuda", amp, res, batch, CLASSES, steps=steps, compiled=False)
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


def digest(arrays: dict[str, np.ndarray]) -> tuple[str, dict[str, str]]:
    """(SHA-256 over the arrays in name order, each array's own), of their bytes."""
    whole = hashlib.sha256()
    each = {}
    for k in sorted(arrays):
        b = np.ascontiguousarray(arrays[k]).tobytes()
        whole.update(k.encode() + b"\0" + b)
        each[k] = hashlib.sha256(b).hexdigest()
    return whole.hexdigest(), each


def run(name: str, amp: bool, a: argparse.Namespace, pins: dict[str, Any] | None) -> dict[str, Any]:
    from tr.task import checkpoint, engines

    t, losses = task(name, amp, a.steps, a.batch, a.resolution)
    t0 = time.perf_counter()
    if pins is not None:
        with engines.pinned(t, pins):
            t.compile()
    else:
        t.compile()
    compile_s = time.perf_counter() - t0
    t.run()
    weights_sha, _ = digest(t.weights())
    state = {f"{x.name}#{x.id}": t.backend.read(x) for x in checkpoint.state_tensors(t.program)}
    state_sha, tensors = digest(state)
    used = engines.used(t)
    return {"weights_sha256": weights_sha, "state_sha256": state_sha, "losses": losses, "steps": len(losses),
            "compile_s": compile_s, "sources": engines.sources(used), "engines": used, "state_tensors": tensors}


def environment() -> dict[str, Any]:
    from tr.backend.cuda import build_info, cuda_status

    return {"host": platform.node(), "python": platform.python_version(), "cuda": cuda_status()[1],
            "build": {k: v for k, v in build_info().items() if k in ("version", "cuda_archs", "cuda_compiler")},
            "tree": os.environ.get("TR_TREE_HASH"),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("TR_CUDNN", "TR_CONV", "CUDNN_"))}}


def compare(path_a: Path, path_b: Path) -> int:
    from tr.task.engines import differences

    a, b = (json.loads(Path(p).read_text()) for p in (path_a, path_b))
    bad = 0
    for key in sorted(a["runs"].keys() | b["runs"].keys()):
        ra, rb = a["runs"].get(key), b["runs"].get(key)
        if ra is None or rb is None:
            print(f"{key}: only in {path_a if rb is None else path_b}")
            bad += 1
            continue
        same = ra["state_sha256"] == rb["state_sha256"]
        print(f"{key}: weights {ra['weights_sha256'][:16]} / {rb['weights_sha256'][:16]}, state "
              f"{'identical' if same else 'DIFFERENT'}")
        if not same:
            bad += 1
            first = next(k for k in ra["state_tensors"] if ra["state_tensors"][k] != rb["state_tensors"].get(k))
            step = next((i for i, (x, y) in enumerate(zip(ra["losses"], rb["losses"])) if x != y), None)
            print(f"  first differing tensor {first}; losses first differ at step {step}")
        for line in differences(ra["engines"], rb["engines"]):
            print(f"  {line}")
    return 1 if bad else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    ap.add_argument("--precision", default="amp,fp32", help="comma-separated: amp, fp32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--resolution", type=int, default=32, help="a multiple of 32")
    ap.add_argument("--autotune", action="store_true", help="time cuDNN's candidates (TR_CUDNN_AUTOTUNE=1)")
    ap.add_argument("--pin-from", type=Path, help="pin the engines this earlier JSON recorded, run by run")
    ap.add_argument("--cache-dir", type=Path, help="the plan cache's directory (default: a fresh empty one)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two JSONs and exit")
    a = ap.parse_args(argv)
    a.model_list = [m.strip() for m in a.models.split(",") if m.strip()]
    a.precisions = [p.strip() for p in a.precision.split(",") if p.strip()]
    if a.compare is None:
        for m in a.model_list:
            if m not in MODELS:
                ap.error(f"--models: {m!r} is not one of {', '.join(MODELS)}")
        for p in a.precisions:
            if p not in ("amp", "fp32"):
                ap.error(f"--precision: {p!r} is not amp or fp32")
        if a.steps < 1 or a.batch < 1 or a.resolution < 32 or a.resolution % 32:
            ap.error("--steps and --batch must be >= 1 and --resolution a multiple of 32")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.compare:
        return compare(*a.compare)
    if a.autotune:
        os.environ["TR_CUDNN_AUTOTUNE"] = "1"
    os.environ.setdefault("TR_CONV", "cudnn")  # no silent direct kernels: cuDNN or an error
    recorded = json.loads(a.pin_from.read_text())["runs"] if a.pin_from else None
    with tempfile.TemporaryDirectory(prefix="tr-plans-") as fresh:
        os.environ["TR_CACHE_DIR"] = str(a.cache_dir or fresh)
        out: dict[str, Any] = {"environment": environment(), "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k not in ("json", "compare")},
            "runs": {}}
        for name in a.model_list:
            for p in a.precisions:
                key = f"{name}/{p}"
                pins = None
                if recorded is not None:
                    if key not in recorded:
                        raise SystemExit(f"--pin-from {a.pin_from} has no run {key}")
                    pins = recorded[key]["engines"]
                r = run(name, p == "amp", a, pins)
                out["runs"][key] = r
                print(f"{key}: weights sha256 {r['weights_sha256']}, state {r['state_sha256'][:16]}, "
                      f"{len(r['engines']['convolutions'])} conv plans {r['sources']}, loss "
                      f"{r['losses'][0]:.5f} -> {r['losses'][-1]:.5f}, compile {r['compile_s']:.1f} s", flush=True)
    print(json.dumps({k: {"weights_sha256": v["weights_sha256"], "state_sha256": v["state_sha256"]}
                      for k, v in out["runs"].items()}))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
