"""``use_gpu("0,1")`` in a plain ``python script.py``: one process per device through tr's launcher, each on half
the global batch, with the weights of one process on the whole batch (the tolerance of test_distributed_cpu.py:
the ranks' mean gradient is the global one summed in another order). Without a script to start again (python -c)
it is refused with an error that names tr-run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import use_gpu_worker  # noqa: E402

from tr.core.settings import Settings  # noqa: E402

pytest.importorskip("torch.distributed")
RTOL, ATOL = 1e-5, 1e-6


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU backend even on a GPU machine: the test is about processes
    env["TR_DIST_TIMEOUT"] = "60"
    return env


def test_use_gpu_starts_one_process_per_device(tmp_path):
    run = subprocess.run([sys.executable, str(HERE / "use_gpu_worker.py"), str(tmp_path)], capture_output=True,
                         text=True, timeout=180, env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    assert [int(r["batch"]) for r in ranks] == [use_gpu_worker.worker.GLOBAL_BATCH // 2] * 2
    # one process, one device, the whole global batch
    task = use_gpu_worker.build(Settings().manual_seed(5).global_batch_size(use_gpu_worker.worker.GLOBAL_BATCH))
    task.compile().run()
    ref = {k: v for k, v in task.weights().items() if k.startswith("L")}
    assert len(ref) == 6
    for k, v in ref.items():
        np.testing.assert_array_equal(ranks[1][f"w:{k}"], ranks[0][f"w:{k}"], err_msg=k)
        np.testing.assert_allclose(ranks[0][f"w:{k}"], v, rtol=RTOL, atol=ATOL, err_msg=k)
    assert list(ranks[0]["epochs"]) == list(range(1, use_gpu_worker.worker.EPOCHS + 1))


def test_use_gpu_without_a_script_names_tr_run():
    code = ("from renaissance import *\n"
            "GLOBAL_SETTING.global_batch_size(8).use_gpu('0,1')\n"
            "DeepLearningTask().model(seq(fc(3))).optimizer(SGD()).num_classes(3).compile()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env())
    assert run.returncode == 1
    assert "ConfigError" in run.stderr and "tr-run --nproc-per-node N train.py" in run.stderr
