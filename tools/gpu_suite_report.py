"""tools/gpu_suite.py's results: each test's outcome from the plugin's events, the summary (JSON and the printed
lines that end a device call's output), the failures' details and the measured durations."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

# every status a test can end with, in the summary's order
STATUSES = ("passed", "failed", "error", "crashed", "timed_out", "cut", "not_run", "not_collected", "skipped",
            "xfailed", "xpassed")
BAD = ("failed", "error", "crashed", "timed_out", "not_collected")  # the failures (--rerun-failed takes these)
LABEL = {"failed": "FAILED", "error": "ERROR", "crashed": "CRASHED", "timed_out": "TIMED OUT",
         "not_collected": "NOT COLLECTED", "cut": "CUT"}
SUMMARY_FILE, FAILURES_FILE, DURATIONS_FILE = "gpu_suite_summary.json", "gpu_suite_failures.txt", \
    "gpu_suite_durations.json"
PRINT_CHARS = 7000  # the printed summary's failure lines stop here (all of them in the JSON): a device call
PRINT_NOT_RUN = 15  # returns the last 12,000 characters of its output
MSG_CHARS = 240


def status_of(phases: dict[str, dict]) -> tuple[str, dict | None]:
    """A test's status from its phases' reports (pytest's rules: a failed setup or teardown is an error, a failed
    call a failure), and the report that says why."""
    setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
    if call and call["outcome"] == "failed":
        return "failed", call
    for p in (setup, teardown):
        if p and p["outcome"] == "failed":
            return "error", p
    for p in (setup, call):
        if p and p["outcome"] == "skipped":
            return ("xfailed" if p.get("xfail") else "skipped"), p
    if call and call.get("xfail"):
        return "xpassed", call
    return "passed", None


def outcomes(events: list[dict]) -> tuple[dict[str, dict], str | None, set[str]]:
    """From one process's events: the finished tests' records, the test it was running when it ended (None: it
    ended between tests), and the selected ids it did not collect."""
    phases: dict[str, dict[str, dict]] = {}
    done: dict[str, dict] = {}
    running: str | None = None
    missing: set[str] = set()
    for e in events:
        ev = e["ev"]
        if ev == "start":
            phases[e["id"]], running = {}, e["id"]
        elif ev == "report":
            phases.setdefault(e["id"], {})[e["when"]] = e
        elif ev == "finish":
            ps = phases.get(e["id"], {})
            status, why = status_of(ps)
            rec: dict[str, Any] = {"status": status, "dur": round(sum(p["dur"] for p in ps.values()), 3)}
            if why is not None:
                rec["msg"] = why.get("msg", "")
                if why.get("detail"):
                    rec["detail"] = why["detail"]
            done[e["id"]] = rec
            running = None
        elif ev == "missing":
            missing |= set(e["ids"])
    return done, running, missing


def stack_section(stacks: str, nodeid: str) -> str:
    """The stack dumps written while ``nodeid`` ran (after its last marker line, before the next)."""
    marker = f"=== {nodeid} ===\n"
    at = stacks.rfind(marker)
    if at < 0:
        return ""
    rest = stacks[at + len(marker):]
    end = rest.find("\n=== ")
    return (rest if end < 0 else rest[:end]).strip()[-8000:]


def summarize(results: dict[str, dict], infos: list[dict], collect_errors: list[dict], phash: str, runner: Any,
              estimated_s: float, complete: bool) -> dict:
    counts = {s: 0 for s in STATUSES}
    for r in results.values():
        counts[r["status"]] += 1
    failures = [{"id": e["id"], "status": "error", "msg": e["msg"]} for e in collect_errors]
    failures += [{"id": t, "status": r["status"], "msg": r.get("msg", ""), "dur": r.get("dur")}
                 for t, r in results.items() if r["status"] in BAD]
    cut = [{"id": t, "status": "cut", "msg": r.get("msg", "")} for t, r in results.items() if r["status"] == "cut"]
    skipped: dict[str, int] = {}
    for r in results.values():
        if r["status"] == "skipped":
            skipped[r.get("msg", "")] = skipped.get(r.get("msg", ""), 0) + 1
    timed = sorted(((r["dur"], t) for t, r in results.items() if r.get("dur") is not None), reverse=True)
    return {
        "run_id": runner.run_id, "complete": complete, "plan": phash, "tree": os.environ.get("TR_TREE_HASH", ""),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "wall_s": round(time.monotonic() - runner.t0, 1),
        "budget_s": runner.args.budget, "test_timeout_s": runner.args.test_timeout, "shards": infos,
        "tests": len(results), "counts": counts, "collect_errors": len(collect_errors), "failures": failures,
        "cut": [c["id"] for c in cut], "cut_detail": cut,
        "not_run": [t for t, r in results.items() if r["status"] == "not_run"],
        "xpassed": [t for t, r in results.items() if r["status"] == "xpassed"],
        "skipped_by_reason": skipped,
        "estimated_s": round(estimated_s, 1),
        "slowest": [[t, d] for d, t in timed[:30]],
        "statuses": {t: r["status"] for t, r in results.items()},
    }


def kept_summaries(work: Path, tree: str) -> list[dict]:
    """The summaries kept in ``work`` (one a run) of the tree ``tree``, oldest first."""
    out = []
    for p in sorted(work.glob("summary_*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name)):
        s = json.loads(p.read_text())
        if s.get("tree", "") == tree and "statuses" in s:
            out.append(s)
    return out


def latest(summaries: list[dict]) -> dict[str, tuple[str, str]]:
    """Each test's status and message in the last of ``summaries`` that has it (the round so far)."""
    out: dict[str, tuple[str, str]] = {}
    for s in summaries:
        msgs = {f["id"]: f.get("msg", "") for f in s["failures"] + s.get("cut_detail", [])}
        for t, status in s["statuses"].items():
            out[t] = (status, msgs.get(t, ""))
    return out


