"""tools/gpu_suite.py, the GPU suite's runner, on a fake suite (CPU): a few "gpu"-marked tests that pass, one that
fails, one that sleeps past the run's limit (or hangs past the per-test timeout), one that crashes the process, a
module that does not import, a test without the mark. The summary must name the failure with its first error
line, the test cut by the limit and every test that never started, also when the runner itself is stopped by
SIGTERM (what `timeout` sends); a hung or crashed test must cost only itself; --rerun-failed must run exactly the
failures; the shards must balance the recorded seconds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from gpu_suite import estimate, merge_durations, plan_hash, plan_shards, rerun_ids, resume_ids  # noqa: E402
from gpu_suite_report import STATUSES, format_summary  # noqa: E402

FAKE = {
    "pytest.ini": "[pytest]\nmarkers =\n    gpu: fake\n",
    "tests/test_a.py": """
import pytest
pytestmark = pytest.mark.gpu

@pytest.mark.parametrize("x", [1, 2, 3])
def test_passes(x):
    assert x * x >= x

def test_fails():
    print("output of the failing test")
    assert 1 + 1 == 3, "the fake failure"

@pytest.mark.skip(reason="a fake skip")
def test_skipped():
    pass
""",
    "tests/test_b.py": """
import time, pytest

@pytest.mark.gpu
def test_sleeps():
    time.sleep(60)

def test_not_gpu():
    raise AssertionError("a test without the gpu mark must not run")
""",
    "tests/test_c.py": """
import pytest
pytestmark = pytest.mark.gpu

def test_after_1():
    pass

def test_after_2():
    pass
""",
    "tests/test_d.py": """
import os, pytest
pytestmark = pytest.mark.gpu

def test_crashes():
    os.abort()

def test_after_the_crash():
    pass
