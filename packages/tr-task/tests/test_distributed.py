"""Data parallelism without processes: launcher variables, sharding, the batch rule, the initial state every rank
takes from rank 0, and the bootstrap of real TCP stores and gloo groups on threads over 127.0.0.1 (including ranks
that never arrive)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.backend.base import Store
from tr.core.errors import BackendError, ConfigError
from tr.core.memory import Role
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, fc, gap, relu, seq
from tr.task import distributed as D
from tr.task.deep_learning import DeepLearningTask
from tr.task.distributed import DistEnv, auto_env, bootstrap, global_count, read_env
from tr.task.feeder import ArrayFeeder, shard_positions, shard_size
from tr.task.launch import free_port

# --- the launcher's variables ---------------------------------------------------------------------------------


def test_no_launcher_is_one_rank():
    env = read_env({})
    assert (env.rank, env.world_size, env.local_rank, env.distributed) == (0, 1, 0, False)
    assert auto_env({}) is None


def test_torchrun_variables():
    env = read_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.1.2.3",
                    "MASTER_PORT": "1234", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"})  # torchrun's win
    assert env == DistEnv(5, 8, 1, "10.1.2.3", 1234)
    assert env.launcher == "torchrun" and not env.loopback and not env.is_main
    assert auto_env({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}) == DistEnv(0, 2, 0, "127.0.0.1",
                                                                                              29500)
    with pytest.raises(ConfigError, match="WORLD_SIZE=2 but MASTER_ADDR is not set: set MASTER_ADDR to rank 0's"):
        read_env({"RANK": "0", "WORLD_SIZE": "2"})  # no sign that all ranks share this machine


def test_open_mpi_on_one_machine_defaults_to_loopback():
    env = read_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
                    "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    assert env == DistEnv(3, 4, 3, "127.0.0.1", 29500) and env.launcher == "Open MPI" and env.loopback
    assert auto_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "h"}) is not None


def test_slurm_variables_and_no_automatic_mode():
    v = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NNODES": "4",
         "MASTER_ADDR": "node7", "MASTER_PORT": "29555"}
    assert read_env(v) == DistEnv(2, 4, 0, "node7", 29555)
    assert auto_env(v) is None  # a SLURM batch script is not one rank of many: distributed() is explicit
    assert read_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NNODES": "1"}).master_addr == "127.0.0.1"


@pytest.mark.parametrize("env,msg", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "environment variable RANK='x' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, r"RANK=2 is outside \[0, 2\) for WORLD_SIZE=2"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "2"},
     "SLURM_NTASKS=8 but MASTER_ADDR is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"},
     r"master port must be in \[1, 65535\], got 99999"),
])
def test_bad_variables_are_named(env, msg):
    with pytest.raises(ConfigError, match=msg):
        read_env(env)


def test_bootstrap_timeout_from_environment(monkeypatch):
    monkeypatch.setenv("TR_DIST_TIMEOUT", "7.5")
    assert D.bootstrap_timeout() == 7.5 and D.bootstrap_timeout(2) == 2.0
    monkeypatch.setenv("TR_DIST_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="TR_DIST_TIMEOUT='soon' is not a number"):
        D.bootstrap_timeout()
    with pytest.raises(ConfigError, match="bootstrap timeout must be > 0 seconds, got 0"):
        D.bootstrap_timeout(0)


def test_collective_timeout_from_environment(monkeypatch):
    monkeypatch.delenv("TR_DIST_OP_TIMEOUT", raising=False)
    assert D.op_timeout() == D.DEFAULT_OP_TIMEOUT_S
    monkeypatch.setenv("TR_DIST_OP_TIMEOUT", "45")
    assert D.op_timeout() == 45.0 and D.op_timeout(3) == 3.0
    monkeypatch.setenv("TR_DIST_OP_TIMEOUT", "-1")
    with pytest.raises(ConfigError, match="collective operation timeout must be > 0 seconds, got -1.0"):
        D.op_timeout()


# --- sharding ---------------------------------------------------------------------------------------------------


def test_shard_positions_deal_round_robin_with_padding():
    assert shard_positions(10, 1, 4, pad=True).tolist() == [1, 5, 9]
    assert shard_positions(10, 3, 4, pad=True).tolist() == [3, 7, 1]  # padded from the start of the order
    assert shard_positions(10, 3, 4, pad=False).tolist() == [3, 7]
    assert [shard_size(10, r, 4, False) for r in range(4)] == [3, 3, 2, 2]
    every = np.concatenate([shard_positions(10, r, 4, pad=False) for r in range(4)])
    assert sorted(every.tolist()) == list(range(10))


def _batches(feeder: ArrayFeeder, epoch: int, train: bool) -> list[np.ndarray]:
    out = []
    for _k, buf, n in feeder.epoch(epoch, train):
        out.append(feeder.buffers()[buf][0][:n].copy())
    return out


def test_step_k_of_all_ranks_is_step_k_of_one_process():
    n, batch, world = 48, 8, 4
    x = np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1)
    y = np.arange(n, dtype=np.int32)
    one = ArrayFeeder((x, y), (x[:11], y[:11]), batch, seed=3)
    ranks = [ArrayFeeder((x, y), (x[:11], y[:11]), batch, seed=3) for _ in range(world)]
    for r, f in enumerate(ranks):
        f.shard(r, world)
        assert (f.batch, f.num_samples(True), f.steps(True)) == (2, 12, 6)
    for epoch in (0, 1):  # the shuffle is the same pure function of (seed, epoch) on every rank
        whole = _batches(one, epoch, True)
        parts = [_batches(f, epoch, True) for f in ranks]
        for k, labels in enumerate(whole):
            assert sorted(np.concatenate([p[k] for p in parts]).tolist()) == sorted(labels.tolist())
    assert _batches(one, 0, True)[0].tolist() != _batches(one, 1, True)[0].tolist()
    # validation: not padded, every sample once
    assert [f.num_samples(False) for f in ranks] == [3, 3, 3, 2]
    assert sorted(np.concatenate([np.concatenate(_batches(f, 0, False)) for f in ranks]).tolist()) == list(range(11))


def test_padded_epoch_gives_every_rank_the_same_steps():
    x = np.zeros((10, 1, 1, 1), np.float32)
    y = np.arange(10, dtype=np.int32)
    fs = [ArrayFeeder((x, y), None, 4, shuffle=False) for _ in range(4)]
    for r, f in enumerate(fs):
        f.shard(r, 4)
    assert {(f.num_samples(True), f.steps(True), f.last_batch(True)) for f in fs} == {(3, 3, 1)}
    assert [np.concatenate(_batches(f, 0, True)).tolist() for f in fs] == [[0, 4, 8], [1, 5, 9], [2, 6, 0],
                                                                           [3, 7, 1]]


@pytest.mark.parametrize("batch,world,val,msg", [
    (10, 4, 8, "the global batch size 10 does not divide by the world size 4"),
    (8, 4, 3, "the validation set has 3 samples, fewer than the 4 ranks"),
])
def test_shard_rejects(batch, world, val, msg):
    x = np.zeros((16, 1, 1, 1), np.float32)
    y = np.zeros(16, np.int32)
    with pytest.raises(ConfigError, match=msg):
        ArrayFeeder((x, y), (x[:val], y[:val]), batch).shard(0, world)


# --- the task's batch rule --------------------------------------------------------------------------------------


def _task(global_batch: int, env: DistEnv | None = None) -> DeepLearningTask:
    x = np.zeros((32, 1, 1, 4), np.float32)
    y = np.zeros(32, np.int32)
    t = (DeepLearningTask(Settings().global_batch_size(global_batch)).device("cpu").quiet()
         .model(seq(fc(3, True))).optimizer(SGD()).num_classes(3).data(ArrayFeeder((x, y), None, global_batch)))
    return t if env is None else t.distributed(env)


def test_global_batch_must_divide_by_the_world_size():
    t = _task(16, DistEnv(0, 3, 0, "127.0.0.1", free_port()))
    with pytest.raises(ConfigError, match="the global batch size 16 does not divide by the world size 3"):
        t.compile()
    assert t.group is None  # raised before joining anything


def test_world_size_from_the_launcher_is_automatic(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "5")
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(ConfigError, match="the global batch size 8 does not divide by the world size 5"):
        _task(8).compile()


def test_one_rank_distributed_is_plain_training():
    t = _task(8, DistEnv()).compile()
    assert t.group is None and t.backend.world_size == 1
    t.run()


@pytest.mark.parametrize("world", [1, 2])
def test_broadcast_parameters_makes_the_shared_roles_rank_0s_and_leaves_the_scalars(world):
    x = np.random.default_rng(0).standard_normal((16, 4, 4, 1)).astype(np.float32)
    t = (DeepLearningTask(Settings().global_batch_size(8)).device("cpu").quiet()
         .model(seq(conv(4, 3, p=1), bn(), relu(), gap(), fc(3))).optimizer(SGD()).num_classes(3)
         .data(ArrayFeeder((x, np.zeros(16, np.int32)), None, 8)).ema(0.9, validate=False).compile())
    inits = [i.tensor for i in t.program.inits]
    before = {u.name: t.backend.read(u).copy() for u in inits}
    sent = []
    rank0 = SimpleNamespace(world_size=world, broadcast=lambda buf: (sent.append(buf.size), buf.fill(0x3C)))
    n = D.broadcast_parameters(t.backend, t.program, rank0)  # rank 0's bytes: 0x3C each
    shared = [u for u in inits if u.region.role.shared]
    assert {u.region.role for u in shared} == {Role.RUNNING, Role.RUNNING_NEXT, Role.FOLDED, Role.PARAM}
    assert {u.name for u in inits if not u.region.role.shared} >= {"step", "loss_scale", "batch_train"}
    if world == 1:  # one rank: nothing to agree on, nothing sent
        assert n == 0 and sent == []
    else:
        assert n == sent[0] == sum(before[u.name].nbytes for u in shared)
    for u in inits:
        got = t.backend.read(u)
        if world > 1 and u.region.role.shared:
            assert (got.view(np.uint8) == 0x3C).all(), u.name
        else:
            np.testing.assert_array_equal(got, before[u.name], err_msg=u.name)


def test_distributed_takes_a_dist_env():
    with pytest.raises(ConfigError, match="distributed\\(\\) takes a tr.task.distributed.DistEnv, got 3"):
        DeepLearningTask().distributed(3)


# --- bootstrap over 127.0.0.1 -----------------------------------------------------------------------------------


def _on_threads(world: int, body: Callable[[int, int], object], ranks: list[int] | None = None) -> list[object]:
    """``body(rank, port)`` on one thread per rank (only ``ranks`` when given); results or exceptions."""
    port = free_port()
    ranks = list(range(world)) if ranks is None else ranks
    out: list[object] = [None] * world

    def run(r: int) -> None:
        try:
            out[r] = body(r, port)
        except Exception as e:
            out[r] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_bootstrap_store_collective_and_agreement():
    pytest.importorskip("torch.distributed")

    def body(r: int, port: int):
        g = bootstrap(DistEnv(r, 3, r, "127.0.0.1", port), timeout_s=20)
        try:
            assert isinstance(g.store, Store) and g.store.world_size == 3
            if r == 0:  # what the CUDA backend will do with the NCCL unique id
                g.store.set("tr/test/uid", b"\x00\x01secret")
            uid = g.store.get("tr/test/uid")
            x = np.full(4, r, np.float32)
            g.collective.allreduce_mean(x)
            n = global_count(g.collective, 5000 + r)  # 5000, 5001, 5002 -> 15003 / 3
            g.agree("the plan", {"steps": 10, "epochs": 2})
            try:
                g.agree("the plan", {"steps": 10 + (r == 2), "epochs": 2})
                bad = None
            except ConfigError as e:
                bad = str(e)
            return uid, x, n, bad
        finally:
            g.close()

    for r, v in enumerate(_on_threads(3, body)):
        assert not isinstance(v, Exception), f"rank {r}: {v!r}"
        uid, x, n, bad = v
        assert uid == b"\x00\x01secret" and n == 5001.0
        np.testing.assert_array_equal(x, 1.0)
        assert bad == ("the ranks disagree on the plan steps (rank 0: 10, rank 1: 10, rank 2: 11); every rank must "
                       "run the same configuration")


def test_rank_0_leaves_a_barrier_last(monkeypatch):
    """Rank 0 hosts the store and may close it as soon as a barrier returns: a rank slow to read the barrier's
    opening must still pass it (it saw "lost the rendezvous store" when rank 0 could leave first)."""
    pytest.importorskip("torch.distributed")
    get = D.TcpStore.get

    def slow_get(self, key: str, timeout_s: float | None = None) -> bytes:
        if self.rank != 0 and key.endswith("/go"):
            time.sleep(0.3)  # descheduled between the barrier's count and its read
        return get(self, key, timeout_s)

    monkeypatch.setattr(D.TcpStore, "get", slow_get)

    def body(r: int, port: int):
        g = bootstrap(DistEnv(r, 3, r, "127.0.0.1", port), timeout_s=20)
        try:
            g.store.barrier("tr/test/barrier")
            return "passed"
        finally:
            g.close()

    assert _on_threads(3, body) == ["passed"] * 3


def test_a_rank_that_never_arrives_is_named():
    pytest.importorskip("torch.distributed")

    def body(r: int, port: int):
        t0 = time.monotonic()
        try:
            bootstrap(DistEnv(r, 3, r, "127.0.0.1", port), timeout_s=3.0)  # (rank 1 must arrive within it)
        except BackendError as e:
            return str(e), time.monotonic() - t0
        return "joined", 0.0

    out = _on_threads(3, body, ranks=[0, 1])  # rank 2 died before bootstrap
    for r in (0, 1):
        msg, seconds = out[r]
        assert f"rank {r}: bootstrap timed out after 3 s waiting for rank(s) [2] of world size 3" in msg
        assert "missing ranks: [2]" in msg
        assert seconds < 3.0 + 5.0  # the timeout, not forever


def test_a_missing_rank_0_is_named():
    pytest.importorskip("torch.distributed")
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"rank 1: bootstrap timed out after 0.5 s: no rendezvous at 127.0.0.1:"
                                           r"\d+; rank 0, which hosts it, did not start or died"):
        bootstrap(DistEnv(1, 2, 1, "127.0.0.1", free_port()), timeout_s=0.5)
    assert time.monotonic() - t0 < 0.5 + 5.0  # the timeout, not forever


def test_init_group_is_once_per_process():
    try:
        g = D.init_group(DistEnv())
        assert D.init_group(DistEnv()) is g and D.current_group() is g and g.store is None
        with pytest.raises(BackendError, match="already joined the world as rank 0 of 1.*cannot join as rank 1 of 2"):
            D.init_group(DistEnv(1, 2))
    finally:
        D.close_group()
    assert D.current_group() is None
