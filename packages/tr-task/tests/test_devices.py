"""tr.task.devices: one device per process, the global batch split evenly, and use_gpu("0,1") re-launching."""

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


def test_use_cpu_and_use_gpu_reach_the_backend_choice():
    assert devices.backend_kind("auto", Settings().use_cpu()) == "cpu"
    assert devices.backend_kind("auto", Settings().use_gpu("0")) == "auto"
    with pytest.raises(ConfigError, match=r"use_cpu\(\) but the task says device\('cuda'\)"):
        devices.backend_kind("cuda", Settings().use_cpu())
    with pytest.raises(ConfigError, match=r"use_gpu\('1'\) but the task says device\('cpu'\)"):
        devices.backend_kind("cpu", Settings().use_gpu(1))


def test_several_devices_in_one_process_relaunch_the_script(monkeypatch):
    """compile() never trains one process on a share of the batch: it hands over to tr-run's launcher."""
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


def test_a_launched_rank_never_launches_again(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    s = Settings().global_batch_size(8).use_gpu("0,1")
    task = DeepLearningTask(s).model(seq(fc(3))).optimizer(SGD()).num_classes(3).distributed(DistEnv())
    with pytest.raises(ConfigError, match="use_gpu names 2 devices, but this process is rank 1 of 2"):
        task.compile()


def test_launcher_args_for_a_module():
    assert devices.launcher_args(2, ["-m", "pkg.train", "--x"]) == ["--nproc-per-node", "2", "-m", "pkg.train", "--x"]
