"""tr.backend.cuda (device.py, native.py): availability never raises, the reason always names the cause, and
device queries agree with the extension; GPU tests check real properties and the probe kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tr.backend.cuda as cuda
from tr.backend.cuda import device as device_module
from tr.backend.cuda.native import NativeLoad, load_native
from tr.core.errors import ConfigError, DeviceUnavailableError

MISSING = "tr.backend._no_such_native_module"


@pytest.fixture
def gpu() -> int:
    """Device 0; skips when CUDA is unavailable (the root conftest.py already skips gpu-marked tests)."""
    available, reason = cuda.cuda_status()
    if not available:
        pytest.skip(f"no usable CUDA device: {reason}")
    return 0


@pytest.fixture
def without_extension(monkeypatch):
    """Make the CUDA API see a pure-Python install (no compiled module)."""
    monkeypatch.setattr(device_module, "load_native", lambda: load_native(MISSING))


def test_status_matches_the_extension():
    loaded = load_native()
    assert loaded.loaded, loaded.error
    assert cuda.cuda_status() == loaded.module.cuda_status()
    assert cuda.device_count() == loaded.module.device_count()
    assert cuda.cuda_available() is cuda.cuda_status()[0]
    assert cuda.build_info() == loaded.module.build_info()


def test_require_cuda_raises_with_the_reason_when_unavailable():
    available, reason = cuda.cuda_status()
    if available:
        pytest.skip("a CUDA device is available")
    with pytest.raises(DeviceUnavailableError) as info:
        cuda.require_cuda()
    assert str(info.value) == f"CUDA unavailable: {reason}"
    with pytest.raises(DeviceUnavailableError, match="CUDA unavailable: "):
        cuda.device_info(0)
    with pytest.raises(DeviceUnavailableError, match="CUDA unavailable: "):
        cuda.free_memory(0)


def test_missing_extension_is_a_reason_not_an_import_error(without_extension):
    loaded = load_native(MISSING)
    assert loaded == NativeLoad(None, loaded.error)
    assert f"{MISSING} could not be imported (ModuleNotFoundError" in loaded.error
    assert "reinstall it from source" in loaded.error
    assert cuda.cuda_status() == (False, loaded.error)
    assert cuda.cuda_available() is False
    assert cuda.device_count() == 0
    assert cuda.build_info() == {"cuda_compiled": False, "cuda_archs": [], "cuda_runtime_version": 0,
                                 "cuda_reason": loaded.error}
    with pytest.raises(DeviceUnavailableError, match=f"CUDA unavailable: {MISSING} could not be imported"):
        cuda.require_cuda()
    with pytest.raises(DeviceUnavailableError, match="could not be imported"):
        cuda.device_info(0)


def test_load_native_is_cached():
    assert load_native() is load_native()
    assert cuda.native_module() is load_native().module
    assert load_native(MISSING) is load_native(MISSING)


def test_import_survives_a_broken_extension():
    """A subprocess whose import of the extension fails still imports tr.backend.cuda and reports why."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tr.backend._native':\n"
        "            raise ImportError('undefined symbol: cudaFoo (simulated)')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import tr.backend.cuda as c\n"
        "ok, reason = c.cuda_status()\n"
        "print(ok, c.device_count(), reason)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False 0 tr.backend._native could not be imported (ImportError: undefined symbol")


@pytest.mark.parametrize("bad", [-1, 1.0, True, "0"])
def test_require_cuda_rejects_bad_indices(bad):
    with pytest.raises(ConfigError, match="CUDA device index must be an int >= 0, got"):
        cuda.require_cuda(bad)


@pytest.mark.gpu
def test_device_info_matches_the_hardware(gpu):
    info = cuda.device_info(gpu)
    props = load_native().module.device_properties(gpu)
    assert info.index == gpu
    assert info.name == props.name and info.name
    assert info.capability == props.capability == (props.major, props.minor)
    assert info.capability >= (7, 5)  # CUDA 13 supports Turing and newer
    assert info.sm == info.capability[0] * 10 + info.capability[1]
    assert info.total_memory > 1 << 30
    assert info.multiprocessor_count > 0
    assert info.l2_cache_bytes > 0
    assert info.shared_memory_per_block_optin >= 48 * 1024
    assert len(info.pci_bus_id.split(":")) == 3
    assert 0 < cuda.free_memory(gpu) <= info.total_memory
    assert repr(props).startswith(f"DeviceProperties(index={gpu}, name='{info.name}', capability={info.capability}")


@pytest.mark.gpu
def test_probe_kernel_runs_the_cubin_for_this_device(gpu):
    native = load_native().module
    info = cuda.device_info(gpu)
    arch = native.kernel_arch(gpu)
    built = native.build_info()["cuda_archs"]
    if str(info.sm) in built or f"{info.sm}-real" in built:
        assert arch == info.sm * 10  # the exact cubin was picked, e.g. 900 on sm_90
    else:
        assert 0 < arch <= info.sm * 10  # PTX of an older architecture, JIT-compiled


@pytest.mark.gpu
def test_device_past_the_last_is_unavailable(gpu):
    count = cuda.device_count()
    with pytest.raises(DeviceUnavailableError, match=f"CUDA device {count} does not exist: {count} device"):
        cuda.require_cuda(count)
    with pytest.raises(DeviceUnavailableError, match=f"CUDA device {count} does not exist"):
        load_native().module.device_properties(count)


@pytest.mark.gpu
def test_hidden_devices_give_a_reason(gpu):
    code = "import tr.backend.cuda as c; print(c.cuda_status())"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.startswith("(False, ") and "no CUDA device" in out and "CUDA_VISIBLE_DEVICES=''" in out, out
