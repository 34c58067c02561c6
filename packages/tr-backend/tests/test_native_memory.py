"""DeviceArena and PinnedBuffer of tr.backend._native: byte-exact round trips, alignment, range checks and
clean errors (GPU tests), and DeviceUnavailableError naming the cause where CUDA is unavailable."""

from __future__ import annotations

import numpy as np
import pytest

from tr.backend.cuda.native import load_native
from tr.core.errors import ConfigError, DeviceUnavailableError, OutOfMemoryError

LOADED = load_native()
native = LOADED.module
pytestmark = pytest.mark.skipif(native is None, reason=f"extension missing: {LOADED.error}")

MiB = 1 << 20


@pytest.fixture
def gpu() -> int:
    """Device 0; skips when CUDA is unavailable (the root conftest.py already skips gpu-marked tests)."""
    available, reason = native.cuda_status()
    if not available:
        pytest.skip(f"no usable CUDA device: {reason}")
    return 0


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def test_alignment_constant():
    assert native.ARENA_ALIGNMENT == 256


def test_without_cuda_memory_objects_raise_the_reason():
    available, reason = native.cuda_status()
    if available:
        pytest.skip("a CUDA device is available")
    for make in (lambda: native.DeviceArena(4096), lambda: native.PinnedBuffer(4096)):
        with pytest.raises(DeviceUnavailableError) as info:
            make()
        assert str(info.value) == f"CUDA unavailable: {reason}"


@pytest.mark.gpu
def test_arena_rounds_up_and_aligns(gpu):
    arena = native.DeviceArena(1000, gpu)
    assert arena.size == 1024
    assert arena.device == gpu
    assert arena.ptr != 0 and arena.ptr % 256 == 0
    assert repr(arena) == f"DeviceArena(size=1024, device=0, ptr={arena.ptr:#x})"


@pytest.mark.gpu
def test_memset_upload_download_round_trip(gpu):
    arena = native.DeviceArena(1 * MiB, gpu)
    arena.memset(0xAB)
    out = np.zeros(arena.size, np.uint8)
    arena.download(out)
    assert np.all(out == 0xAB)

    data = random_bytes(1000)
    arena.upload(data, offset=4096)
    arena.memset(0x00, offset=8192, nbytes=256)
    arena.download(out)
    assert np.all(out[:4096] == 0xAB)
    np.testing.assert_array_equal(out[4096:5096], data)
    assert np.all(out[5096:8192] == 0xAB)
    assert np.all(out[8192:8448] == 0)
    assert np.all(out[8448:] == 0xAB)

    part = np.empty(100, np.uint8)
    arena.download(part, offset=4096 + 17)
    np.testing.assert_array_equal(part, data[17:117])


@pytest.mark.gpu
def test_any_dtype_crosses_as_bytes(gpu):
    arena = native.DeviceArena(64 * 1024, gpu)
    src = np.random.default_rng(1).standard_normal((16, 32, 3)).astype(np.float32)
    arena.upload(src, offset=256)
    back = np.empty_like(src)
    arena.download(back, offset=256)
    np.testing.assert_array_equal(back, src)
    arena.upload(b"\x01\x02\x03\x04", offset=0)
    four = np.empty(4, np.uint8)
    arena.download(four)
    assert four.tolist() == [1, 2, 3, 4]


@pytest.mark.gpu
def test_ranges_outside_the_arena_are_config_errors(gpu):
    arena = native.DeviceArena(1024, gpu)
    with pytest.raises(ConfigError, match=r"upload: byte range \[1000, 1000 \+ 100\) exceeds the arena of 1024"):
        arena.upload(np.zeros(100, np.uint8), offset=1000)
    with pytest.raises(ConfigError, match=r"download: byte range \[0, 0 \+ 2048\) exceeds the arena of 1024"):
        arena.download(np.zeros(2048, np.uint8))
    with pytest.raises(ConfigError, match="memset offset 4096 exceeds the arena of 1024 bytes"):
        arena.memset(1, offset=4096)
    with pytest.raises(ConfigError, match=r"memset value must be in \[0, 255\], got 256"):
        arena.memset(256)


@pytest.mark.gpu
def test_download_refuses_targets_it_cannot_fill(gpu):
    arena = native.DeviceArena(1024, gpu)
    with pytest.raises(TypeError):
        arena.download(np.zeros(64, np.uint8)[::2])  # not contiguous: a copy would receive the bytes
    frozen = np.zeros(64, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(TypeError):
        arena.download(frozen)


@pytest.mark.gpu
def test_arena_memory_is_taken_and_given_back(gpu):
    size = 256 * MiB
    before = native.free_memory(gpu)
    arena = native.DeviceArena(size, gpu)
    during = native.free_memory(gpu)
    assert before - during >= size
    del arena
    after = native.free_memory(gpu)
    assert after - during >= size


@pytest.mark.gpu
def test_too_large_arena_is_out_of_memory(gpu):
    total = native.device_properties(gpu).total_memory
    expected = rf"cudaMalloc of {2 * total} bytes on device {gpu} failed: out of memory \(cudaErrorMemoryAllocation\)"
    with pytest.raises(OutOfMemoryError, match=expected):
        native.DeviceArena(2 * total, gpu)
    arena = native.DeviceArena(4096, gpu)  # the failure leaves the device usable
    arena.memset(7)


@pytest.mark.gpu
def test_pinned_buffer_view_round_trips_through_the_arena(gpu):
    pinned = native.PinnedBuffer(8192)
    view = pinned.array()
    assert view.dtype == np.uint8 and view.shape == (8192,)
    assert view.flags.writeable and view.flags.c_contiguous
    assert view.ctypes.data == pinned.ptr
    assert repr(pinned) == f"PinnedBuffer(size=8192, ptr={pinned.ptr:#x})"
    data = random_bytes(8192, seed=2)
    view[:] = data
    assert np.shares_memory(view, pinned.array())

    arena = native.DeviceArena(8192, gpu)
    arena.upload(view)
    view[:] = 0
    arena.download(view)
    np.testing.assert_array_equal(view, data)

    del pinned  # the view keeps the buffer alive
    assert int(view.sum(dtype=np.int64)) == int(data.sum(dtype=np.int64))
