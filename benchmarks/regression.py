"""No-regression check of a refactor (issue [15]): tr's own figures from this tree and from an older tree, built
side by side on one machine and measured in one call, pair by pair.

Each pair runs the same benchmark of each tree, the trees taking turns (new, old, then old, new in the next round,
so that a drift of the machine does not favour one side): ``benchmarks/cnn.py --skip-torch`` (tr's row: images/s
and arena bytes) for each of ``--models``, and ``benchmarks/mlp_mnist.py`` for the MNIST MLP with the data set in
the arena (``--tr-device-augment``, its only tr row: epochs/s). Each tree runs its own benchmark script with its own
build on PYTHONPATH, in a process of its own. Verdict per workload: the median of the new tree's rounds lies no more
than ``--tolerance`` (3 %) below the old tree's, its arena is no larger, and both trees skip the same timed steps
(FP16 overflows: the same plan skips the same steps, so such rows still compare).

    python benchmarks/regression.py --old-root build/device/old-84bb0c5 --old-site /tmp/site-old-84bb0c5 --json auto

On the H200 the stage ``regress`` of benchmarks/h200_session.sh unpacks each old tree (carried as
.oldtree/NAME.tar, made here by ``git archive OLD packages benchmarks examples tools``), builds it with its own
h200_session.sh into its own site, and runs this script:

    git archive 84bb0c5 packages benchmarks examples tools > .oldtree/84bb0c5.tar
    REGRESS_OLD=84bb0c5 bash benchmarks/h200_session.sh build regress          # carry .whl, .devdata, .oldtree
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CNN_MODELS = ("vgg16_bn", "resnet50", "mobilenet_v2", "efficientnet_b0")
MLP = "mlp_mnist"


def bench_command(root: Path, workload: str, out: Path, a: argparse.Namespace) -> list[str]:
    """The benchmark of tree ``root`` for ``workload``, writing its JSON to ``out``."""
    if workload == MLP:
        return [sys.executable, str(root / "benchmarks" / "mlp_mnist.py"), "--epochs", str(a.mlp_epochs),
                "--workers", "", "--skip-torch", "--gpu-twin-epochs", "0", "--tr-device-augment", "--json", str(out),
                *(["--device", "cpu"] if a.smoke else [])]
    smoke = ["--device", "cpu", "--resolution", "32", "--batch", "4", "--classes", "10", "--warmup", "1",
             "--host-steps", "0"] if a.smoke else []
    return [sys.executable, str(root / "benchmarks" / "cnn.py"), "--model", workload, "--skip-torch",
            "--steps", str(a.steps), *smoke, "--json", str(out)]


KEPT = ("ms_per_step", "compile_s", "launches_per_step", "ops", "skipped_steps_timed", "last_loss", "loss_scale_end",
        "conv_sources", "engines")  # from cnn.py's tr row, for the reader who must explain a difference


def figure(workload: str, doc: Any) -> dict:
    """The one figure of a benchmark's JSON, with the arena bytes and what else explains it where the benchmark gives
    them. A tr row with skipped steps still counts (its time is the same plan's on both trees; the verdict asks for
    the same skips on both sides)."""
    if workload == MLP:
        rows = [r for r in doc["rows"] if r.get("framework") == "tr-device" and r.get("metric") == "epochs_per_s"]
        if not rows:
            raise ValueError("no tr-device row in mlp_mnist's JSON")
        r = rows[0]
        return {"value": float(r["value"]), "unit": "epochs/s", "arena_bytes": r.get("arena_bytes"),
                **{k: r[k] for k in ("step_us", "launches_per_step", "best_top1") if k in r}}
    tr = doc["results"]["tr"]
    if "images_per_s" not in tr:
        raise ValueError(f"tr's row has no figure: {tr.get('error', tr)}")
    return {"value": float(tr["images_per_s"]), "unit": "images/s", "arena_bytes": int(tr["arena_bytes"]),
            **{k: tr[k] for k in KEPT if k in tr}}


def run_one(tree: str, root: Path, site: str, workload: str, a: argparse.Namespace, timeout: float) -> dict:
    """One benchmark of one tree in a process of its own (PYTHONPATH: that tree's build only)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "bench.json"
        env = {**os.environ, "PYTHONPATH": site}
        t0 = time.perf_counter()
        try:
            p = subprocess.run(bench_command(root, workload, out, a), cwd=root, env=env, timeout=timeout,
                               capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {"tree": tree, "workload": workload, "error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - t0
        if p.returncode != 0 or not out.exists():
            tail = (p.stdout + p.stderr)[-1500:]
            return {"tree": tree, "workload": workload, "wall_s": wall, "error": f"rc {p.returncode}: {tail}"}
        try:
            return {"tree": tree, "workload": workload, "wall_s": wall, **figure(workload, json.loads(out.read_text()))}
        except (ValueError, KeyError) as e:
            return {"tree": tree, "workload": workload, "wall_s": wall, "error": str(e)}


def verdicts(runs: list[dict], tolerance: float) -> list[dict]:
    """Per workload: each tree's median, the ratio new/old, the arena bytes, pass or fail."""
    out = []
    for w in dict.fromkeys(r["workload"] for r in runs):
        side = {t: [r for r in runs if r["workload"] == w and r["tree"] == t and "value" in r] for t in ("new", "old")}
        if not side["new"] or not side["old"]:
            out.append({"workload": w, "verdict": "INCOMPLETE",
                        "errors": [r["error"] for r in runs if r["workload"] == w and "error" in r]})
            continue
        med = {t: statistics.median(r["value"] for r in rs) for t, rs in side.items()}
        arena = {t: rs[0].get("arena_bytes") for t, rs in side.items()}
        ratio = med["new"] / med["old"]
        arena_ok = None in arena.values() or arena["new"] <= arena["old"]
        skips = {t: sorted({r.get("skipped_steps_timed", 0) for r in rs}) for t, rs in side.items()}
        out.append({"workload": w, "unit": side["new"][0]["unit"], "new": med["new"], "old": med["old"],
                    "new_runs": [r["value"] for r in side["new"]], "old_runs": [r["value"] for r in side["old"]],
                    "ratio": ratio, "arena_new": arena["new"], "arena_old": arena["old"], "skipped_timed": skips,
                    "verdict": "PASS" if ratio >= 1 - tolerance and arena_ok and skips["new"] == skips["old"]
                    else "FAIL"})
    return out


def table(summary: list[dict]) -> str:
    lines = ["| workload | new | old | new / old | arena new | arena old | verdict |", "|---|---|---|---|---|---|---|"]
    for s in summary:
        if s["verdict"] == "INCOMPLETE":
            lines.append(f"| {s['workload']} | | | | | | INCOMPLETE |")
            continue
        lines.append(f"| {s['workload']} | {s['new']:,.1f} {s['unit']} | {s['old']:,.1f} | {s['ratio']:.3f} | "
                     f"{s['arena_new'] or '-'} | {s['arena_old'] or '-'} | {s['verdict']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-root", type=Path, required=True, help="the old tree's checkout (its benchmarks/)")
    ap.add_argument("--old-site", required=True, help="the old tree's build: its PYTHONPATH (folders joined by ':')")
    ap.add_argument("--new-site", default="/tmp/site",
                    help="this tree's build: its PYTHONPATH (default /tmp/site, h200_session.sh's)")
    ap.add_argument("--models", default=",".join((*CNN_MODELS, MLP)), help="comma-separated workloads")
    ap.add_argument("--rounds", type=int, default=1, help="pairs per workload (sides alternate first)")
    ap.add_argument("--steps", type=int, default=50, help="cnn.py's timed steps")
    ap.add_argument("--mlp-epochs", type=int, default=100)
    ap.add_argument("--tolerance", type=float, default=0.03, help="the new tree may be this much slower")
    ap.add_argument("--run-timeout", type=float, default=240.0, help="seconds one benchmark may take")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="> 0: start no pair after this many seconds")
    ap.add_argument("--json", help="write the runs and the verdicts here, or 'auto'")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke test: 32 px, batch 4, a few steps, 1 MLP epoch")
    a = ap.parse_args(argv)
    workloads = [w for w in a.models.split(",") if w]
    unknown = set(workloads) - {*CNN_MODELS, MLP}
    if unknown or a.rounds < 1:
        raise SystemExit(f"--models takes {', '.join((*CNN_MODELS, MLP))} and --rounds >= 1; got {sorted(unknown)}, "
                         f"{a.rounds}")
    if a.smoke:
        a.steps, a.mlp_epochs = min(a.steps, 2), 1
    for p in (a.old_root / "benchmarks" / "cnn.py", *(Path(d) for s in (a.old_site, a.new_site)
                                                        for d in s.split(os.pathsep))):
        if not p.exists():
            raise SystemExit(f"{p} does not exist")
    absolute = {s: os.pathsep.join(str(Path(d).resolve()) for d in s.split(os.pathsep))
                for s in (a.old_site, a.new_site)}
    trees = {"new": (ROOT, absolute[a.new_site]), "old": (a.old_root.resolve(), absolute[a.old_site])}
    t_start = time.perf_counter()
    runs: list[dict] = []
    not_run: list[str] = []
    out = None
    if a.json:
        day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        out = HERE / "results" / f"regression_{day}.json" if a.json == "auto" else Path(a.json)
    def write() -> None:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({
                "command": sys.argv, "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "tree": os.environ.get("TR_TREE_HASH"), "old_root": str(a.old_root), "tolerance": a.tolerance,
                "runs": runs, "not_run": not_run, "summary": verdicts(runs, a.tolerance)}, indent=1) + "\n")

    for rnd in range(a.rounds):
        for i, w in enumerate(workloads):
            if a.deadline_s and time.perf_counter() - t_start > a.deadline_s:
                not_run.append(f"{w} round {rnd + 1}")
                continue
            order = ("new", "old") if (rnd + i) % 2 == 0 else ("old", "new")
            for tree in order:
                root, site = trees[tree]
                r = run_one(tree, root, site, w, a, a.run_timeout)
                runs.append({**r, "round": rnd + 1})
                shown = f"{r['value']:,.1f} {r['unit']}" if "value" in r else f"error: {r['error'][:300]}"
                print(f"[{w}] {tree}: {shown}", flush=True)
            write()
    write()
    summary = verdicts(runs, a.tolerance)
    print(table(summary))
    if not_run:
        print(f"not run (deadline): {', '.join(not_run)}")
    return 0 if summary and all(s["verdict"] == "PASS" for s in summary) and not not_run else 1


if __name__ == "__main__":
    sys.exit(main())
