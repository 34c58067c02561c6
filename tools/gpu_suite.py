#!/usr/bin/env python3
"""The GPU test suite (``pytest -m gpu``) in shards that fit a device call, with a summary that names every failure
even when a shard is cut off by its time limit.

    python tools/gpu_suite.py                          # every GPU test of packages/ and tests-integration/
    python tools/gpu_suite.py --shard 2/3              # shard 2 of 3 (GPU_SHARD=2/3 does the same)
    python tools/gpu_suite.py --shard 1,2/3            # shards 1 and 2 of 3, one after the other
    python tools/gpu_suite.py --resume                 # what this tree's earlier runs (kept in --work) left unrun
                                                       # (everything where none is kept)
    python tools/gpu_suite.py --rerun-failed S.json    # only the failures of earlier summaries: files, "last" (the
                                                       # last kept in --work) or "all" (this tree's runs kept there,
                                                       # each test's last outcome)
    python tools/gpu_suite.py --rerun-failed S.json --with-not-run   # ... and the tests a cut left unrun
    python tools/gpu_suite.py --plan --shard all/3     # the shards and their estimated seconds; runs nothing
    python tools/gpu_suite.py --merge-durations OUT/gpu_suite_durations.json   # refresh benchmarks/gpu_durations.json

On the H200 it runs as stage ``gpusuite`` of benchmarks/h200_session.sh (GPU_SHARD, GPUSUITE_ARGS).

How: the GPU tests are listed (``pytest --collect-only -m gpu``) and split into N shards balanced by the seconds
benchmarks/gpu_durations.json records for them (a module's tests stay together unless the module alone is more
than a shard's share; a test without a record gets its module's estimate, else ``default_s``); the split depends
only on the tests and that file, so each call of a round computes the same shards (the summary prints the plan's
hash: compare it across the calls of a round, and merge new durations only after a round). A shard runs as one
pytest process with tools/gpu_suite_plugin.py, which writes every test's start and outcome to an events file as it
happens. A test still running after --test-timeout seconds (hung) has every thread's stack dumped and its process
ended, and a crash (SIGSEGV, abort) ends it too: either way the runner names the test, keeps its stacks and starts
a new process for the tests not yet started. At --budget seconds (from the runner's start, collection included)
the running shard is stopped (its stacks dumped first) and the summary still written; SIGTERM (``timeout``) does
the same. The summary: passed, failed and errors (each with its first error line), crashed, timed out, cut (running
at the limit), not run (never started), not collected, skipped; the wall time. Printed last (the part of a device
call's output that comes back) and written under --out:
    gpu_suite_summary.json    the summary, every test id in it (also kept in --work: last_summary.json, and
                              summary_<run>.json for --rerun-failed all, --resume and the round's view: after the
                              first run of a tree, the printed summary ends with every test's last outcome over
                              this tree's runs kept there, so the last call of a round names all its failures)
    gpu_suite_failures.txt    each failure's traceback, captured output or stacks (tail)
    gpu_suite_durations.json  the seconds of every test that ran, skips aside (setup + call + teardown; a hung
                              test: its timeout), for --merge-durations
Exit status: 0 when every test that ran passed, was skipped or xfailed and none was left unrun, else 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from gpu_suite_report import (
    BAD,
    FAILURES_FILE,
    SUMMARY_FILE,
    kept_summaries,
    latest,
    outcomes,
    stack_section,
    summarize,
    write_outputs,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DURATIONS = ROOT / "benchmarks" / "gpu_durations.json"
RESERVE_S = (2.0, 0.05, 8.0)  # of the budget, kept for stopping a shard and writing the summary: 5 %, in [2, 8] s
MIN_START_S = (1.0, 0.1, 5.0)  # no pytest process is started with less left: 10 % of the budget, in [1, 5] s


def _share(rule: tuple[float, float, float], budget: float) -> float:
    low, frac, high = rule
    return min(high, max(low, frac * budget))


NOISE = ("/_pytest/", "/pluggy/", "<frozen runpy>", "/pytest/__main__.py")  # stack frames left out of a dump


class Stopped(Exception):
    """SIGTERM or SIGINT reached the runner: stop the shard, write the summary."""


def _stop_signal(signum: int, frame: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # once: the summary is written undisturbed
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


# --- durations and shards -------------------------------------------------------------------------------------
def no_durations() -> dict:
    """A durations file with nothing measured: every test the default second (a new dict: callers fill it)."""
    return {"default_s": 1.0, "modules": {}, "tests": {}}


def load_durations(path: Path) -> dict:
    if not path.is_file():
        return no_durations()
    d = json.loads(path.read_text())
    return {"default_s": float(d.get("default_s", 1.0)), "modules": d.get("modules", {}), "tests": d.get("tests", {})}


def estimate(durations: dict, nodeid: str) -> float:
    """A test's seconds: measured, else its module's estimate, else the default."""
    if nodeid in durations["tests"]:
        return float(durations["tests"][nodeid])
    return float(durations["modules"].get(nodeid.split("::")[0], durations["default_s"]))


def plan_shards(ids: list[str], durations: dict, n: int) -> list[list[str]]:
    """``ids`` (in collection order) in ``n`` shards of about equal estimated seconds: each module's tests together
    unless the module's estimate exceeds a shard's share (then in consecutive chunks of at most that share), the
    heaviest groups first into the lightest shard (ties: the lower shard). Each shard keeps collection order."""
    if n < 1:
        raise ValueError(f"the number of shards must be >= 1, got {n}")
    pos = {t: k for k, t in enumerate(ids)}
    modules: dict[str, list[str]] = {}
    for t in ids:
        modules.setdefault(t.split("::")[0], []).append(t)
    share = sum(estimate(durations, t) for t in ids) / n
    groups: list[list[str]] = []
    for tests in modules.values():
        chunk: list[str] = []
        for t in tests:
            if chunk and sum(estimate(durations, c) for c in chunk) + estimate(durations, t) > share:
                groups.append(chunk)
                chunk = []
            chunk.append(t)
        groups.append(chunk)
    groups.sort(key=lambda g: (-sum(estimate(durations, t) for t in g), pos[g[0]]))
    shards: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for g in groups:
        k = min(range(n), key=lambda i: (loads[i], i))
        shards[k].extend(g)
        loads[k] += sum(estimate(durations, t) for t in g)
    return [sorted(s, key=pos.__getitem__) for s in shards]


def parse_shard(spec: str) -> tuple[list[int] | None, int]:
    """"K/N", "K1,K2/N" or "all/N" (or "all": one shard): the shards to run (None: all) and N."""
    spec = spec.strip()
    if spec in ("", "all"):
        return None, 1
    which, _, n_text = spec.partition("/")
    try:
        n = int(n_text)
        ks = None if which == "all" else [int(k) for k in which.split(",")]
    except ValueError:
        raise SystemExit(f"gpu_suite: --shard must be K/N, K1,K2/N, all/N or all, got {spec!r}") from None
    if n < 1 or (ks is not None and not all(1 <= k <= n for k in ks)):
        raise SystemExit(f"gpu_suite: --shard {spec!r}: each K must be in 1..N and N >= 1")
    return ks, n


def plan_hash(ids: list[str], durations: dict, n: int) -> str:
    blob = json.dumps([n, ids, [estimate(durations, t) for t in ids]]).encode()
    return hashlib.sha1(blob).hexdigest()[:10]


# --- pytest processes ---------------------------------------------------------------------------------------
class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.root).resolve()
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget - _share(RESERVE_S, args.budget)
        self.min_start = _share(MIN_START_S, args.budget)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(HERE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env
        self.n_proc = 0
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + f"{os.getpid()}"  # names this run's files in the work folder

    def left(self) -> float:
        """Seconds until the deadline (the budget less what stopping a shard and the summary need)."""
        return self.deadline - time.monotonic()

    def _pytest(self, argv: list[str], tag: str, select: list[str] | None, echo: bool) -> dict:
        """One pytest process with the plugin: its events, exit status, whether it was cut, its output's tail."""
        self.n_proc += 1
        stem = self.work / f"{self.run_id}_{self.n_proc:03d}_{tag}"
        events, stacks = stem.with_suffix(".events.jsonl"), stem.with_suffix(".stacks.txt")
        env = dict(self.env, GPU_SUITE_EVENTS=str(events), GPU_SUITE_STACKS=str(stacks),
                   GPU_SUITE_TEST_TIMEOUT=str(self.args.test_timeout))
        if select is not None:
            sel = stem.with_suffix(".select.txt")
            sel.write_text("".join(t + "\n" for t in select))
            env["GPU_SUITE_SELECT"] = str(sel)
        for f in (events, stacks):
            f.write_text("")
        cmd = [self.args.python, "-m", "pytest", "-p", "gpu_suite_plugin", "-p", "no:cacheprovider", *argv]
        tail: deque[str] = deque(maxlen=60)
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line)
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        cut = ""
        try:
            while not _exited(proc.pid):
                if self.left() <= 0:
                    cut = "the time limit"
                    break
                time.sleep(0.1)
        except Stopped as e:  # SIGTERM/SIGINT of the runner
            cut = e.args[0]
        if cut:
            self._stop(proc, stacks)
        # what the tests started and left behind (a hang's exit leaves its children): the process is not reaped
        # yet, so its pid, the group's id, is still reserved
        _kill_group(proc.pid)
        proc.wait()
        reader.join(timeout=5)
        return {"events": _read_events(events), "stacks": stacks.read_text(errors="replace"), "rc": proc.returncode,
                "cut": cut, "tail": "".join(tail), "wall_s": time.monotonic() - t_start}

    def _stop(self, proc: subprocess.Popen, stacks: Path) -> None:
        """Dump the running test's stacks (SIGUSR1: the plugin's faulthandler; waited for up to 1.5 s), then kill
        the process group (the test's own children too). The caller reaps the process."""
        size = stacks.stat().st_size
        try:
            os.killpg(proc.pid, signal.SIGUSR1)
            t_end = time.monotonic() + 1.5
            while time.monotonic() < t_end and not _exited(proc.pid) and stacks.stat().st_size == size:
                time.sleep(0.05)
            time.sleep(0.1)  # (the dump is written in one go by the signal handler)
        except (ProcessLookupError, PermissionError):
            pass
        _kill_group(proc.pid)

    def collect(self, paths: list[str]) -> tuple[list[str], list[dict]]:
        """The GPU tests under ``paths``, in collection order, and the collection errors."""
        print(f"[gpu-suite] collecting the GPU tests of {' '.join(paths)}", flush=True)
        r = self._pytest(["--collect-only", "-q", "-m", "gpu", *paths], "collect", None, echo=False)
        collected = [e for e in r["events"] if e["ev"] == "collected"]
        errors = [{"id": e["id"], "status": "error", "msg": "collection: " + e["msg"], "detail": e.get("detail", "")}
                  for e in r["events"] if e["ev"] == "collect_error"]
        if r["cut"]:
            raise Stopped(f"{r['cut']} (during the collection)")
        if not collected:
            raise SystemExit(f"gpu_suite: collection failed (pytest exited {r['rc']}):\n{r['tail']}")
        ids = collected[-1]["ids"]
        print(f"[gpu-suite] {len(ids)} GPU tests, {len(errors)} collection errors, {r['wall_s']:.1f} s", flush=True)
        return ids, errors

    def run(self, ids: list[str], label: str) -> tuple[dict[str, dict], dict]:
        """Run ``ids``: a new process for those left after a crash or a hang, until done, cut or out of time.
        Each test's record; the shard's facts (processes, wall time, whether cut)."""
        results: dict[str, dict] = {}
        remaining = list(ids)
        info = {"shard": label, "tests": len(ids), "processes": 0, "cut": "", "wall_s": 0.0}
        t0 = time.monotonic()
        missing: set[str] = set()
        rc = None
        while remaining:
            if self.left() < self.min_start:
                info["cut"] = info["cut"] or "the time limit (no time to start)"
                break
            info["processes"] += 1
            files = sorted({t.split("::")[0] for t in remaining})
            argv = ["-v", "--tb=short", "-rfE", "--continue-on-collection-errors", *self.args.pytest_args, *files]
            print(f"[gpu-suite] shard {label}: {len(remaining)} tests, {self.left():.0f} s left "
                  f"(process {info['processes']})", flush=True)
            r = self._pytest(argv, f"shard{label.replace('/', 'of')}", remaining, echo=True)
            rc = r["rc"]
            done, running, missed = outcomes(r["events"])
            results.update(done)
            missing |= missed
            if running is not None:
                results[running] = self._unfinished(running, r)
            started = set(done) | ({running} if running else set())
            remaining = [t for t in remaining if t not in started]
            if r["cut"]:
                info["cut"] = r["cut"]
                break
            if running is None:  # pytest ended by itself: what it did not start, it will not
                break
        for t in remaining:
            if t in missing:
                results[t] = {"status": "not_collected", "msg": "not among the tests collected (its module failed "
                              "to import, or the test was renamed)"}
            else:
                why = f"cut: {info['cut']}" if info["cut"] else f"pytest (exit status {rc}) ended before starting it"
                results[t] = {"status": "not_run", "msg": why}
        info["wall_s"] = round(time.monotonic() - t0, 1)
        return results, info

    def _unfinished(self, nodeid: str, r: dict) -> dict:
        """The record of the test a process was running when it ended: cut, timed out (hung) or crashed."""
        section = "\n".join(ln for ln in stack_section(r["stacks"], nodeid).splitlines()
                            if not any(k in ln for k in NOISE))
        frame = next((ln.strip() for ln in section.splitlines() if ln.strip().startswith("File ")), "")
        started = next((e["t"] for e in r["events"] if e["ev"] == "start" and e["id"] == nodeid), None)
        ran = f"{time.time() - started:.0f} s" if started else "?"
        detail = f"{section}\n----- the process's last output -----\n{r['tail']}"
        if r["cut"]:
            return {"status": "cut", "msg": f"running at {r['cut']} (for {ran}); {frame}", "detail": detail}
        if "Timeout (" in section:
            return {"status": "timed_out", "msg": f"no result after {self.args.test_timeout:g} s (hung?); {frame}",
                    "detail": detail, "dur": float(self.args.test_timeout)}
        rc = r["rc"]
        how = f"signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exit status {rc}"
        fatal = next((ln.strip() for ln in section.splitlines() if ln.startswith("Fatal Python error")), "")
        return {"status": "crashed", "msg": f"the process died ({how}) after {ran}: {fatal or 'no Python fault'}; "
                f"{frame}", "detail": detail}


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has ended, without reaping it."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            pass
    return out


