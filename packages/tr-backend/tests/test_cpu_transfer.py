"""h2d_copy: the first N samples of host buffer A or B land in the device input tensors; float32 host data into
an FP16 or BF16 tensor is rounded once (BF16 to torch's bfloat16, bit for bit), 16-bit host data is copied."""

import numpy as np
import pytest
import torch
from backend_testkit import A_DATA, A_LABEL, B_DATA, B_LABEL, SimpleArena, as_dtype, op, rounded, values

from tr.core.errors import DTypeError
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


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_h2d_rounds_float32_host_data_into_a_16_bit_tensor(dtype):
    a = SimpleArena()
    la, da = a.add("la", (3, 1, 1, 1), "int32"), a.add("da", (3, 4, 4, 4), dtype)
    be = a.allocate()
    bufs = _buffers(4, (4, 4, 4))  # float32, one more sample than the batch
    bufs[0][1].reshape(-1)[:6] = [np.inf, -np.inf, 3.4e38, 1e-40, 1.00390625, 1.01171875]  # overflow, ties
    g = be.capture("t", [op("h2d_copy", labels=la, data=da, buffer=0)])
    be.bind_host_buffers(bufs)
    be.launch(g)
    got = be.read(da)
    assert got.dtype == (np.uint16 if dtype == "bf16" else np.float16)  # BF16: bit patterns
    np.testing.assert_array_equal(values(got), rounded(bufs[0][1][:3], dtype))
    if dtype == "bf16":
        want = torch.from_numpy(bufs[0][1][:3].copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_h2d_copies_16_bit_host_data(dtype):
    a = SimpleArena()
    la, da = a.add("la", (2, 1, 1, 1), "int32"), a.add("da", (2, 3, 3, 4), dtype)
    be = a.allocate()
    g = be.capture("t", [op("h2d_copy", labels=la, data=da, buffer=1)])
    host = [(labels, as_dtype(data, dtype)[0]) for labels, data in _buffers(2, (3, 3, 4))]
    be.bind_host_buffers(host)
    be.launch(g)
    np.testing.assert_array_equal(be.read(da), host[1][1])  # the host's 16-bit values (BF16 bits) as they are
    if dtype == "bf16":  # float32 values or the bit patterns: a numpy cast of other data would write values as bits
        for other in (np.float16, np.float64, np.uint8, np.bool_):
            with pytest.raises(DTypeError, match=f"host buffer B data is {np.dtype(other).name}, the device tensor "
                                                 r"BF16 \(uint16\)"):
                be.bind_host_buffers([(labels, data.astype(other)) for labels, data in host])


def test_a_packed_copy_reads_the_first_elements_of_a_larger_buffer():
    """Progressive resizing: a smaller side's batch lies packed at the start of the final side's buffer."""
    a = SimpleArena()
    la, da = a.add("la", (3, 1, 1, 1), "int32"), a.add("da", (3, 2, 2, 2), "fp32")
    be = a.allocate()
    g = be.capture("t", [op("h2d_copy", labels=la, data=da, buffer=0, packed=True)])
    bufs = _buffers(4, (3, 3, 2))  # the final side's [4, 3, 3, 2] buffers
    be.bind_host_buffers(bufs)
    be.launch(g)
    np.testing.assert_array_equal(be.read(da).ravel(), bufs[0][1].ravel()[:3 * 2 * 2 * 2])
    np.testing.assert_array_equal(be.read(la).ravel(), bufs[0][0][:3])
    bufs[0][1].reshape(-1)[:24] = 7.0  # the view follows refills
    be.launch(g)
    assert np.all(be.read(da) == 7.0)
    with pytest.raises(Exception, match=r"cannot supply .*packed at \(2, 2, 2\)"):
        be.bind_host_buffers(_buffers(4, (3, 3, 3)))  # other channels
    unpacked = a.allocate().capture("u", [op("h2d_copy", labels=la, data=da, buffer=0)])
    with pytest.raises(Exception, match=r"cannot supply .*first 3 samples"):
        unpacked.backend.bind_host_buffers(bufs)  # without packed: the exact sample shape only
