"""tr.task.devices: one device per process, the global batch split evenly, use_gpu("0,1") re-launching, and use_gpu
refused where its devices do not exist (never a run on the CPU instead)."""

import re
import sys

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import fc, seq
from tr.task import devices
from tr.task.deep_learning import DeepLearningTask
from tr.task.distributed import DistEnv
from tr.task.feeder import ArrayFeeder


def test_use_gpu_names_the_device_of_each_local_rank():
    s = Settings().use_gpu("2,3")
    assert devices.device_index(s, None) == 2
    assert devices.device_index(s, DistEnv(1, 2, 1)) == 3
    assert devices.device_index(Settings(), DistEnv(1, 2, 1)) == 1  # no use_gpu: LOCAL_RANK picks it
    assert devices.device_index(Settings(), None) is None
    with pytest.raises(ConfigError, match=r"local rank 2, but use_gpu names 2 device\(s\) \[2, 3\]"):
        devices.device_index(s, DistEnv(2, 3, 2))


def test_a_global_batch_that_does_not_divide_by_the_devices_is_refused():
    with pytest.raises(ConfigError, match="global batch size 100 does not divide by the number of GPUs 3"):
        Settings().global_batch_size(100).use_gpu("0,1,2")
    with pytest.raises(ConfigError, match="global batch size 100 does not divide by the number of GPUs 3"):
        Settings().use_gpu("0,1,2").global_batch_size(100)
    # the default batch (128) is checked when the task compiles, not when use_gpu is called
    s = Settings().use_gpu("0,1,2")
    with pytest.raises(ConfigError, match=r"batch size 128 does not divide by the 3 devices of use_gpu\('0,1,2'\)"):
        devices.local_batch(s, DistEnv(0, 3))
    assert devices.local_batch(Settings().global_batch_size(96).use_gpu("0,1,2"), DistEnv(1, 3)) == 32


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: this machine has n usable CUDA devices, as tr.backend would say."""

    def have(n: int) -> None:
        monkeypatch.setattr(devices, "cuda_devices", lambda: (n, f"{n} device(s)" if n else "no CUDA driver found"))

    return have


def test_use_cpu_and_use_gpu_reach_the_backend_choice(gpus):
    gpus(2)
    assert devices.backend_kind("auto", Settings().use_cpu()) == "cpu"
    assert devices.backend_kind("auto", Settings().use_gpu("0")) == "auto"
    with pytest.raises(ConfigError, match=r"use_cpu\(\) but the task says device\('cuda'\)"):
        devices.backend_kind("cuda", Settings().use_cpu())
    with pytest.raises(ConfigError, match=r"use_gpu\('1'\) but the task says device\('cpu'\)"):
        devices.backend_kind("cpu", Settings().use_gpu(1))


def test_several_devices_in_one_process_relaunch_the_script(monkeypatch, gpus):
    """compile() never trains one process on a share of the batch: it hands over to tr-run's launcher."""
    gpus(2)
    seen = {}

    def fake_main(args):
        seen["args"] = args
        return 0

    from tr.task import launch

    monkeypatch.setattr(launch, "main", fake_main)
    monkeypatch.setattr(sys, "argv", [__file__, "--epochs", "2"])
    monkeypatch.setattr(devices, "script_command", lambda: [__file__, *sys.argv[1:]])
    s = Settings().global_batch_size(8).use_gpu("0,1")
    x, y = np.zeros((16, 1, 1, 4), np.float32), np.zeros(16, np.int32)
    task = DeepLearningTask(s).model(seq(fc(3))).optimizer(SGD()).num_classes(3).data(ArrayFeeder((x, y), None, 8))
    with pytest.raises(SystemExit) as e:
        task.compile()
    assert e.value.code == 0
    assert seen["args"] == ["--nproc-per-node", "2", __file__, "--epochs", "2"]
    assert not s.frozen  # the launching process did not compile


def test_a_launched_rank_never_launches_again(monkeypatch, gpus):
    gpus(2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    s = Settings().global_batch_size(8).use_gpu("0,1")
    task = DeepLearningTask(s).model(seq(fc(3))).optimizer(SGD()).num_classes(3).distributed(DistEnv())
    with pytest.raises(ConfigError, match="use_gpu names 2 devices, but this process is rank 1 of 2"):
        task.compile()


def test_launcher_args_for_a_module():
    assert devices.launcher_args(2, ["-m", "pkg.train", "--x"]) == ["--nproc-per-node", "2", "-m", "pkg.train", "--x"]


@pytest.mark.parametrize("spec", ["0", "0,1", [3]])
def test_use_gpu_without_a_cuda_device_is_refused_naming_the_ids(monkeypatch, gpus, spec):
    """It used to train on the CPU (as two CPU processes for "0,1") with one INFO line."""
    from tr.task import launch

    gpus(0)
    monkeypatch.setattr(launch, "main", lambda args: pytest.fail(f"launched {args}"))
    s = Settings().global_batch_size(8).use_gpu(spec)
    ids = list(s.gpu_ids)
    with pytest.raises(ConfigError, match=rf"use_gpu\('{','.join(map(str, ids))}'\) names CUDA device\(s\) "
                                          rf"\{ids}, but no CUDA device is usable here \(no CUDA driver found\); "
                                          r"use_cpu\(\) trains on the CPU"):
        devices.backend_kind("auto", s)
    x, y = np.zeros((16, 1, 1, 4), np.float32), np.zeros(16, np.int32)
    task = DeepLearningTask(s).model(seq(fc(3))).optimizer(SGD()).num_classes(3).data(ArrayFeeder((x, y), None, 8))
    with pytest.raises(ConfigError, match="no CUDA device is usable here"):
        task.compile()  # refused before a process is launched or a backend chosen
    assert not s.frozen  # and the settings can be changed again (use_cpu())


def test_use_gpu_ids_past_the_device_count_are_refused(monkeypatch, gpus):
    gpus(2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ConfigError, match=r"use_gpu\('1,2,3'\) names device\(s\) \[2, 3\], but this machine has 2 "
                                          r"usable CUDA device\(s\): ids 0 to 1"):
        devices.backend_kind("auto", Settings().use_gpu("1,2,3"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(ConfigError, match=r"names device\(s\) \[2\].*\(CUDA_VISIBLE_DEVICES='4,5'\)"):
        devices.backend_kind("cuda", Settings().use_gpu(2))
    # the edge values work: the last device, and no use_gpu at all
    assert devices.backend_kind("auto", Settings().use_gpu("0,1")) == "auto"
    assert devices.backend_kind("cuda", Settings().use_gpu(1)) == "cuda"
    gpus(0)
    assert devices.backend_kind("auto", Settings()) == "auto"  # device("auto") may still fall back to the CPU


def test_this_machine_is_asked_when_nothing_is_faked():
    n, reason = devices.cuda_devices()
    if n:
        assert devices.backend_kind("auto", Settings().use_gpu(n - 1)) == "auto"
        with pytest.raises(ConfigError, match=rf"names device\(s\) \[{n}\]"):
            devices.backend_kind("auto", Settings().use_gpu(n))
    else:
        with pytest.raises(ConfigError, match=r"no CUDA device is usable here \(" + re.escape(reason)):
            devices.backend_kind("auto", Settings().use_gpu("0,1"))