# --- durations file --------------------------------------------------------------------------------------------
def merge_durations(target: Path, runs: list[Path], root: Path) -> int:
    """Measured seconds of ``runs`` (gpu_suite_durations.json files) into ``target``; entries of test files that
    no longer exist are dropped. The count of tests updated."""
    data = json.loads(target.read_text()) if target.is_file() else no_durations()
    tests = data.setdefault("tests", {})
    n = 0
    for run in runs:
        for nodeid, secs in json.loads(run.read_text())["tests"].items():
            tests[nodeid] = round(float(secs), 2)
            n += 1
    data["tests"] = {t: s for t, s in sorted(tests.items()) if (root / t.split("::")[0]).is_file()}
    target.write_text(json.dumps(data, indent=1) + "\n")
    return n


def rerun_ids(files: list[str], work: Path, with_not_run: bool) -> list[str]:
    """The failures (and with ``with_not_run`` the cut and unrun tests) of earlier summaries: of named files, of
    "last" (the last kept in ``work``), or of "all" (each test's last outcome over the runs of this tree kept in
    ``work``: a failure that passed since is not taken)."""
    want = BAD + (("cut", "not_run") if with_not_run else ())
    ids: list[str] = []
    for f in files:
        if f == "all":
            kept = kept_summaries(work, os.environ.get("TR_TREE_HASH", ""))
            if not kept:
                raise SystemExit(f"gpu_suite: --rerun-failed all: no summary of this tree in {work}")
            ids += [t for t, (status, _) in latest(kept).items() if status in want]
            continue
        path = work / "last_summary.json" if f == "last" else Path(f)
        if not path.is_file():
            raise SystemExit(f"gpu_suite: --rerun-failed: no summary at {path}")
        s = json.loads(path.read_text())
        ids += [r["id"] for r in s["failures"] if "::" in r["id"]]  # (a module's collection error: no test id)
        if with_not_run:
            ids += s["cut"] + s["not_run"]
    return list(dict.fromkeys(ids))