def _count_line(counts: dict[str, int]) -> str:
    """'3 passed, 1 failed, 0 not run': every status with a count, and passed, failed and not run always."""
    return ", ".join(f"{counts[k]} {k.replace('_', ' ')}" for k in STATUSES
                     if counts[k] or k in ("passed", "failed", "not_run"))


def format_summary(s: dict) -> str:
    lines = [f"\n========== GPU suite summary: plan {s['plan']}, tree {s['tree'] or '-'}"
             f"{'' if s['complete'] else ' (INCOMPLETE)'} =========="]
    for i in s["shards"]:
        lines.append(f"shard {i['shard']}: {i['tests']} tests, {i['processes']} pytest process(es), {i['wall_s']} s"
                     + (f"; CUT by {i['cut']}" if i["cut"] else ""))
    lines.append(f"{s['tests']} tests: {_count_line(s['counts'])}; {s['collect_errors']} collection errors; "
                 f"wall {s['wall_s']:.0f} s of {s['budget_s']:.0f} s (estimated {s['estimated_s']:.0f} s)")
    listed = s["failures"] + s["cut_detail"]
    used = 0
    for k, f in enumerate(listed):
        line = f"{LABEL[f['status']]} {f['id']}: {_one_line(f['msg'])}"
        used += len(line) + 1
        if used > PRINT_CHARS:
            lines.append(f"... and {len(listed) - k} more (all in {SUMMARY_FILE})")
            break
        lines.append(line)
    if s["not_run"]:
        head = s["not_run"][:PRINT_NOT_RUN]
        more = f" ... and {len(s['not_run']) - len(head)} more" if len(s["not_run"]) > len(head) else ""
        lines.append(f"NOT RUN ({len(s['not_run'])}, never started): {', '.join(head)}{more}")
    for reason, n in sorted(s["skipped_by_reason"].items(), key=lambda kv: -kv[1])[:5]:
        lines.append(f"skipped {n}: {_one_line(reason)[:150]}")
    if s["slowest"]:
        lines.append("slowest: " + "; ".join(f"{d:.1f} s {t}" for t, d in s["slowest"][:8]))
    rnd = s.get("round")
    if rnd and rnd["runs"] > 1:  # every run of this tree kept on this machine: the suite so far
        rc = {k: 0 for k in STATUSES}
        for status, _ in rnd["latest"].values():
            rc[status] += 1
        lines.append(f"ROUND (this tree, {rnd['runs']} runs kept here; each test's last outcome): "
                     f"{len(rnd['latest'])} tests: {_count_line(rc)}")
        here = {f["id"] for f in s["failures"]}
        for t, (status, msg) in rnd["latest"].items():
            if status in BAD and t not in here:
                line = f"  earlier: {LABEL[status]} {t}: {_one_line(msg)}"
                used += len(line) + 1
                if used > PRINT_CHARS + 2500:
                    lines.append(f"  ... (all in the runs' {SUMMARY_FILE})")
                    break
                lines.append(line)
    return "\n".join(lines)


def _one_line(msg: str) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= MSG_CHARS else msg[:MSG_CHARS - 3] + "..."


def write_outputs(summary: dict, results: dict[str, dict], collect_errors: list[dict], out: Path, work: Path,
                  printed: bool = False) -> None:
    """The summary, the failures' details (collection errors first) and the durations under ``out`` (the summary
    also as ``work``/last_summary.json); printed when ``printed``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    shutil.copyfile(out / SUMMARY_FILE, work / "last_summary.json")
    # every run's own file (rewritten while it runs): the round's view, --rerun-failed all, --resume
    (work / f"summary_{summary['run_id']}.json").write_text(json.dumps(summary) + "\n")
    chunks = [f"{'=' * 30} COLLECTION ERROR {e['id']}\n{e['msg']}\n\n{e.get('detail', '')}\n" for e in collect_errors]
    for t, r in results.items():
        if r["status"] in BAD or r["status"] == "cut":
            chunks.append(f"{'=' * 30} {LABEL[r['status']]} {t}\n{r.get('msg', '')}\n\n{r.get('detail', '')}\n")
    (out / FAILURES_FILE).write_text("".join(chunks) or "no failures\n")
    # (not the skipped: a run on a machine whose CUDA failed would record every test at 0 s)
    timed = {t: r["dur"] for t, r in results.items() if r.get("dur") is not None and r["status"] != "skipped"}
    (out / DURATIONS_FILE).write_text(json.dumps({"tree": summary["tree"], "plan": summary["plan"], "tests": timed},
                                                 indent=1, sort_keys=True) + "\n")
    if printed:
        kept = kept_summaries(work, summary["tree"])
        print(format_summary({**summary, "round": {"runs": len(kept), "latest": latest(kept)}}), flush=True)
