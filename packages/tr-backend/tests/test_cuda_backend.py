"""The CUDA backend's machinery: clean failure without a device; on a GPU the arena round trip, the
out-of-memory check before any allocation, capture errors naming graph/op/layer, pinned host buffers and
h2d_copy re-pointing, and graph replays that give identical bytes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from backend_testkit import A_DATA, A_LABEL, B_DATA, B_LABEL, SCALAR_FP32, TEMP_FP32, op
from cuda_testkit import Twin, cuda_backend

from tr.backend import registry
from tr.backend.cuda import cuda_status, extern_kernel, is_available
from tr.backend.cuda import ops as ops_package
from tr.backend.cuda.native import load_native
from tr.backend.cuda.signatures import all_ops
from tr.backend.cuda.signatures.copy import DEBUG_INVALID_LAUNCH
from tr.core.errors import BackendError, DeviceUnavailableError, OutOfMemoryError, ShapeError
from tr.core.memory import Region, Role, Span
from tr.core.ops import CATALOGUE
from tr.tensor.layout import ArenaLayout

native = load_native().module


# --- no device needed ----------------------------------------------------------------------------------
def test_every_catalogued_op_has_a_cuda_builder():
    assert registry.missing_ops("cuda") == []
    assert set(registry.op_impls("cuda")) == set(CATALOGUE)


def test_cuda_builders_live_in_their_family_module():
    for name, impl in registry.op_impls("cuda").items():
        assert impl.__module__ == f"tr.backend.cuda.ops.{CATALOGUE[name].family}", (name, impl.__module__)


def test_every_declared_native_op_is_made_by_a_builder():
    """No declaration outlives its builder: each native op is made by a CUDA builder (debug_invalid_launch by the
    capture-failure test below)."""
    sources = [*Path(ops_package.__file__).parent.glob("*.py"), Path(extern_kernel.__file__)]
    declared = {op.name.upper() for _, op in all_ops()}
    named = {m for f in sources for m in re.findall(r"\b[A-Z][A-Z0-9_]+\b", f.read_text())}  # SCALE_FWD, ...
    assert len(declared) >= 55
    assert declared - named == {"DEBUG_INVALID_LAUNCH"}, sorted(declared - named)


def test_without_a_device_the_backend_raises_naming_the_reason():
    available, reason = cuda_status()
    if available:
        pytest.skip("a CUDA device is usable here")
    assert not is_available()
    with pytest.raises(DeviceUnavailableError) as info:
        cuda_backend()
    assert reason in str(info.value)
    with pytest.raises(DeviceUnavailableError, match="unavailable"):
        registry.get_backend("cuda")
    assert registry.get_backend("auto").name == "cpu"


# --- GPU -----------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_auto_backend_is_cuda_and_arena_round_trips():
    be = registry.get_backend("auto")
    assert be.name == "cuda"
    tw = Twin()
    tw.add("a", (3, 4, 5, 6))
    tw.add("h", (7, 1, 1, 9), "fp16")
    tw.add("i", (5,), "int32")
    tw.add("bf", (11,), "bf16")
    tw.allocate()
    rng = np.random.default_rng(0)
    for name in ("a", "h", "i", "bf"):
        tensor = tw[name]
        v = rng.integers(-9, 9, tensor.numel) if name == "i" else rng.normal(size=tensor.numel).astype(np.float32)
        tw.write(name, v)
        c, g = tw.both(name)
        assert g.dtype == c.dtype and g.shape == tensor.shape.dims
        assert np.array_equal(c.view(np.uint8), g.view(np.uint8)), name
    with pytest.raises(BackendError, match="cannot be viewed"):
        tw.gpu.view(tw["a"])


@pytest.mark.gpu
def test_a_write_lands_before_the_next_launch_reads_or_writes_it():
    """write() returns when the bytes are on the device: a graph launched right after (on a non-blocking stream)
    reads the new values, and its outputs are not overwritten by a write still in flight (a pageable
    cudaMemcpy returns once staged; the softmax_ce backward's test once saw its poison land after the kernel)."""
    n = 8 << 20  # 32 MiB of FP32: many staging chunks
    tw = Twin()
    tw.add("x", (n,))
    tw.add("y", (n,))
    tw.allocate()
    copy = tw.gpu.capture("copy", [op("copy", x=tw["x"], y=tw["y"])])
    for i in range(1, 9):
        tw.gpu.write(tw["x"], np.full(n, float(i), np.float32))
        tw.gpu.write(tw["y"], np.full(n, np.nan, np.float32))  # poison, then the copy must overwrite all of it
        tw.gpu.launch(copy)
        y = tw.gpu.read(tw["y"])
        assert not np.isnan(y).any() and (y == i).all(), (i, int(np.isnan(y).sum()), np.unique(y)[:4])


@pytest.mark.gpu
def test_plan_larger_than_free_memory_raises_before_allocating():
    be = cuda_backend()
    huge = 1 << 44  # 16 TiB
    regions = {TEMP_FP32: (0, huge)}
    free = be.native.free_memory(0)
    with pytest.raises(OutOfMemoryError) as info:
        be.allocate(ArenaLayout(huge, regions))
    msg = str(info.value)
    assert f"needs {huge} bytes" in msg and "bytes free" in msg
    assert abs(int(msg.split(" has ")[1].split(" bytes free")[0]) - free) < (1 << 30)
    assert be.layout is None  # nothing was allocated


@pytest.mark.gpu
def test_binding_error_names_graph_op_and_layer():
    tw = Twin()
    tw.add("x", (4, 1, 1, 8))
    tw.add("w", (5, 1, 1, 8))
    tw.add("y", (4, 1, 1, 6))
    tw.allocate()
    call = op("fc_fwd", layer=3, label="fc2", x=tw["x"], w=tw["w"], y=tw["y"])
    with pytest.raises(ShapeError, match=r"graph 'train', op #0 fc_fwd \(layer 3, fc2\): y .* must be \[4"):
        tw.gpu.capture("train", [call])


@pytest.mark.gpu
def test_capture_failure_names_graph_op_and_layer(monkeypatch):
    tw = Twin()
    tw.add("s", (4,), "fp32", SCALAR_FP32)
    tw.add("x", (4,))
    tw.add("y", (4,))
    tw.allocate()
    table = registry._OPS["cuda"]
    monkeypatch.setitem(table, "copy", lambda b: b.make(DEBUG_INVALID_LAUNCH))
    calls = [op("range_clear", span=Span.of(Role.SCALAR)), op("copy", layer=7, label="skip", x=tw["x"], y=tw["y"])]
    with pytest.raises(BackendError, match=r"graph 'deep', op #1 copy \(layer 7, skip\): capture failed: .*invalid"):
        tw.gpu.capture("deep", calls)
    monkeypatch.undo()
    g = tw.gpu.capture("deep", calls)  # the failed capture left the stream usable
    tw.write("x", [1, 2, 3, 4])
    tw.gpu.launch(g)
    assert tw.gpu.read(tw["y"]).ravel().tolist() == [1, 2, 3, 4]


@pytest.mark.gpu
def test_launch_without_host_buffers_fails_clearly():
    tw = Twin()
    tw.add("labels", (4, 1, 1, 1), "int32", Region(Role.INPUT, A_LABEL))
    tw.add("x", (4, 2, 2, 1), "fp32", Region(Role.INPUT, A_DATA))
    tw.allocate()
    g = tw.gpu.capture("xfer", [op("h2d_copy", labels=tw["labels"], data=tw["x"], buffer=0)])
    with pytest.raises(BackendError, match="no host buffers are bound"):
        tw.gpu.launch(g)


def _h2d_twin():
    tw = Twin()
    tw.add("labels", (4, 1, 1, 1), "int32", Region(Role.INPUT, A_LABEL))
    tw.add("x", (4, 3, 2, 1), "fp32", Region(Role.INPUT, A_DATA))
    tw.add("labels_b", (3, 1, 1, 1), "int32", Region(Role.INPUT, B_LABEL))
    tw.add("x_b", (3, 3, 2, 1), "fp32", Region(Role.INPUT, B_DATA))
    return tw.allocate()


@pytest.mark.gpu
def test_pinned_host_buffers_feed_h2d_copy_and_rebinding_repoints_the_graph():
    tw = _h2d_twin()
    be = tw.gpu
    calls = [op("h2d_copy", labels=tw["labels"], data=tw["x"], buffer=0),
             op("h2d_copy", labels=tw["labels_b"], data=tw["x_b"], buffer=1)]
    g = be.capture("xfer", calls)  # captured before any buffer is bound: reads placeholders
    (la, da), (lb, db) = be.host_buffers(4, (3, 2, 1), "fp32")
    assert la.dtype == np.int32 and da.shape == (4, 3, 2, 1) and da.flags.c_contiguous
    be.bind_host_buffers([(la, da), (lb, db)])
    rng = np.random.default_rng(5)
    for step in range(3):  # the feeder refills the same pinned arrays; the graph follows
        la[:] = rng.integers(0, 10, 4)
        da[:] = rng.normal(size=da.shape)
        lb[:] = rng.integers(0, 10, 4)
        db[:] = rng.normal(size=db.shape)
        be.launch(g)
        assert np.array_equal(be.read(tw["labels"]).ravel(), la), step
        assert np.array_equal(be.read(tw["x"]), da)
        assert np.array_equal(be.read(tw["labels_b"]).ravel(), lb[:3])
        assert np.array_equal(be.read(tw["x_b"]), db[:3])
    # ordinary numpy arrays: page-locked on binding, nodes re-pointed, no new capture
    other = [(np.arange(4, dtype=np.int32), np.full((4, 3, 2, 1), 2.5, np.float32)),
             (np.arange(5, dtype=np.int32) + 7, np.full((5, 3, 2, 1), -1.0, np.float32))]
    be.bind_host_buffers(other)
    be.launch(g)
    assert np.array_equal(be.read(tw["labels"]).ravel(), [0, 1, 2, 3])
    assert np.all(be.read(tw["x"]) == 2.5)
    assert np.array_equal(be.read(tw["labels_b"]).ravel(), [7, 8, 9])
    assert np.all(be.read(tw["x_b"]) == -1.0)
    with pytest.raises(ShapeError, match="cannot supply"):
        be.bind_host_buffers([(la, da), (np.zeros(2, np.int32), np.zeros((2, 3, 2, 1), np.float32))])


@pytest.mark.gpu
def test_events_order_streams_and_launch_counters():
    tw = Twin()
    tw.add("x", (1024,))
    tw.add("y", (1024,))
    tw.allocate()
    be = tw.gpu
    tw.write("x", np.arange(1024, dtype=np.float32))
    g1 = be.capture("a", [op("copy", x=tw["x"], y=tw["y"])], stream=0)
    g2 = be.capture("b", [op("act_inf", x=tw["y"], y=tw["x"], kind="relu")], stream=4)
    be.reset_counters()
    ev = be.event()
    be.launch(g1)
    ev.record(0)
    ev.wait(4)
    be.launch(g2)
    be.synchronize()
    assert be.launches == 2 and be.host_time_s > 0
    assert np.array_equal(be.read(tw["x"]).ravel(), np.arange(1024, dtype=np.float32))
    assert g1.num_nodes == 1 and g2.num_nodes == 1


@pytest.mark.gpu
def test_cupy_view_is_zero_copy():
    cupy = pytest.importorskip("cupy")
    from backend_testkit import ACTIVATION_FP32, SimpleArena

    from tr.backend.cuda import CudaBackend
    a = SimpleArena()
    t = a.add("x", (2, 3, 4, 5), "fp32", ACTIVATION_FP32)
    be = CudaBackend()
    be.allocate(a.layout())
    be.write(t, np.arange(120, dtype=np.float32))
    v = be.cupy_view(t)
    assert v.shape == (2, 3, 4, 5) and float(v.sum()) == float(np.arange(120).sum())
    v *= 2  # writes through to the arena
    cupy.cuda.runtime.deviceSynchronize()
    assert np.array_equal(be.read(t).reshape(-1), 2 * np.arange(120, dtype=np.float32))


@pytest.mark.gpu
def test_branches_become_parallel_paths_of_one_graph():
    from tr.core.phase import StreamKind as S
    from tr.tensor.program import Branch

    tw = Twin()
    for n in ("x", "y", "z", "w", "v"):
        tw.add(n, (1 << 16,))
    tw.allocate()
    be = tw.gpu
    x = np.linspace(-1, 1, 1 << 16, dtype=np.float32)
    tw.write("x", x)
    branches = [
        Branch(S.COMP_1, (op("copy", x=tw["x"], y=tw["y"]),)),
        Branch(S.UPDATE, (op("act_inf", x=tw["y"], y=tw["z"], kind="relu"),), (0,)),
        Branch(S.COMP_1, (op("copy", x=tw["x"], y=tw["w"]),), (0,)),
        Branch(S.COMP_1, (op("copy", x=tw["z"], y=tw["v"]),), (1, 2)),
    ]
    g = be.capture_branches("step", branches)
    chain = be.capture("chain", [c for b in branches for c in b.calls])
    # the relu on UPDATE and the second copy on COMP_1 have no path between them
    assert g.num_nodes == chain.num_nodes == 4
    assert chain.depth == 4 and g.depth == 3
    for _ in range(3):
        be.launch(g)
    be.synchronize()
    assert np.array_equal(be.read(tw["v"]).ravel(), np.maximum(x, 0))
    assert np.array_equal(be.read(tw["w"]).ravel(), x)
    # the side stream left the capture with end(): it captures and runs a graph of its own
    be.launch(be.capture("again", [op("copy", x=tw["v"], y=tw["y"])], stream=4), 4)
    be.synchronize()
    assert np.array_equal(be.read(tw["y"]).ravel(), np.maximum(x, 0))
