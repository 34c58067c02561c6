"""The build of tr.backend._native: it imports anywhere, reports how it was built, embeds one cubin per
requested architecture, and fails cleanly (DeviceUnavailableError naming the cause) without a driver."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tr.backend.cuda.native import load_native
from tr.core import errors

LOADED = load_native()
native = LOADED.module
needs_native = pytest.mark.skipif(native is None, reason=f"extension missing: {LOADED.error}")

DEFAULT_ARCHS = "80;90"
CAUSES = re.compile(r"no CUDA driver|CUDA driver too old|no CUDA device|CUDA initialisation failed|built without CUDA")


def expected_archs() -> list[str]:
    """The architectures the build was asked for: TR_CUDA_ARCHS as CMake normalises it."""
    text = os.environ.get("TR_CUDA_ARCHS") or DEFAULT_ARCHS
    items = [re.sub(r"^(sm_|compute_)", "", item) for item in re.split(r"[;, ]+", text.strip()) if item]
    return list(dict.fromkeys(items))


def nvcc_present() -> bool:
    return bool(os.environ.get("CUDACXX")) or shutil.which("nvcc") is not None


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, the CUDA toolkit, or the copy that Triton bundles."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ[v]) / "bin" / "cuobjdump" for v in ("CUDA_HOME", "CUDA_PATH") if v in os.environ]
    candidates.append(Path("/usr/local/cuda/bin/cuobjdump"))
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            candidates.append(Path(root) / "backends" / "nvidia" / "bin" / "cuobjdump")
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def test_extension_imports():
    assert native is not None, LOADED.error
    assert native.__name__ == "tr.backend._native"


@needs_native
def test_build_info_has_every_field_with_its_type():
    info = native.build_info()
    assert set(info) >= {"version", "cuda_compiled", "cuda_runtime_version", "cuda_archs", "cuda_reason",
                         "cuda_compiler", "cxx_compiler", "build_type", "cudart"}
    assert info["version"] == "0.1.0"
    assert info["build_type"] == "Release"
    assert isinstance(info["cuda_compiled"], bool)
    assert isinstance(info["cuda_archs"], list)
    assert info["cuda_reason"]
    if info["cuda_compiled"]:
        assert info["cuda_runtime_version"] >= 12000
        assert info["cudart"] == "static"
        assert info["cuda_compiler"].startswith("NVIDIA")
    else:
        assert info["cuda_runtime_version"] == 0
        assert info["cuda_archs"] == []


@needs_native
def test_cuda_compiled_for_requested_archs_when_nvcc_present():
    info = native.build_info()
    if "TR_BACKEND_CUDA=OFF" in info["cuda_reason"]:
        pytest.skip("built with TR_BACKEND_CUDA=OFF")
    if not info["cuda_compiled"] and not nvcc_present():
        pytest.skip(f"no nvcc here and the build had none: {info['cuda_reason']}")
    assert info["cuda_compiled"], f"nvcc is present but the build was CPU-only: {info['cuda_reason']}"
    assert info["cuda_archs"] == expected_archs()
    assert info["cuda_runtime_version"] // 1000 in (12, 13)
    assert native.runtime_version() == info["cuda_runtime_version"]  # static cudart: linked = compiled


@needs_native
def test_errors_are_the_tr_core_classes():
    assert native.ERRORS_FROM == "tr.core.errors"
    assert native.DeviceUnavailableError is errors.DeviceUnavailableError
    assert native.OutOfMemoryError is errors.OutOfMemoryError
    assert native.BackendError is errors.BackendError
    assert native.ConfigError is errors.ConfigError


@needs_native
def test_cuda_status_and_device_count_never_raise():
    available, reason = native.cuda_status()
    count = native.device_count()
    assert isinstance(available, bool) and isinstance(reason, str) and reason
    assert native.cuda_status() == (available, reason)  # probed once, cached
    if available:
        assert count >= 1
        assert f"{count} CUDA device(s)" in reason
    else:
        assert count == 0
        assert CAUSES.search(reason), reason


@needs_native
def test_no_driver_reason_names_the_failing_call():
    available, reason = native.cuda_status()
    if available or not native.build_info()["cuda_compiled"]:
        pytest.skip("needs a CUDA build on a machine where CUDA is unavailable")
    if "no CUDA driver" in reason:
        assert "cudaGetDeviceCount failed" in reason
        assert "cudaErrorInsufficientDriver" in reason
        assert native.driver_version() == 0  # a missing driver reports version 0, not an error


@needs_native
def test_cpu_only_build_reports_why():
    info = native.build_info()
    if info["cuda_compiled"]:
        pytest.skip("CUDA build")
    available, reason = native.cuda_status()
    assert not available
    assert reason == f"tr.backend._native was built without CUDA: {info['cuda_reason']}"
    with pytest.raises(errors.DeviceUnavailableError, match="built without CUDA"):
        native.runtime_version()


DEVICE_CALLS = {
    "device_properties": lambda: native.device_properties(0),
    "free_memory": lambda: native.free_memory(0),
    "kernel_arch": lambda: native.kernel_arch(0),
    "DeviceArena": lambda: native.DeviceArena(1024),
    "PinnedBuffer": lambda: native.PinnedBuffer(64),
}


@needs_native
@pytest.mark.parametrize("name", sorted(DEVICE_CALLS))
def test_device_calls_raise_device_unavailable_with_the_cause(name):
    available, reason = native.cuda_status()
    if available:
        pytest.skip("a CUDA device is available")
    with pytest.raises(errors.DeviceUnavailableError) as info:
        DEVICE_CALLS[name]()
    assert str(info.value) == f"CUDA unavailable: {reason}"


@needs_native
@pytest.mark.parametrize("call", [lambda: native.device_properties(-1), lambda: native.DeviceArena(1024, -2)])
def test_negative_device_index_is_a_config_error(call):
    with pytest.raises(errors.ConfigError, match="device index must be >= 0, got -"):
        call()


@needs_native
def test_zero_sized_allocations_are_config_errors():
    with pytest.raises(errors.ConfigError, match="DeviceArena size must be > 0 bytes, got 0"):
        native.DeviceArena(0)
    with pytest.raises(errors.ConfigError, match="PinnedBuffer size must be > 0 bytes, got 0"):
        native.PinnedBuffer(0)


@needs_native
def test_module_links_cudart_statically():
    if not native.build_info()["cuda_compiled"]:
        pytest.skip("CPU-only build")
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("ldd not available")
    out = subprocess.run([ldd, native.__file__], capture_output=True, text=True, check=True).stdout
    assert "libcudart" not in out
    assert "libcuda.so" not in out  # the driver is loaded lazily by cudart, never linked


@needs_native
def test_cubins_embedded_for_each_requested_arch():
    info = native.build_info()
    if not info["cuda_compiled"]:
        pytest.skip("CPU-only build")
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    elf = subprocess.run([tool, "--list-elf", native.__file__], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([tool, "--list-ptx", native.__file__], capture_output=True, text=True, check=True).stdout
    cubins = set(re.findall(r"\.(sm_\w+)\.cubin", elf))
    ptxs = set(re.findall(r"\.(sm_\w+)\.ptx", ptx))
    for arch in info["cuda_archs"]:
        match = re.fullmatch(r"(\d+[af]?)(-real|-virtual)?", arch)
        if match is None:
            continue  # "native", "all": nothing fixed to compare with
        number, kind = match.groups()
        if kind != "-virtual":
            assert f"sm_{number}" in cubins, f"no sm_{number} cubin in {sorted(cubins)}"
        if kind != "-real":
            assert f"sm_{number}" in ptxs, f"no compute_{number} PTX in {sorted(ptxs)}"
    assert len(cubins) == sum(1 for a in info["cuda_archs"] if not a.endswith("-virtual"))
