"""TransferStation on its own: zone layout, buffers handed in, dtype parsing, waiting with a timeout.
(Driving epochs through it is in test_preprocessor.py.)"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tr.core.dtype import DType
from tr.core.errors import ConfigError, ShapeError
from tr.data import TransferStation


def test_layout_is_256_aligned():
    lay = TransferStation.layout(100, (28, 28, 1), "float32")
    assert lay.label_offset == 0 and lay.label_bytes == 512 and lay.data_offset == 512
    assert lay.data_bytes == -(-100 * 28 * 28 * 4 // 256) * 256
    assert TransferStation.layout(3, (5, 5, 1), "float16").data_bytes == 256
    assert lay.zone_bytes == lay.data_offset + lay.data_bytes and lay.zone_bytes % 256 == 0


def test_default_buffers_are_aligned_views():
    st = TransferStation(3, (4, 5, 3), DType.FP16)
    for z in range(2):
        labels, data = st.zone(z)
        assert labels.shape == (3,) and labels.dtype == np.int32
        assert data.shape == (3, 4, 5, 3) and data.dtype == np.float16
        assert data.ctypes.data % 256 == 0 and labels.ctypes.data % 256 == 0
        raw = st.raw_zone(z)
        assert raw.nbytes == TransferStation.layout(3, (4, 5, 3), "float16").zone_bytes
    assert st.sample_bytes == 4 * 5 * 3 * 2


def test_ctypes_memory_as_a_pinned_buffer_stand_in():
    lay = TransferStation.layout(2, (2, 2, 1), "fp32")
    mem = [(ctypes.c_uint8 * lay.zone_bytes)() for _ in range(2)]
    st = TransferStation(2, (2, 2, 1), "fp32", buffers=mem)
    labels, data = st.zone(1)
    data[0, 0, 0, 0] = 1.5
    assert np.frombuffer(mem[1], np.float32, count=1, offset=lay.data_offset)[0] == 1.5


def test_bad_arguments():
    lay = TransferStation.layout(8, (4, 4, 1))
    with pytest.raises(ConfigError, match="holds 10 bytes; a zone needs"):
        TransferStation(8, (4, 4, 1), buffers=[bytearray(10), bytearray(lay.zone_bytes)])
    with pytest.raises(ConfigError, match="read-only"):
        TransferStation(8, (4, 4, 1), buffers=[bytes(lay.zone_bytes), bytearray(lay.zone_bytes)])
    with pytest.raises(ConfigError, match="two zones"):
        TransferStation(8, (4, 4, 1), buffers=[bytearray(lay.zone_bytes)])
    with pytest.raises(ConfigError, match="labels must be C-contiguous int32"):
        TransferStation(8, (4, 4, 1), buffers=[(np.zeros(8, np.int64), np.zeros((8, 4, 4, 1), np.float32))] * 2)
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1, got 0"):
        TransferStation(0, (4, 4, 1))
    with pytest.raises(ShapeError, match="positive"):
        TransferStation(1, (4, 0, 1))
    with pytest.raises(ConfigError, match="float32, float16 or bfloat16, got int8"):
        TransferStation(1, (4, 4, 1), "int8")


def test_acquire_times_out_without_producers():
    st = TransferStation(4, (2, 2, 1))
    st._native.begin_epoch(2, 4)  # an epoch nobody fills
    with pytest.raises(TimeoutError, match="batch 0 was not ready within 0.01 s"):
        st.acquire(0, timeout=0.01)
    st.abort()
    from tr.data import EpochCancelled

    with pytest.raises(EpochCancelled):
        st.acquire(0, timeout=1.0)
