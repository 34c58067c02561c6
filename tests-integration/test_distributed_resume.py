"""Exact resume of data-parallel training with dropout (CPU, gloo, two ranks through tr-run): 4 epochs
straight == 2 epochs, save (every rank hands rank 0 its dropout stream), new processes resume and train 2
more: on every rank every state tensor byte-identical, its own dropout stream included, and the metrics
equal. A checkpoint of a one-process run is refused by a data-parallel resume with dropout, naming why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "dist_resume_worker.py")
WORLD = 2

pytest.importorskip("torch.distributed")


def _tr_run(*args: str) -> None:
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(WORLD), WORKER, *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]


def test_a_resumed_data_parallel_run_with_dropout_gives_the_bytes_of_an_uninterrupted_one(tmp_path):
    straight, resumed, ck = tmp_path / "straight", tmp_path / "resumed", tmp_path / "ck"
    straight.mkdir()
    resumed.mkdir()
    _tr_run("straight", str(straight))
    _tr_run("first", str(ck))
    _tr_run("resume", str(ck), str(resumed))
    want = [np.load(straight / f"rank{r}.npz") for r in range(WORLD)]
    got = [np.load(resumed / f"rank{r}.npz") for r in range(WORLD)]
    assert want[0]["s:dropout_seed"].tobytes() != want[1]["s:dropout_seed"].tobytes()  # the streams differ
    for r in range(WORLD):
        assert int(got[r]["epochs_done"]) == 4
        np.testing.assert_array_equal(got[r]["metrics"], want[r]["metrics"][2:])
        assert sorted(got[r].files) == sorted(want[r].files)
        for k in want[r].files:
            if k.startswith("s:"):
                assert got[r][k].tobytes() == want[r][k].tobytes(), (r, k)


def test_a_one_process_checkpoint_is_refused_by_a_data_parallel_resume_with_dropout(tmp_path):
    sys.path.insert(0, str(HERE))
    import dist_resume_worker as W

    from tr.task.distributed import DistEnv

    task = W.make_task().distributed(DistEnv())  # world size 1: this process alone
    task.compile().run(1)
    task.save(tmp_path / "ck")
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(WORLD), WORKER, "resume",
           str(tmp_path / "ck"), str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert run.returncode != 0
    assert "a checkpoint of a run in one process holds one dropout stream" in run.stderr, run.stderr[-3000:]