""",
    "tests/test_e.py": "import pytest\nimport no_such_module_anywhere\npytestmark = pytest.mark.gpu\n\n"
                       "def test_never_collected():\n    pass\n",
}


def fake_suite(root: Path) -> Path:
    for name, text in FAKE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def runner(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "tools" / "gpu_suite.py"), "--root", str(tmp_path / "suite"), "--out",
            str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--durations", str(tmp_path / "none.json"), *args]


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "gpu_suite_summary.json").read_text())


def test_a_cut_run_names_the_failure_the_cut_test_and_every_test_never_run(tmp_path):
    fake_suite(tmp_path / "suite")
    t0 = time.monotonic()
    r = subprocess.run(runner(tmp_path, "--budget", "6", "tests/test_a.py", "tests/test_b.py", "tests/test_c.py",
                              "tests/test_e.py"), capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 10 and r.returncode == 1, r.stdout + r.stderr
    s = summary(tmp_path)
    c = s["counts"]
    assert (c["passed"], c["failed"], c["skipped"], c["cut"], c["not_run"]) == (3, 1, 1, 1, 2)
    assert s["tests"] == 8 and s["complete"] and s["collect_errors"] == 1  # test_not_gpu never selected
    failures = {f["id"]: f for f in s["failures"]}
    assert failures["tests/test_a.py::test_fails"]["msg"] == "AssertionError: the fake failure (test_a.py:11)"
    assert "No module named 'no_such_module_anywhere'" in failures["tests/test_e.py"]["msg"]
    assert s["cut"] == ["tests/test_b.py::test_sleeps"]
    assert s["not_run"] == ["tests/test_c.py::test_after_1", "tests/test_c.py::test_after_2"]
    # the printed summary (the end of a device call's output) says all of it
    tail = r.stdout[r.stdout.index("GPU suite summary"):]
    assert "8 tests: 3 passed, 1 failed, 1 cut, 2 not run, 1 skipped; 1 collection errors" in tail
    assert "FAILED tests/test_a.py::test_fails: AssertionError: the fake failure (test_a.py:11)" in tail
    assert "CUT tests/test_b.py::test_sleeps: running at the time limit" in tail and 'test_b.py", line 6' in tail
    assert "NOT RUN (2, never started): tests/test_c.py::test_after_1, tests/test_c.py::test_after_2" in tail
    details = (tmp_path / "out" / "gpu_suite_failures.txt").read_text()
    assert "output of the failing test" in details and "no_such_module_anywhere" in details
    durations = json.loads((tmp_path / "out" / "gpu_suite_durations.json").read_text())["tests"]
    assert sorted(durations) == sorted([f"tests/test_a.py::test_passes[{x}]" for x in (1, 2, 3)] + [
        "tests/test_a.py::test_fails"])  # not the skipped one
    assert all(0.0 <= v < 2.0 for v in durations.values())


def test_a_hung_or_crashed_test_costs_only_itself_and_reruns_take_exactly_the_failures(tmp_path):
    fake_suite(tmp_path / "suite")
    r = subprocess.run(runner(tmp_path, "--budget", "40", "--test-timeout", "1.5", "tests/test_a.py",
                              "tests/test_b.py", "tests/test_c.py", "tests/test_d.py"),
                       capture_output=True, text=True, timeout=60)
    s = summary(tmp_path)
    c = s["counts"]
    assert (c["passed"], c["failed"], c["timed_out"], c["crashed"], c["not_run"]) == (6, 1, 1, 1, 0), r.stdout
    assert s["shards"][0]["processes"] == 3  # a new process after the hang and after the crash
    failures = {f["id"]: f for f in s["failures"]}
    assert failures["tests/test_b.py::test_sleeps"]["msg"].startswith("no result after 1.5 s (hung?); File ")
    assert failures["tests/test_d.py::test_crashes"]["msg"].startswith(
        "the process died (signal SIGABRT) after 0 s: Fatal Python error: Aborted; File ")
    first = set(failures)
    r = subprocess.run(runner(tmp_path, "--budget", "40", "--test-timeout", "1.5", "--rerun-failed", "last"),
                       capture_output=True, text=True, timeout=60)
    s = summary(tmp_path)
    assert s["shards"][0]["shard"] == "rerun" and s["tests"] == 3 and {f["id"] for f in s["failures"]} == first
    assert s["counts"]["passed"] == 0, r.stdout
    # the printed summary ends with the round so far: each test's last outcome over both runs
    assert ("ROUND (this tree, 2 runs kept here; each test's last outcome): 10 tests: 6 passed, 1 failed, "
            "1 crashed, 1 timed out, 0 not run, 1 skipped") in r.stdout


def test_sigterm_stops_the_run_and_still_writes_the_summary(tmp_path):
    fake_suite(tmp_path / "suite")
    proc = subprocess.Popen(runner(tmp_path, "--budget", "60", "tests/test_a.py", "tests/test_b.py",
                                   "tests/test_c.py"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the sleeping test has started
        events = "".join(p.read_text() for p in (tmp_path / "work").glob("*shard*.events.jsonl"))
        if '"ev": "start", "id": "tests/test_b.py::test_sleeps"' in events:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    s = summary(tmp_path)
    assert s["counts"]["passed"] == 3 and s["counts"]["failed"] == 1 and s["shards"][0]["cut"] == "SIGTERM"
    assert s["cut"] == ["tests/test_b.py::test_sleeps"] and len(s["not_run"]) == 2
    assert "CUT tests/test_b.py::test_sleeps: running at SIGTERM" in out and "NOT RUN (2, never started)" in out


def test_shards_balance_recorded_seconds_and_keep_a_module_together():
    ids = [f"a.py::t{k}" for k in range(4)] + [f"b.py::t{k}" for k in range(6)] + ["c.py::t0", "d.py::t0"]
    durations = {"default_s": 1.0, "modules": {"b.py": 2.0}, "tests": {"a.py::t0": 9.0, "c.py::t0": 5.0}}
    assert estimate(durations, "a.py::t0") == 9.0 and estimate(durations, "b.py::t3") == 2.0
    assert estimate(durations, "d.py::t0") == 1.0  # neither measured nor estimated: the default
    shards = plan_shards(ids, durations, 2)  # modules of 12, 12, 5 and 1 s: a + c and b + d (the best split)
    assert sorted(t for s in shards for t in s) == sorted(ids)
    assert [sum(estimate(durations, t) for t in s) for s in shards] == [17.0, 13.0]
    assert all(s == sorted(s, key=ids.index) for s in shards)  # collection order within a shard
    for module in ("a.py", "b.py"):  # each module in one shard
        assert sum(any(t.startswith(module) for t in s) for s in shards) == 1
    # modules above a shard's share (10 s) are cut into consecutive chunks of at most that; the same inputs give the
    # same plan
    three = plan_shards(ids, durations, 3)
    assert plan_shards(ids, durations, 3) == three
    assert three[0] == ["a.py::t0", "a.py::t1"] and three[1] == [f"b.py::t{k}" for k in range(5)]
    assert [sum(estimate(durations, t) for t in s) for s in three] == [10.0, 10.0, 10.0]
    assert plan_hash(ids, durations, 3) != plan_hash(ids, {**durations, "default_s": 2.0}, 3)
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        plan_shards(ids, durations, 0)


def test_merged_durations_replace_estimates_and_drop_tests_of_removed_files(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    target = tmp_path / "gpu_durations.json"
    target.write_text(json.dumps({"default_s": 1.5, "modules": {"tests/test_x.py": 4.0},
                                  "tests": {"tests/gone.py::t": 3.0, "tests/test_x.py::a": 9.0}}))
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"tests": {"tests/test_x.py::a": 2.345, "tests/test_x.py::b": 0.5}}))
    assert merge_durations(target, [run], tmp_path) == 2
    d = json.loads(target.read_text())
    assert d["tests"] == {"tests/test_x.py::a": 2.35, "tests/test_x.py::b": 0.5}
    assert d["default_s"] == 1.5 and d["modules"] == {"tests/test_x.py": 4.0}


def test_reruns_and_resumes_take_each_test_s_last_outcome_over_the_runs_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TR_TREE_HASH", "tree1")

    def kept(name: str, statuses: dict[str, str], tree: str = "tree1") -> Path:
        bad = [{"id": t, "msg": f"{s} here"} for t, s in statuses.items() if s in ("failed", "error", "crashed")]
        path = tmp_path / name
        path.write_text(json.dumps({"tree": tree, "statuses": statuses, "failures": bad, "cut_detail": [],
                                    "cut": [t for t, s in statuses.items() if s == "cut"],
                                    "not_run": [t for t, s in statuses.items() if s == "not_run"]}))
        return path

    first = kept("summary_a.json", {"m.py::a": "failed", "m.py::b": "passed", "m.py::c": "cut", "n.py::d": "not_run"})
    kept("summary_old.json", {"z.py::z": "failed"}, tree="tree0")  # another tree's run: not this round's
    kept("summary_b.json", {"m.py::a": "passed", "m.py::c": "crashed", "n.py::e": "not_run"})
    assert rerun_ids(["all"], tmp_path, False) == ["m.py::c"]  # m.py::a failed, then passed
    assert rerun_ids(["all"], tmp_path, True) == ["m.py::c", "n.py::d", "n.py::e"]
    assert resume_ids(tmp_path) == ["n.py::d", "n.py::e"]
    assert rerun_ids([str(first)], tmp_path, True) == ["m.py::a", "m.py::c", "n.py::d"]
    with pytest.raises(SystemExit, match="no summary at"):
        rerun_ids([str(tmp_path / "nothing.json")], tmp_path, False)
    monkeypatch.setenv("TR_TREE_HASH", "tree2")
    assert resume_ids(tmp_path) is None  # no run of this tree: everything runs
    with pytest.raises(SystemExit, match="no summary of this tree"):
        rerun_ids(["all"], tmp_path, False)


def test_the_printed_summary_fits_what_a_device_call_returns():
    """A device call returns its output's last 12,000 characters: however many failures, the printed summary
    stays within them and says where the rest are."""
    failures = [{"id": f"tests-integration/test_x.py::test_{k}[{'p' * 60}]", "status": "failed",
                 "msg": "AssertionError: " + "x" * 1000} for k in range(300)]
    s = {"plan": "p", "tree": "t", "complete": True, "shards": [{"shard": "1/1", "tests": 900, "processes": 1,
                                                                   "wall_s": 500.0, "cut": ""}],
         "counts": dict.fromkeys(STATUSES, 0),
         "tests": 900, "collect_errors": 0, "failures": failures, "cut_detail": [], "cut": [],
         "not_run": [f"tests-integration/test_y.py::test_{k}" for k in range(300)], "skipped_by_reason": {},
         "slowest": [], "wall_s": 500.0, "budget_s": 535.0, "estimated_s": 400.0}
    text = format_summary(s)
    assert len(text) < 9000 and "FAILED tests-integration/test_x.py::test_0[" in text
    assert "more (all in gpu_suite_summary.json)" in text and "NOT RUN (300, never started)" in text