def resume_ids(work: Path) -> list[str] | None:
    """The tests whose last outcome over this tree's runs kept in ``work`` is cut or not run; None where no run
    of this tree is kept (then everything runs)."""
    kept = kept_summaries(work, os.environ.get("TR_TREE_HASH", ""))
    if not kept:
        return None
    return [t for t, (status, _) in latest(kept).items() if status in ("cut", "not_run")]


def select(args: argparse.Namespace, runner: Runner, durations: dict, which: list[int] | None,
           n: int) -> tuple[list[list[str]], list[str], str, list[dict]]:
    """What this call runs: the shards (each a list of test ids), their labels, the plan's hash and the collection
    errors. --rerun-failed and --resume name their tests; otherwise the GPU tests are collected and sharded."""
    resume = resume_ids(runner.work) if args.resume else None
    if args.resume and resume is None:
        print(f"[gpu-suite] --resume: no run of this tree kept in {runner.work}: every test runs")
    if args.rerun_failed or resume is not None:
        ids = rerun_ids(args.rerun_failed, runner.work, args.with_not_run) if args.rerun_failed else []
        ids = list(dict.fromkeys(ids + (resume or [])))
        label = "+".join((["rerun"] if args.rerun_failed else []) + (["resume"] if resume is not None else []))
        print(f"[gpu-suite] {label}: {len(ids)} tests")
        return [ids], [label], plan_hash(ids, durations, 1), []
    ids, collect_errors = runner.collect(args.paths)
    phash = plan_hash(ids, durations, n)
    planned = plan_shards(ids, durations, n)
    ks = which or list(range(1, n + 1))
    for k, s in enumerate(planned, 1):
        files = len({t.split("::")[0] for t in s})
        print(f"[gpu-suite] plan {phash} shard {k}/{n}: {len(s)} tests in {files} files, about "
              f"{sum(estimate(durations, t) for t in s):.0f} s{'' if k in ks else ' (not this call)'}")
    return [planned[k - 1] for k in ks], [f"{k}/{n}" for k in ks], phash, collect_errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", default=["packages", "tests-integration"], help="where the GPU tests are")
    p.add_argument("--shard", default=os.environ.get("GPU_SHARD", "all"), help="K/N, K1,K2/N, all/N or all")
    p.add_argument("--budget", type=float, default=float(os.environ.get("GPU_SUITE_BUDGET_S", 540)),
                   help="seconds for the whole run, collection included (default 540)")
    p.add_argument("--test-timeout", type=float, default=float(os.environ.get("GPU_SUITE_TEST_TIMEOUT_S", 240)),
                   help="seconds after which a running test counts as hung (default 240; 0: never)")
    p.add_argument("--out", default=os.environ.get("OUT", "build/gpu_suite"), help="where the summary files go")
    p.add_argument("--work", default=None, help="events, stacks, the last summary (default: OUT/../gpu_suite_work)")
    p.add_argument("--durations", type=Path, default=DURATIONS)
    p.add_argument("--rerun-failed", nargs="+", metavar="SUMMARY", help="summary JSON files, 'last' or 'all'")
    p.add_argument("--with-not-run", action="store_true", help="with --rerun-failed: the cut and unrun tests too")
    p.add_argument("--resume", action="store_true",
                   help="the tests this tree's earlier runs (kept in --work) left cut or not run")
    p.add_argument("--plan", action="store_true", help="print the shards, run nothing")
    p.add_argument("--merge-durations", nargs="+", type=Path, metavar="RUN_JSON")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--root", default=str(ROOT), help="where pytest runs (the repository)")
    p.add_argument("--pytest-args", default=os.environ.get("GPU_SUITE_PYTEST_ARGS", ""),
                   help="extra pytest arguments, one string (e.g. '-s')")
    args = p.parse_args(argv)
    args.pytest_args = args.pytest_args.split()
    if args.merge_durations:
        n = merge_durations(args.durations, args.merge_durations, Path(args.root))
        print(f"[gpu-suite] {n} measured durations merged into {args.durations}")
        return 0
    out = Path(args.out).resolve()
    args.work = args.work or str(out.parent / "gpu_suite_work")
    which, n = parse_shard(args.shard)
    runner = Runner(args)
    signal.signal(signal.SIGTERM, _stop_signal)
    signal.signal(signal.SIGINT, _stop_signal)
    durations = load_durations(args.durations)
    collect_errors: list[dict] = []
    try:
        shards, labels, phash, collect_errors = select(args, runner, durations, which, n)
    except Stopped as e:  # no test ran: a summary that says so
        info = {"shard": args.shard, "tests": 0, "processes": 0, "cut": e.args[0], "wall_s": 0.0}
        write_outputs(summarize({}, [info], collect_errors, "-", runner, 0.0, complete=False), {}, collect_errors,
                      out, runner.work, printed=True)
        return 1
    if args.plan:
        return 0
    results: dict[str, dict] = {}
    infos: list[dict] = []
    stopped = ""
    for shard, label in zip(shards, labels):
        if stopped:
            results.update({t: {"status": "not_run", "msg": f"cut: {stopped}"} for t in shard})
            infos.append({"shard": label, "tests": len(shard), "processes": 0, "cut": stopped, "wall_s": 0.0})
            continue
        try:
            res, info = runner.run(shard, label)
        except Stopped as e:  # between two processes
            info = {"shard": label, "tests": len(shard), "processes": 0, "cut": e.args[0], "wall_s": 0.0}
            res = {t: {"status": "not_run", "msg": f"cut: {e.args[0]}"} for t in shard}
        results.update(res)
        infos.append(info)
        stopped = info["cut"]
        est = sum(estimate(durations, t) for t in results)
        write_outputs(summarize(results, infos, collect_errors, phash, runner, est, complete=False), results,
                      collect_errors, out, runner.work)
    est = sum(estimate(durations, t) for t in results)
    summary = summarize(results, infos, collect_errors, phash, runner, est, complete=True)
    write_outputs(summary, results, collect_errors, out, runner.work, printed=True)
    print(f"[gpu-suite] {out / SUMMARY_FILE}, {out / FAILURES_FILE}; on this machine: --resume runs what is left, "
          f"--rerun-failed all the failures (elsewhere: --rerun-failed {SUMMARY_FILE}, carried)")
    bad = any(r["status"] in BAD or r["status"] in ("cut", "not_run") for r in results.values())
    return 1 if bad or collect_errors else 0


if __name__ == "__main__":
    sys.exit(main())
