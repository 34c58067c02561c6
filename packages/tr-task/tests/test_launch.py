"""tr-run: the children's environment and output, and a failing child stopping the others."""

from __future__ import annotations

import sys
import time
from importlib.metadata import entry_points

import pytest

from tr.task import launch

CHILD = """\
import os, sys
print("env", *(os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                         "MASTER_PORT")), *sys.argv[1:])
print("to stderr", file=sys.stderr)
"""

FAILING = """\
import os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
if os.environ["RANK"] == "1":
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:  # fail only once rank 0 has spoken
        time.sleep(0.01)
    print("rank 1 fails", file=sys.stderr)
    sys.exit(3)
print("rank 0 waits for ever", flush=True)
marker.touch()
signal.pause()
"""


def test_children_get_the_torchrun_variables_and_prefixed_output(tmp_path, capfd):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    assert launch.main(["--nproc-per-node", "3", str(script), "--lr", "0.1"]) == 0
    out, err = capfd.readouterr()
    lines = sorted(out.splitlines())
    assert len(lines) == 3
    port = lines[0].split()[-3]
    for r, line in enumerate(lines):
        assert line == f"[rank {r}] env {r} 3 {r} 3 127.0.0.1 {port} --lr 0.1"
    assert sorted(err.splitlines()) == [f"[rank {r}] to stderr" for r in range(3)]


def test_a_failing_child_stops_the_others(tmp_path, capfd):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    t0 = time.monotonic()
    assert launch.main(["--nproc-per-node", "2", str(script), str(tmp_path / "rank0-ready")]) == 3
    assert time.monotonic() - t0 < 60  # returned at all: rank 0 (which never exits) was stopped
    out, err = capfd.readouterr()
    assert "[rank 0] rank 0 waits for ever" in out
    assert "[rank 1] rank 1 fails" in err
    assert "tr-run: rank 1 exited with code 3; stopping the other 1 running rank(s)" in err


def test_module_and_multi_node_ranks(tmp_path, capfd, monkeypatch):
    (tmp_path / "trchild.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert launch.main(["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "29999",
                        "--nproc-per-node", "2", "-m", "trchild"]) == 0
    out = sorted(capfd.readouterr().out.splitlines())
    assert out == ["[rank 2] env 2 4 0 2 127.0.0.1 29999", "[rank 3] env 3 4 1 2 127.0.0.1 29999"]


@pytest.mark.parametrize("argv,msg", [
    (["--nproc-per-node", "0", "x.py"], "--nproc-per-node must be >= 1, got 0"),
    (["--nnodes", "2", "x.py"], "--nnodes 2 needs --master-addr"),
    (["--nnodes", "2", "--node-rank", "2", "x.py"], r"--node-rank 2 is outside \[0, 2\)"),
])
def test_bad_arguments(argv, msg, capsys):
    with pytest.raises(SystemExit):
        launch.parse_args(argv)
    assert msg.replace("\\", "") in capsys.readouterr().err


def test_script_arguments_are_not_parsed_by_tr_run():
    a = launch.parse_args(["--nproc-per-node", "2", "train.py", "--nproc-per-node", "9", "-m"])
    assert a.nproc_per_node == 2 and a.args == ["--nproc-per-node", "9", "-m"]
    assert launch.child_command(a) == [sys.executable, "-u", "train.py", "--nproc-per-node", "9", "-m"]


def test_threads_per_child():
    env = launch.child_env({}, 1, 4, 1, 2, "127.0.0.1", 1)
    assert env["OMP_NUM_THREADS"] == str(max(1, (launch.os.cpu_count() or 1) // 2))
    assert launch.child_env({"OMP_NUM_THREADS": "3"}, 1, 4, 1, 2, "127.0.0.1", 1)["OMP_NUM_THREADS"] == "3"


def test_console_script_is_declared():
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "tr-run"]
    assert ep.value == "tr.task.launch:main"
