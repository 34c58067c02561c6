"""Data-parallel training on the CPU with real processes (tr-run, gloo over 127.0.0.1): world sizes 2 and 4 give
the weights of one process with the same global batch, and a rank that dies during bootstrap makes the others
exit with a clear error within the timeout.

Tolerance: the ranks' mean of per-rank mean-loss gradients is the global-batch gradient computed in another
order (float32 partial sums per rank, then the mean), so weights differ from one process's by a few float32
rounding steps per update. Over these 10 updates we measure at most ~1e-7 absolute on weights of size ~0.1-1;
we allow 1e-6 absolute + 1e-5 relative. The ranks of one run agree bitwise (gloo leaves the same bytes on all).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dist_cpu_worker as worker  # noqa: E402

from tr.task.distributed import DistEnv  # noqa: E402
from tr.task.launch import free_port  # noqa: E402

pytest.importorskip("torch.distributed")
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def one_process() -> dict[str, dict[str, np.ndarray]]:
    """World size 1, in this process: weights, step losses and epoch metrics per optimizer."""
    out = {}
    for opt in ("sgd", "adamw"):
        task, result, losses = worker.train(opt, env=DistEnv())
        h = result.history
        out[opt] = {"losses": np.array(losses), "train_loss": [r.train_loss for r in h],
                    "val_loss": [r.val_loss for r in h], "top1": [r.top1 for r in h], "top5": [r.top5 for r in h],
                    **{f"w:{k}": v for k, v in task.weights().items() if k.startswith("L")}}
    return out


def _tr_run(world: int, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(world), str(HERE / "dist_cpu_worker.py"),
           str(out), "--timeout", "60", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("world", [2, 4])
def test_world_size_gives_the_weights_of_one_process(world, one_process, tmp_path):
    t0 = time.monotonic()
    run = _tr_run(world, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    print(f"world {world}: {time.monotonic() - t0:.1f} s")
    for opt, ref in one_process.items():
        ranks = [np.load(tmp_path / f"rank{r}_{opt}.npz") for r in range(world)]
        weights = [k for k in ref if k.startswith("w:")]
        assert len(weights) == 6
        for r in range(1, world):
            for k in weights:
                np.testing.assert_array_equal(ranks[r][k], ranks[0][k], err_msg=f"{opt} rank {r} {k}")
        for k in weights:
            np.testing.assert_allclose(ranks[0][k], ref[k], rtol=RTOL, atol=ATOL, err_msg=f"{opt} {k}")
        # the reported numbers are the global ones: the loss of every step, and the epoch metrics
        assert len(ranks[0]["losses"]) == worker.STEPS * worker.EPOCHS
        for m in ("losses", "train_loss", "val_loss", "top1", "top5"):
            np.testing.assert_allclose(ranks[0][m], ref[m], rtol=RTOL, atol=ATOL, err_msg=f"{opt} {m}")
    # only rank 0 prints the epoch table (the AdamW run is not quiet)
    header = [line for line in run.stdout.splitlines() if "Train Loss" in line]
    assert header == ["[rank 0]  Epoch | Train Loss |   Val Loss |     Top1% |     Top5% |           LR | Time(s)"]
    assert sum(line.startswith("[rank 0]      ") for line in run.stdout.splitlines()) == worker.EPOCHS


def test_tta_validation_metrics_are_summed_over_the_ranks(one_process, tmp_path):
    """task.tta(flip=True) sums each rank's metrics on the host into the plan's accumulator before val_end reduces
    it: the mirror of a 1x1 sample being the sample, the global metrics are one process's without TTA."""
    run = _tr_run(2, tmp_path, "--tta")
    assert run.returncode == 0, run.stderr[-3000:]
    for opt, ref in one_process.items():
        rank0 = np.load(tmp_path / f"rank0_{opt}.npz")
        for m in ("val_loss", "top1", "top5"):
            np.testing.assert_allclose(rank0[m], ref[m], rtol=RTOL, atol=ATOL, err_msg=f"{opt} {m}")


def test_a_rank_dying_in_bootstrap_stops_the_others_with_a_clear_error(tmp_path):
    timeout = 10.0  # ranks 1-2 must arrive within it after rank 0 is up (four processes importing torch on 2 cores)
    port = free_port()
    procs = []
    for r in range(4):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="4", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "dist_cpu_worker.py"), str(tmp_path), "--timeout", str(timeout),
             "--die-rank", "3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    t0 = time.monotonic()
    results = [p.communicate(timeout=60) for p in procs]
    elapsed = time.monotonic() - t0
    assert procs[3].returncode == 3
    for r in (0, 1, 2):
        assert procs[r].returncode == 1
        err = results[r][1]
        assert "tr.core.errors.BackendError" in err
        assert f"rank {r}: bootstrap timed out after 10 s waiting for rank(s) [3] of world size 4" in err
    assert elapsed < timeout + 15  # startup (importing torch) + the timeout, not forever
    assert not list(tmp_path.iterdir())
