"""device_augment with data parallelism (CPU backend, tr-run, gloo): two ranks each choose their share of the
epoch on the device (batch_select deals positions r, r + 2, ... of the device's order, as tr.data.sharding
does), so at every step the two local batches interleave into the one-process batch of the same global
size, and training gives one process's weights (the tolerance of test_distributed_cpu.py: the ranks' mean
gradient is the global one summed in another order) and its validation top-1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dist_resident_worker as worker  # noqa: E402

from tr.task.distributed import DistEnv  # noqa: E402

pytest.importorskip("torch.distributed")


def test_two_ranks_take_the_one_process_batches_and_weights(tmp_path):
    task, result, seen = worker.train(env=DistEnv())
    one = {"steps": np.stack(seen), "top1": [r.top1 for r in result.history],
           **{f"w:{k}": v for k, v in task.weights().items() if k.startswith("L")}}
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", "2", str(HERE / "dist_resident_worker.py"),
           str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    assert one["steps"].shape == (8, 100) and ranks[0]["steps"].shape == (8, 50)
    interleaved = np.stack([ranks[0]["steps"], ranks[1]["steps"]], axis=2).reshape(8, 100)
    np.testing.assert_array_equal(interleaved, one["steps"])
    for k in (k for k in one if k.startswith("w:")):
        np.testing.assert_allclose(ranks[0][k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
        assert ranks[0][k].tobytes() == ranks[1][k].tobytes(), k
    np.testing.assert_allclose(ranks[0]["top1"], one["top1"], atol=1e-9)
