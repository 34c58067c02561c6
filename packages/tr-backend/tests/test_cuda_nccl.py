"""NCCL in the CUDA backend: the run-time loader (no device needed: the extension imports and builds without
NCCL, a missing library is an error naming every path tried) and, on a GPU, the NCCL path at world size 1:
range_allreduce_mean captured as ncclAllReduce(ncclAvg) leaves the data bitwise unchanged, and an MLP trained
with TR_FORCE_NCCL=1 ends with the same bytes as one trained without NCCL."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from backend_testkit import FC_B, FC_W, op
from cuda_testkit import Twin

from tr.backend.cuda.native import load_native
from tr.backend.cuda.nccl import NcclCollective, nccl_candidates
from tr.core.errors import BackendError, ConfigError, DeviceUnavailableError
from tr.core.memory import Region, Role, Span

native = load_native().module
needs_nccl_build = pytest.mark.skipif(native is None or not hasattr(native, "NcclComm"),
                                      reason="extension built without the CUDA ops")
G_SPAN = Span.of(Role.GRAD)


# --- no device needed ----------------------------------------------------------------------------------
def test_extension_imports_without_loading_nccl():
    # a fresh interpreter with no way to find NCCL: the module imports and has not mapped libnccl
    code = ("import tr.backend._native as n; maps = open('/proc/self/maps').read(); "
            "print(hasattr(n, 'build_info'), 'libnccl' in maps)")
    env = {**os.environ, "TR_NCCL_PATH": "/nonexistent/libnccl.so.2", "LD_LIBRARY_PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


@needs_nccl_build
def test_loader_error_names_every_path_tried(tmp_path):
    not_elf = tmp_path / "libnccl.so.2"
    not_elf.write_bytes(b"not a library")
    paths = ["/nonexistent/nvidia/nccl/lib/libnccl.so.2", str(not_elf)]
    with pytest.raises(DeviceUnavailableError, match="NCCL could not be loaded") as e:
        native.probe_nccl(paths)
    for p in paths:
        assert f"\n  {p}: " in str(e.value)


@needs_nccl_build
def test_candidates_start_with_tr_nccl_path(monkeypatch):
    monkeypatch.setenv("TR_NCCL_PATH", "/opt/x/libnccl.so.2")
    got = native.nccl_candidates()
    assert got[0] == "/opt/x/libnccl.so.2" and got[-1] == "libnccl.so.2"


@needs_nccl_build
def test_wheel_library_loads_when_installed():
    found = nccl_candidates()
    if not found:
        pytest.skip("no nvidia-nccl wheel in this interpreter")
    assert native.probe_nccl(["/nonexistent/libnccl.so.2", found[0]]) == found[0]


def test_more_than_one_rank_needs_a_store():
    with pytest.raises(ConfigError, match="needs a Store"):
        NcclCollective.from_store(None, 0, rank=0, world_size=2)
    with pytest.raises(ConfigError, match=r"rank 2 is outside \[0, 2\)"):
        NcclCollective.from_store(None, 0, rank=2, world_size=2)


# --- GPU -----------------------------------------------------------------------------------------------
class _DictStore:
    rank, world_size = 0, 1

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def get(self, key: str) -> bytes:
        return self.data[key]


@pytest.mark.gpu
def test_one_rank_allreduce_through_nccl_is_captured_and_bitwise_identity():
    store = _DictStore()
    nccl = NcclCollective.from_store(store, 0)
    assert len(store.data["tr/nccl/uid"]) == 128 and nccl.world_size == 1 and nccl.handle != 0
    tw = Twin(nccl=nccl)
    tw.add("gb", (70,), "fp32", Region(Role.GRAD, FC_B))
    tw.add("gw", (70, 1, 1, 50), "fp32", Region(Role.GRAD, FC_W))
    tw.allocate()
    before = {n: tw.fill(n) for n in ("gb", "gw")}
    assert tw.gpu.world_size == 1 and tw.gpu.nccl is nccl
    _, graph = tw.run(op("range_allreduce_mean", span=G_SPAN))
    lo, hi = tw.gpu.layout.span(G_SPAN)  # the whole span, slot padding included (3712 >= 70 + 70 * 50)
    assert [o.info for o in graph.ops] == [f"ncclAllReduce avg {(hi - lo) // 4} fp32"]
    for _ in range(3):  # replays
        tw.gpu.launch(graph)
    for name, v in before.items():
        got = tw.gpu.read(tw[name]).ravel()
        assert np.array_equal(got.view(np.uint32), np.asarray(v, np.float32).ravel().view(np.uint32)), name


@pytest.mark.gpu
def test_without_nccl_more_than_one_rank_fails_at_capture():
    class TwoRanks:
        rank, world_size = 0, 2

    tw = Twin(collective=TwoRanks())
    tw.add("gb", (70,), "fp32", Region(Role.GRAD, FC_B))
    tw.allocate()
    with pytest.raises(BackendError, match="over 2 ranks needs an NCCL communicator"):
        tw.gpu.capture("comm", [op("range_allreduce_mean", span=G_SPAN)])


@pytest.mark.gpu
def test_mlp_trained_through_forced_nccl_matches_plain_cuda_bytewise(monkeypatch):
    from tr.algo.optimizer import AdamW
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    steps, batch, inputs, classes = 6, 32, 48, 10
    rng = np.random.default_rng(0)
    x = rng.standard_normal((steps * batch, 1, 1, inputs)).astype(np.float32)
    y = (x.reshape(-1, inputs) @ rng.standard_normal((inputs, classes))).argmax(1).astype(np.int32)

    def train():
        feeder = ArrayFeeder((x, y), (x[:64], y[:64]), batch, shuffle=False, num_classes=classes)
        t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(batch)).device("cuda").quiet()
             .model(seq(fc(64, True), relu(), fc(classes, True))).optimizer(AdamW().weight_decay(1e-4))
             .total_epochs(1).data(feeder))
        t.compile().run()
        return t

    monkeypatch.setenv("TR_FORCE_NCCL", "1")
    forced = train()
    monkeypatch.delenv("TR_FORCE_NCCL")
    plain = train()
    assert forced.backend.nccl is not None and plain.backend.nccl is None
    wf, wp = forced.weights(), plain.weights()
    assert wf.keys() == wp.keys() and wf
    assert all(wf[k].tobytes() == wp[k].tobytes() for k in wf)
    assert any(not np.array_equal(wf[k], 0) for k in wf)


@pytest.mark.gpu
def test_a_rank_that_never_joins_costs_a_timeout_not_a_hang():
    import time

    store = _DictStore()
    store.world_size = 2  # rank 1 never comes
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"rank 0 of 2 timed out after 3 s waiting for the other ranks to join "
                                           r"\(a rank failed to start, crashed or died\); aborted"):
        NcclCollective.from_store(store, 0, rank=0, world_size=2, timeout_s=3.0)
    assert 2.9 < time.monotonic() - t0 < 30
    # the device and NCCL stay usable: a one-rank communicator joins at once afterwards
    one = NcclCollective.local(0)
    assert one.async_error() == 0
    one.close()
    assert one.async_error() == -1


def test_join_timeout_must_be_positive():
    with pytest.raises(ConfigError, match="NCCL join timeout must be > 0"):
        NcclCollective.from_store(None, 0, rank=0, world_size=1, timeout_s=0)


@pytest.mark.gpu
def test_cnn_amp_through_forced_nccl_matches_plain_with_the_deep_bucket_beside_the_first_layer(monkeypatch):
    """AMP CNN: the deep conv gradients are cast and all-reduced on the UPDATE stream while the first layer's
    backward runs on COMP_1 (a graph path shorter than its node count), with the same bytes as the plain
    one-rank step (a chain: nothing to all-reduce, only the cast moves to the side)."""
    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.graph.blueprint import cbr, fc, flatten, maxpool, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    steps, batch, classes = 4, 16, 10
    rng = np.random.default_rng(1)
    x = rng.standard_normal((steps * batch, 8, 8, 3)).astype(np.float16)
    y = rng.integers(0, classes, steps * batch).astype(np.int32)

    def train():
        feeder = ArrayFeeder((x, y), None, batch, shuffle=False, num_classes=classes, dtype=np.float16)
        t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(batch).amp()).device("cuda").quiet()
             .model(seq(cbr(8, 3, p=1), cbr(16, 3, p=1), maxpool(2, 2), cbr(16, 3, p=1), flatten(), fc(classes, True)))
             .optimizer(SGD().momentum(0.9).weight_decay(5e-4)).total_epochs(2).data(feeder))
        t.compile().run()
        return t

    monkeypatch.setenv("TR_FORCE_NCCL", "1")
    forced = train()
    monkeypatch.delenv("TR_FORCE_NCCL")
    plain = train()
    fg, pg = forced._steps.train[0], plain._steps.train[0]
    assert any("ncclAllReduce" in o.info for o in fg.ops)
    assert fg.depth < fg.num_nodes  # the side branch is a parallel path
    assert pg.depth < pg.num_nodes  # AMP: the deep cast runs beside the first layer's backward
    wf, wp = forced.weights(), plain.weights()
    assert wf.keys() == wp.keys() and wf
    assert all(wf[k].tobytes() == wp[k].tobytes() for k in wf)


@pytest.mark.gpu
def test_training_through_nccl_runs_a_watchdog_and_stops_it(monkeypatch):
    import threading

    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 1, 1, 20)).astype(np.float32)
    y = rng.integers(0, 4, 64).astype(np.int32)
    monkeypatch.setenv("TR_FORCE_NCCL", "1")
    t = (DeepLearningTask(Settings().manual_seed(1).global_batch_size(16)).device("cuda").quiet()
         .model(seq(fc(16, True), relu(), fc(4, True))).optimizer(SGD()).total_epochs(2)
         .data(ArrayFeeder((x, y), None, 16, num_classes=4)))
    t.compile()
    seen = []
    t.on_step(lambda k, r: seen.append(any(th.name == "tr-nccl-watchdog" for th in threading.enumerate())))
    t.run()
    assert seen and all(seen)
    assert t._launch.watchdog.failure is None and t._launch.watchdog.armed is False
    assert not any(th.name == "tr-nccl-watchdog" for th in threading.enumerate())
