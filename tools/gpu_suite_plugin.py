"""The pytest plugin of tools/gpu_suite.py (loaded there with ``-p gpu_suite_plugin``, tools/ on PYTHONPATH).

It writes one JSON line per event to ``GPU_SUITE_EVENTS`` as it happens (flushed at once, so a process killed by a
time limit, a crash or a hang leaves every outcome so far on disk): the items collected, collection errors, each
test's start, each phase's report (setup, call, teardown: outcome, seconds, the first error line and the tail of
the traceback and captured output) and its finish. ``GPU_SUITE_SELECT``: a file of node ids, one a line; the
collected items not in it are deselected (in pytest's order, so module fixtures are shared as usual).
``GPU_SUITE_TEST_TIMEOUT`` (seconds): a test still running after it has every thread's stack dumped to
``GPU_SUITE_STACKS`` and the process ended (faulthandler), so that one hung test costs its timeout, not the
shard; a crash (SIGSEGV, SIGABRT) and SIGUSR1 (the runner, before it kills a process at its time limit) dump there
too, each test's dump after a line ``=== NODEID ===``. The runner starts a new process for the tests left.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import time
from typing import Any

import pytest

_EVENTS: Any = None
_STACKS: Any = None
DETAIL_CHARS = 6000  # of a failing phase's traceback (its end), and as much of each captured output's end


def _emit(**event: Any) -> None:
    if _EVENTS is None:
        return
    event["t"] = round(time.time(), 3)
    _EVENTS.write(json.dumps(event) + "\n")
    _EVENTS.flush()


def first_line(report: Any) -> str:
    """The error's one line: the exception and its message as pytest's short summary gives it, where."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        lines = [ln for ln in str(crash.message).splitlines() if ln.strip()]
        where = f" ({os.path.basename(str(crash.path))}:{crash.lineno})"
        return (lines[0] if lines else "(no message)") + where
    if isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
        return str(report.longrepr[2])
    lines = [ln for ln in str(report.longrepr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[-1] if lines else "(no message)")


def _detail(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")[-DETAIL_CHARS:]
    for name, content in getattr(report, "sections", []):
        if content.strip():
            text += f"\n----- {name} -----\n{content[-DETAIL_CHARS:]}"
    return text


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    global _EVENTS, _STACKS
    path = os.environ.get("GPU_SUITE_EVENTS")
    if path:
        _EVENTS = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole session)
    stacks = os.environ.get("GPU_SUITE_STACKS")
    if stacks:
        _STACKS = open(stacks, "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(file=_STACKS, all_threads=True)  # crashes: every thread's stack, for the runner
        faulthandler.register(signal.SIGUSR1, file=_STACKS, all_threads=True)  # the runner's cut: the same
    _emit(ev="session", pid=os.getpid())


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _emit(ev="collect_error", id=report.nodeid, msg=first_line(report), detail=_detail(report))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    select = os.environ.get("GPU_SUITE_SELECT")
    if not select:
        return
    with open(select, encoding="utf-8") as f:
        wanted = {ln.strip() for ln in f if ln.strip()}
    keep = [it for it in items if it.nodeid in wanted]
    drop = [it for it in items if it.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    found = {it.nodeid for it in keep}
    _emit(ev="missing", ids=sorted(wanted - found))


def pytest_collection_finish(session: pytest.Session) -> None:
    _emit(ev="collected", ids=[it.nodeid for it in session.items])


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _emit(ev="start", id=nodeid)
    if _STACKS is None:
        return
    _STACKS.write(f"=== {nodeid} ===\n")  # a stack dump below this line is this test's
    _STACKS.flush()
    timeout = float(os.environ.get("GPU_SUITE_TEST_TIMEOUT", "0") or 0)
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout, exit=True, file=_STACKS)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    event: dict[str, Any] = {"ev": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
                             "dur": round(report.duration, 4)}
    if hasattr(report, "wasxfail"):
        event["xfail"] = True
    if report.failed or report.skipped:
        event["msg"] = first_line(report)
    if report.failed:
        event["detail"] = _detail(report)
    _emit(**event)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    faulthandler.cancel_dump_traceback_later()
    _emit(ev="finish", id=nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    faulthandler.cancel_dump_traceback_later()
    _emit(ev="end", exitstatus=int(exitstatus))
