"""The CPU backend's API: get_backend, allocate/view/read/write, capture validation, launch, counters."""

import numpy as np
import pytest
from backend_testkit import FC_W, TEMP_FP32, SimpleArena, op, run

from tr.backend import Backend, CapturedGraph, CpuBackend, get_backend
from tr.core.errors import BackendError, ConfigError, DeviceUnavailableError, DTypeError, ShapeError
from tr.core.memory import Region, Role
from tr.core.ops import OpCall
from tr.core.shape import Shape
from tr.tensor.dtensor import DTensor


def test_get_backend():
    be = get_backend("cpu")
    assert isinstance(be, CpuBackend) and isinstance(be, Backend)
    assert get_backend("auto").name in ("cpu", "cuda")
    with pytest.raises(ConfigError, match="unknown backend 'tpu'"):
        get_backend("tpu")


def test_cuda_unavailable_is_a_clear_error():
    from tr.backend.registry import cuda_available

    if cuda_available():
        pytest.skip("a CUDA backend is available here")
    with pytest.raises(DeviceUnavailableError, match="backend 'cuda' is unavailable"):
        get_backend("cuda")


def test_allocate_view_read_write():
    a = SimpleArena()
    x = a.add("x", (2, 3, 4, 5))
    h = a.add("h", (3, 1, 1, 8), "fp16")
    bf = a.add("bf", (4,), "bf16")
    lab = a.add("lab", (6,), "int32")
    be = a.allocate()
    assert be.arena.nbytes == be.layout.total_bytes and be.arena.ctypes.data % 64 == 0
    assert not be.arena.any()  # the arena starts zeroed
    assert be.view(x).shape == (2, 3, 4, 5) and be.view(x).dtype == np.float32
    assert be.view(h).dtype == np.float16 and be.view(bf).dtype == np.uint16
    v = be.view(x)
    v[1, 2, 3, 4] = 7.0  # a view aliases the arena
    assert be.read(x)[1, 2, 3, 4] == 7.0
    r = be.read(x)
    r[0, 0, 0, 0] = 9.0  # read returns a copy
    assert be.view(x)[0, 0, 0, 0] == 0.0
    be.write(x, np.arange(120))  # any shape with the right element count
    assert be.read(x).ravel()[119] == 119
    be.write(bf, [1.0, -2.0, 0.5, 3.0])
    np.testing.assert_array_equal(be.read(bf).ravel(), [0x3F80, 0xC000, 0x3F00, 0x4040])
    with pytest.raises(ShapeError, match="cannot write"):
        be.write(x, np.zeros(7))
    with pytest.raises(DTypeError):
        be.write(lab, np.full(6, 0.5))
    with pytest.raises(BackendError, match="already holds an arena"):
        be.allocate(a.layout())


def test_use_before_allocate():
    be = CpuBackend()
    t = DTensor(0, "x", TEMP_FP32, Shape(1, 1, 1, 4), DType_fp32(), 256, offset=0)
    with pytest.raises(BackendError, match="allocate"):
        be.view(t)
    with pytest.raises(BackendError, match="allocate"):
        be.capture("g", [])


def DType_fp32():
    from tr.core.dtype import DType

    return DType.FP32


def _two():
    a = SimpleArena()
    x, y = a.add("x", (2, 1, 1, 4)), a.add("y", (2, 1, 1, 4))
    return a, x, y


