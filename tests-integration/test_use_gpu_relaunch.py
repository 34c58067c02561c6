"""``use_gpu("0,1")`` in a plain ``python script.py``: one process per device through tr's launcher, each on half
the global batch, with the weights of one process on the whole batch (the tolerance of test_distributed_cpu.py:
the ranks' mean gradient is the global one summed in another order). Without a script to start again (python -c)
it is refused with an error that names tr-run. Where the devices do not exist (no CUDA device, or fewer than
named) compile() refuses, naming the ids, before any process is started: it used to train as two CPU processes
with one INFO line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import use_gpu_worker  # noqa: E402

from tr.core.settings import Settings  # noqa: E402
from tr.task.devices import cuda_devices  # noqa: E402

pytest.importorskip("torch.distributed")
RTOL, ATOL = 1e-5, 1e-6
needs_two_gpus = pytest.mark.skipif(cuda_devices()[0] < 2, reason=f"needs 2 or more GPUs: {cuda_devices()}")


def _env(hide_gpus: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""  # no CUDA device, whatever this machine has
    env["TR_DIST_TIMEOUT"] = "60"
    return env


def test_use_gpu_without_a_cuda_device_is_refused_before_anything_starts(tmp_path):
    run = subprocess.run([sys.executable, str(HERE / "use_gpu_worker.py"), str(tmp_path)], capture_output=True,
                         text=True, timeout=180, env=_env(hide_gpus=True))
    assert run.returncode == 1, run.stderr[-3000:]
    assert "ConfigError: use_gpu('0,1') names CUDA device(s) [0, 1], but no CUDA device is usable here" in run.stderr
    assert "use_cpu() trains on the CPU" in run.stderr
    assert "starting one process per device" not in run.stderr + run.stdout  # nothing was launched
    assert list(tmp_path.iterdir()) == []  # and no rank trained


@pytest.mark.gpu
@needs_two_gpus
def test_use_gpu_starts_one_process_per_device(tmp_path):
    run = subprocess.run([sys.executable, str(HERE / "use_gpu_worker.py"), str(tmp_path)], capture_output=True,
                         text=True, timeout=180, env=_env(hide_gpus=False))
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


@pytest.mark.gpu
@needs_two_gpus
def test_use_gpu_without_a_script_names_tr_run():
    code = ("from renaissance import *\n"
            "GLOBAL_SETTING.global_batch_size(8).use_gpu('0,1')\n"
            "DeepLearningTask().model(seq(fc(3))).optimizer(SGD()).num_classes(3).compile()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=_env(hide_gpus=False))
    assert run.returncode == 1
    assert "ConfigError" in run.stderr and "tr-run --nproc-per-node N train.py" in run.stderr
