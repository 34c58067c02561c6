"""benchmarks/convergence.py's verdicts, table and JSON: per (model, precision) the final top-1 of each framework
over seeds and their difference (MNIST), and tr's mean loss curve against its twin's seed band (ResNet-50)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TOLERANCE_POINTS = 0.15  # |tr mean - twin mean| of the final top-1, in percentage points (the bound)
MIN_SEEDS = 3  # seeds a side for a complete comparison
FIRST_EPOCH_SKIPS = 24  # AMP: steps the first epoch may skip while the loss scale comes down from 65536
GROWTH_INTERVAL = 2000  # clean steps before the dynamic scale doubles: each doubling may cost one skipped step
FRAMEWORKS = ("tr", "pytorch")


def stats(values: Iterable[float]) -> dict[str, Any] | None:
    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    if not v:
        return None
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else None
    return {"n": len(v), "mean": mean, "std": std, "min": min(v), "max": max(v)}


def steps_applied(epochs: list[dict], steps_per_epoch: int) -> dict[str, Any]:
    """Whether every step after the loss scale's first calibration was applied: at most FIRST_EPOCH_SKIPS skipped
    in the first epoch, and later at most one a GROWTH_INTERVAL steps (a doubled scale that overflows once)."""
    skips = [int(e["skipped_steps"]) for e in epochs]
    later_allowed = (steps_per_epoch * max(0, len(skips) - 1)) // GROWTH_INTERVAL
    first, later = (skips[0] if skips else 0), sum(skips[1:])
    return {"skipped_first_epoch": first, "skipped_later": later, "skipped_later_allowed": later_allowed,
            "ok": first <= FIRST_EPOCH_SKIPS and later <= later_allowed}


def run_key(r: dict) -> tuple:
    return r["part"], r["framework"], r["model"], r["precision"], r["seed"]


def finished(r: dict) -> bool:
    return r.get("error") is None and bool(r.get("epochs"))


# --- MNIST: final top-1 ---------------------------------------------------------------------------------

def summarize_top1(runs: list[dict]) -> list[dict]:
    out = []
    groups = sorted({(r["model"], r["precision"]) for r in runs if r["part"] == "mnist"})
    for model, precision in groups:
        row: dict[str, Any] = {"model": model, "precision": precision}
        for fw in FRAMEWORKS:
            rs = [r for r in runs if r["part"] == "mnist" and r["framework"] == fw and r["model"] == model
                  and r["precision"] == precision and finished(r)]
            row[fw] = {"seeds": sorted(r["seed"] for r in rs),
                       "final_top1": stats(r["epochs"][-1]["val_top1"] for r in rs),
                       "best_top1": stats(max(e["val_top1"] for e in r["epochs"]) for r in rs),
                       "final_train_loss": stats(r["epochs"][-1]["train_loss"] for r in rs),
                       "all_steps_applied": all(r["applied"]["ok"] for r in rs),
                       "errors": [r["error"] for r in runs if r["part"] == "mnist" and r["framework"] == fw
                                  and r["model"] == model and r["precision"] == precision and r.get("error")]}
        a, b = row["tr"]["final_top1"], row["pytorch"]["final_top1"]
        diff = 100.0 * (a["mean"] - b["mean"]) if a and b else None
        row["diff_points"] = diff
        row["tolerance_points"] = TOLERANCE_POINTS
        row["within_tolerance"] = None if diff is None else abs(diff) <= TOLERANCE_POINTS
        row["complete"] = bool(a and b and a["n"] >= MIN_SEEDS and b["n"] >= MIN_SEEDS)
        row["valid"] = row["tr"]["all_steps_applied"] and row["pytorch"]["all_steps_applied"]
        row["verdict"] = _verdict(row)
        out.append(row)
    return out


def _verdict(row: dict) -> str:
    if row["diff_points"] is None:
        return "incomplete: a side has no finished run"
    if not row["valid"]:
        return "invalid: a run skipped steps after its first epoch's loss-scale calibration"
    ok = "PASS" if row["within_tolerance"] else "FAIL"
    return ok if row["complete"] else f"{ok} (fewer than {MIN_SEEDS} seeds a side: not the issue's measure)"


# --- ResNet-50: loss curves -----------------------------------------------------------------------------

def summarize_curves(runs: list[dict]) -> list[dict]:
    """Per (model, precision) of the image-folder part: at every epoch tr's mean training loss against the
    twin's seeds: its min..max and its mean +- 2 std (the verdict's band; with 3 seeds min..max lies inside it)."""
    out = []
    groups = sorted({(r["model"], r["precision"]) for r in runs if r["part"] == "imagenet"})
    for model, precision in groups:
        sides = {fw: [r for r in runs if r["part"] == "imagenet" and r["framework"] == fw and r["model"] == model
                      and r["precision"] == precision and finished(r)] for fw in FRAMEWORKS}
        n_epochs = min((len(r["epochs"]) for rs in sides.values() for r in rs), default=0)
        points = []
        for e in range(n_epochs):
            trs = stats(r["epochs"][e]["train_loss"] for r in sides["tr"])
            tws = stats(r["epochs"][e]["train_loss"] for r in sides["pytorch"])
            p: dict[str, Any] = {"epoch": e + 1, "tr": trs, "pytorch": tws}
            if trs and tws and tws["std"] is not None:
                lo, hi = tws["mean"] - 2 * tws["std"], tws["mean"] + 2 * tws["std"]
                p.update(band=[lo, hi], inside_band=lo <= trs["mean"] <= hi,
                         inside_min_max=tws["min"] <= trs["mean"] <= tws["max"])
            points.append(p)
        judged = [p for p in points if "inside_band" in p]
        valid = all(r["applied"]["ok"] for rs in sides.values() for r in rs)
        verdict = ("incomplete: fewer than 2 twin seeds or a side without a finished run" if not judged or
                   len(judged) < len(points) else
                   "invalid: a run skipped steps after its first epoch" if not valid else
                   "PASS" if all(p["inside_band"] for p in judged) else
                   f"FAIL at epochs {[p['epoch'] for p in judged if not p['inside_band']]}")
        out.append({"model": model, "precision": precision, "seeds": {fw: sorted(r["seed"] for r in rs)
                                                                     for fw, rs in sides.items()},
                    "final_val_top1": {fw: stats(r["epochs"][-1]["val_top1"] for r in rs) for fw, rs in sides.items()},
                    "curve": points, "valid": valid, "verdict": verdict})
    return out


# --- printing -------------------------------------------------------------------------------------------

def _pct(s: dict | None) -> str:
    if not s:
        return "-"
    spread = f", sd {100 * s['std']:.3f}" if s["std"] is not None else ""
    return f"{100 * s['mean']:.3f} ({100 * s['min']:.2f}..{100 * s['max']:.2f}{spread}; n={s['n']})"


def table(runs: list[dict], top1: list[dict], curves: list[dict]) -> str:
    lines = []
    if runs:
        lines.append("runs: part framework model precision seed | final top-1 | final train loss | skipped "
                     "(first epoch / later) | setup s | train s")
        for r in sorted(runs, key=run_key):
            if not finished(r):
                lines.append(f"  {r['part']:8} {r['framework']:7} {r['model']:12} {r['precision']:4} {r['seed']:>3} | "
                             f"not finished: {r.get('error')}")
                continue
            last, ap = r["epochs"][-1], r["applied"]
            lines.append(f"  {r['part']:8} {r['framework']:7} {r['model']:12} {r['precision']:4} {r['seed']:>3} | "
                         f"{100 * last['val_top1']:6.2f} % | {last['train_loss']:.4f} | "
                         f"{ap['skipped_first_epoch']} / {ap['skipped_later']} | {r['setup_s']:6.1f} | "
                         f"{sum(e['seconds'] for e in r['epochs']):6.1f}")
    if top1:
        lines.append("")
        lines.append(f"final top-1 % over seeds (mean (min..max, sd; n)); tr - pytorch in points, bound "
                     f"{TOLERANCE_POINTS}")
        for row in top1:
            d = row["diff_points"]
            lines.append(f"  {row['model']:12} {row['precision']:4} tr {_pct(row['tr']['final_top1'])} | pytorch "
                         f"{_pct(row['pytorch']['final_top1'])} | diff {'-' if d is None else f'{d:+.3f}'} | "
                         f"{row['verdict']}")
    for c in curves:
        lines.append("")
        lines.append(f"{c['model']} {c['precision']}: training loss a epoch, tr mean against the twin's seeds "
                     f"(tr seeds {c['seeds']['tr']}, pytorch seeds {c['seeds']['pytorch']})")
        for p in c["curve"]:
            t, w = p["tr"], p["pytorch"]
            band = f"[{p['band'][0]:.4f}, {p['band'][1]:.4f}] {'in' if p['inside_band'] else 'OUT'}" \
                if "band" in p else "no band"
            lines.append(f"  epoch {p['epoch']:>3}: tr {t['mean'] if t else math.nan:.4f} | pytorch "
                         f"{w['mean'] if w else math.nan:.4f} ({w['min'] if w else math.nan:.4f}.."
                         f"{w['max'] if w else math.nan:.4f}) | mean+-2sd {band}")
        lines.append(f"  final val top-1: tr {_pct(c['final_val_top1']['tr'])}, pytorch "
                     f"{_pct(c['final_val_top1']['pytorch'])}; verdict: {c['verdict']}")
    return "\n".join(lines)


# --- JSON -----------------------------------------------------------------------------------------------

def document(meta: dict, runs: list[dict], not_run: list[dict]) -> dict:
    return {**meta, "runs": sorted(runs, key=run_key), "not_run": not_run,
            "summary_top1": summarize_top1(runs), "summary_curves": summarize_curves(runs)}


def write_json(path: Path, doc: dict) -> None:
    """Written beside and renamed over: a call cut off mid-write leaves the previous whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    os.replace(tmp, path)


def merge(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """The runs of several JSONs of this script (later files win for the same run) and their sources."""
    runs: dict[tuple, dict] = {}
    sources = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        if "runs" not in doc:
            raise SystemExit(f"{p}: not a JSON of benchmarks/convergence.py (no 'runs')")
        for r in doc["runs"]:
            runs[run_key(r)] = r
        sources.append({"path": str(p), "command": doc.get("command"), "environment": doc.get("environment")})
    return list(runs.values()), sources