def test_capture_errors_name_graph_op_and_layer():
    a, x, y = _two()
    be = a.allocate()
    bogus = OpCall("no_such_op", {}, layer=3)
    with pytest.raises(BackendError, match=r"graph 'DEEP', op #1 no_such_op \(layer 3\): .*not in the op catalogue"):
        be.capture("DEEP", [op("copy", x=x, y=y), bogus])
    unplaced = DTensor(9, "u", TEMP_FP32, Shape(2, 1, 1, 4), x.dtype, x.slot_bytes)
    with pytest.raises(BackendError, match=r"op #0 copy \(layer 5, fc3\): argument 'x' = .* has no offset"):
        be.capture("g", [op("copy", layer=5, label="fc3", x=unplaced, y=y)])
    unallocated = DTensor(9, "z", TEMP_FP32, Shape(2, 1, 1, 4), x.dtype, 0, offset=x.offset)
    with pytest.raises(BackendError, match=r"op #0 copy \(no layer\): argument 'x' = .* is not allocated "
                                           r"\(slot_bytes 0\)"):
        be.capture("g", [op("copy", x=unallocated, y=y)])
    big = DTensor(9, "b", TEMP_FP32, Shape(4, 1, 1, 64), x.dtype, 2048, offset=y.offset)
    with pytest.raises(BackendError, match=rf"'x' = .* needs bytes \[{y.offset}, {y.offset + 1024}\) but region "
                                           rf"temp/fp32 is \[0, {y.end}\)"):
        be.capture("g", [op("copy", x=big, y=y)])
    stray = DTensor(9, "s", Region(Role.PARAM, FC_W), Shape(2, 1, 1, 4), x.dtype, x.slot_bytes, offset=x.offset)
    with pytest.raises(BackendError, match=r"'x' = .* lies in region param/fc_w, which the arena layout does not "
                                           r"hold \(it has temp/fp32\)"):
        be.capture("g", [op("copy", x=stray, y=y)])


def test_overlap_rules_follow_the_catalogue():
    a, x, y = _two()
    be = a.allocate()
    with pytest.raises(BackendError, match=r"op #0 act_fwd .*'x' .* and 'y' .* overlap"):
        be.capture("g", [op("act_fwd", x=x, y=x, kind="relu")])
    be.write(x, [-1, 2, -3, 4, 5, -6, 7, 8])
    be.write(y, np.ones(8))
    run(be, op("act_bwd", x=x, dy=y, dx=y, kind="relu"))  # declared in place: allowed
    np.testing.assert_array_equal(be.read(y).ravel(), [0, 1, 0, 1, 1, 0, 1, 1])


def test_launch_counters_and_foreign_graphs():
    a, x, y = _two()
    be = a.allocate()
    g = be.capture("g", [op("copy", x=x, y=y), op("accumulate", x=x, y=y)])
    assert isinstance(g, CapturedGraph) and g.num_ops == 2 and g.name == "g"
    for _ in range(3):
        be.launch(g)
    be.synchronize()
    assert be.launches == 3 and be.host_time_s > 0
    be.reset_counters()
    assert be.launches == 0 and be.host_time_s == 0
    other, *_ = _two()
    with pytest.raises(BackendError, match="not captured by this CPU backend"):
        other.allocate().launch(g)


def test_empty_graph():
    a, *_ = _two()
    be = a.allocate()
    g = be.capture("nothing", [])
    be.launch(g)
    assert g.num_ops == 0 and be.launches == 1


def test_blas_threads_knob():
    from tr.backend.cpu.blas import blas_threads, set_blas_threads

    before = blas_threads()
    if before is None:
        pytest.skip("numpy does not use a reachable OpenBLAS here")
    try:
        CpuBackend(threads=1)
        assert blas_threads() == 1
        assert set_blas_threads(2) and blas_threads() == 2
        with pytest.raises(ConfigError, match="BLAS threads"):
            set_blas_threads(0)
    finally:
        set_blas_threads(before)


def test_capture_accepts_any_iterable_and_reports_numpy_errors_at_launch():
    a, x, y = _two()
    be = a.allocate()
    g = be.capture("gen", (c for c in [op("copy", x=x, y=y)]))
    assert g.num_ops == 1 and len(g.calls) == 1
    g.steps = (g.steps[0], lambda: np.zeros(2) + np.zeros(3))  # a failing closure: wrapped with its op
    g.wheres = (g.wheres[0], "graph 'gen', op #1 fake (no layer)")
    with pytest.raises(BackendError, match=r"graph 'gen', op #1 fake \(no layer\): ValueError"):
        be.launch(g)
    assert be.launches == 1
