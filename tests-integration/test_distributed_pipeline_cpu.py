"""Data-parallel training on the CPU with real processes (tr-run, gloo over 127.0.0.1) from the DEFAULT feeder:
the native pipeline (PREPROCESSOR_SETTING: a small MNIST subset with random crops) shards every epoch by rank
(PipelineFeeder.shard -> Preprocessor.shard), and world sizes 2 and 4 give the weights of one process with the
same global batch.

Tolerance: as in test_distributed_cpu.py (the ranks' mean of per-rank mean-loss gradients is the global-batch
gradient summed in another order, so weights differ by a few float32 rounding steps per update). Over these 10
updates we measure at most 6e-8 (world 2) and 1.2e-7 (world 4) absolute on weights of size up to ~0.45; we allow
1e-6 absolute + 1e-5 relative. The ranks of one run agree bitwise. A shard that dealt the right samples to each
rank but in another order within the epoch (so other samples per step) fails it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dist_pipeline_worker as worker  # noqa: E402

from tr.task.distributed import DistEnv  # noqa: E402

pytest.importorskip("torch.distributed")
if not (worker.MNIST_DIR / "t10k-images-idx3-ubyte.gz").exists():
    pytest.skip("data/mnist is not present", allow_module_level=True)
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def one_process() -> dict[str, np.ndarray]:
    """World size 1, in this process: weights, step losses and epoch metrics."""
    from tr.data import reset_preprocessor_settings

    try:
        task, result, losses = worker.train(env=DistEnv())
    finally:
        reset_preprocessor_settings()  # the worker configured the process-wide settings
    h = result.history
    return {"losses": np.array(losses), "train_loss": [r.train_loss for r in h], "val_loss": [r.val_loss for r in h],
            "top1": [r.top1 for r in h], "top5": [r.top5 for r in h],
            **{f"w:{k}": v for k, v in task.weights().items() if k.startswith("L")}}


@pytest.mark.parametrize("world", [2, 4])
def test_the_default_pipeline_feeder_shards_by_rank(world, one_process, tmp_path):
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(world),
           str(HERE / "dist_pipeline_worker.py"), str(tmp_path), "--timeout", "60"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    print(f"world {world}: {time.monotonic() - t0:.1f} s")
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(world)]
    weights = [k for k in one_process if k.startswith("w:")]
    assert len(weights) == 4
    for r in range(1, world):
        for k in weights:
            np.testing.assert_array_equal(ranks[r][k], ranks[0][k], err_msg=f"rank {r} {k}")
    for k in weights:
        np.testing.assert_allclose(ranks[0][k], one_process[k], rtol=RTOL, atol=ATOL, err_msg=k)
    assert len(ranks[0]["losses"]) == worker.STEPS * worker.EPOCHS
    for m in ("losses", "train_loss", "val_loss", "top1", "top5"):
        np.testing.assert_allclose(ranks[0][m], one_process[m], rtol=RTOL, atol=ATOL, err_msg=m)
