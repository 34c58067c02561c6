"""Checkpoints of data-parallel training with dropout (CPU, gloo, two ranks through tr-run):

- exact resume: 4 epochs straight == 2 epochs, save (every rank hands rank 0 its dropout stream), new processes
  resume and train 2 more: on every rank every state tensor byte-identical, its own dropout stream included,
  and the metrics equal; and the saving run itself equals 4 epochs with no checkpoint and no save (a save that
  changed the training state would otherwise be in both the reference and the checkpoint);
- checkpoint_every under tr-run (was: rank 0 waited at the save for rank 1, which never called it, until both
  died after 300 s naming an internal key): every rank takes part, rank 0 writes epoch-NNNN and best/, the ranks
  agree on the best epoch, and resuming a periodic checkpoint reproduces the unbroken run;
- a rank that never arrives at a save is a BackendError on rank 0 naming the save and the rank, within the
  operation timeout (TR_DIST_OP_TIMEOUT);
- a checkpoint of a one-process run is refused by a data-parallel resume with dropout, naming why."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "dist_resume_worker.py")
WORLD = 2

pytest.importorskip("torch.distributed")


def _launch(*args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(WORLD), WORKER, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, **env})


def _tr_run(*args: str) -> None:
    run = _launch(*args)
    assert run.returncode == 0, run.stderr[-4000:]


def _same_run(got: list, want: list, first_epoch: int) -> None:
    for r in range(WORLD):
        assert int(got[r]["epochs_done"]) == 4
        np.testing.assert_array_equal(got[r]["metrics"], want[r]["metrics"][first_epoch:])
        assert sorted(k for k in got[r].files if k.startswith("s:")) == sorted(
            k for k in want[r].files if k.startswith("s:"))
        for k in want[r].files:
            if k.startswith("s:"):
                assert got[r][k].tobytes() == want[r][k].tobytes(), (r, k)


def _load(folder: Path) -> list:
    return [np.load(folder / f"rank{r}.npz") for r in range(WORLD)]


def test_data_parallel_checkpoints_resume_to_the_bytes_of_an_unbroken_run(tmp_path):
    from tr.task import checkpoint_files

    straight, every, ck, resumed = tmp_path / "straight", tmp_path / "every", tmp_path / "ck", tmp_path / "resumed"
    straight.mkdir()
    _tr_run("straight", str(straight), str(every), str(ck))  # checkpoint_every(1, every) and save(ck) at epoch 2
    want = _load(straight)
    assert want[0]["s:dropout_seed"].tobytes() != want[1]["s:dropout_seed"].tobytes()  # the streams differ
    assert sorted(p.name for p in every.iterdir()) == ["best", "epoch-0001", "epoch-0002", "epoch-0003", "epoch-0004"]
    val_loss = want[0]["metrics"][:, 3]
    best = checkpoint_files.read(every / "best")[0]
    assert best["epoch"] == 1 + int(np.argmin(val_loss)) and best["dropout_ranks"] == WORLD
    assert float(want[0]["best"]) == float(want[1]["best"]) == val_loss.min()  # one decision, on every rank
    _tr_run("resume", str(resumed), str(ck), str(every / "epoch-0002"), str(every / "epoch-0003"))
    for i, first in enumerate((2, 2, 3)):
        _same_run(_load(resumed / str(i)), want, first)
    plain = tmp_path / "plain"
    plain.mkdir()
    _tr_run("plain", str(plain))  # one run(), no checkpoint_every and no save
    _same_run(want, _load(plain), 0)  # the saves and checkpoints left the training as it was


def test_a_rank_that_never_arrives_at_a_save_is_named_within_the_op_timeout(tmp_path):
    t0 = time.monotonic()
    run = _launch("rank0_saves", str(tmp_path / "ck"), TR_DIST_OP_TIMEOUT="4")
    assert run.returncode != 0
    assert ("rank 0: the checkpoint save: rank(s) [1] of 2 did not arrive within 4 s (TR_DIST_OP_TIMEOUT)"
            in run.stderr), run.stderr[-3000:]
    assert time.monotonic() - t0 < 90 and not (tmp_path / "ck").exists()


def test_a_rank_that_refuses_the_resume_stops_every_rank_at_once(tmp_path):
    """Rank 1 resumes on other data (its shard's fingerprint differs): instead of rank 0 waiting in the first
    collective until the operation timeout, both ranks fail at the resume, rank 0 naming rank 1's reason."""
    (tmp_path / "out").mkdir()
    _tr_run("straight", str(tmp_path / "out"), str(tmp_path / "every"), str(tmp_path / "ck"))
    t0 = time.monotonic()
    run = _launch("rank1_other_data", str(tmp_path / "ck"), TR_DIST_OP_TIMEOUT="120")
    assert run.returncode != 0
    assert "the ranks disagree on the resume refused (rank 0: None, rank 1: " in run.stderr, run.stderr[-3000:]
    assert time.monotonic() - t0 < 100  # far inside the 120 s operation timeout


def test_a_one_process_checkpoint_is_refused_by_a_data_parallel_resume_with_dropout(tmp_path):
    sys.path.insert(0, str(HERE))
    import dist_resume_worker as W

    from tr.task.distributed import DistEnv

    task = W.make_task().distributed(DistEnv())  # world size 1: this process alone
    task.compile().run(1)
    task.save(tmp_path / "ck")
    run = _launch("resume", str(tmp_path), str(tmp_path / "ck"))
    assert run.returncode != 0
    assert "a checkpoint of a run in one process holds one dropout stream" in run.stderr, run.stderr[-3000:]
