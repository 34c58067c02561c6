"""h2d_copy: the first N samples of host buffer A or B land in the device input tensors."""

import numpy as np
import pytest
from backend_testkit import A_DATA, A_LABEL, B_DATA, B_LABEL, SimpleArena, op

from tr.core.memory import Region, Role


def _buffers(b, shape, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [(rng.integers(0, 10, b).astype(np.int32), rng.standard_normal((b, *shape)).astype(dtype))
            for _ in range(2)]


def test_h2d_copy_full_and_last_batch():
    a = SimpleArena()
    la = a.add("la", (4, 1, 1, 1), "int32", Region(Role.INPUT, A_LABEL))
    da = a.add("da", (4, 3, 3, 2), "fp32", Region(Role.INPUT, A_DATA))
    lb = a.add("lb", (3, 1, 1, 1), "int32", Region(Role.INPUT, B_LABEL))
    db = a.add("db", (3, 3, 3, 2), "fp32", Region(Role.INPUT, B_DATA))
    be = a.allocate()
    ga = be.capture("transfer_a", [op("h2d_copy", labels=la, data=da, buffer=0)])
    gb = be.capture("transfer_b", [op("h2d_copy", labels=lb, data=db, buffer=1)])
    with pytest.raises(Exception, match="no host buffers are bound"):
        be.launch(ga)
    bufs = _buffers(4, (3, 3, 2))
    be.bind_host_buffers(bufs)
    be.launch(ga)
    be.launch(gb)
    np.testing.assert_array_equal(be.read(la).ravel(), bufs[0][0])
    np.testing.assert_array_equal(be.read(da), bufs[0][1])
    np.testing.assert_array_equal(be.read(lb).ravel(), bufs[1][0][:3])  # a smaller last batch: first 3
    np.testing.assert_array_equal(be.read(db), bufs[1][1][:3])
    bufs[0][1][:] = 5.0  # the binding is to the arrays themselves: refilled buffers are seen next launch
    be.launch(ga)
    assert np.all(be.read(da) == 5.0)


def test_h2d_casts_to_fp16_and_checks_shapes():
    a = SimpleArena()
    la, da = a.add("la", (2, 1, 1, 1), "int32"), a.add("da", (2, 4, 4, 3), "fp16")
    be = a.allocate()
    be.bind_host_buffers(_buffers(2, (4, 4, 3), np.float16))
    g = be.capture("t", [op("h2d_copy", labels=la, data=da, buffer=1)])
    be.launch(g)
    assert be.read(da).dtype == np.float16
    with pytest.raises(Exception, match=r"op #0 h2d_copy .*cannot supply"):
        be.bind_host_buffers(_buffers(2, (4, 4, 4), np.float16))
    with pytest.raises(Exception, match="labels must be int32"):
        be.bind_host_buffers([(np.zeros(2, np.int64), np.zeros((2, 4, 4, 3)))] * 2)
