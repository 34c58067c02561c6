"""The CUDA backend of tr. Importing it never fails: without a driver, a device or the compiled extension,
``cuda_status()`` says why and every call that needs a device raises DeviceUnavailableError."""

from tr.backend.cuda.device import (
    DeviceInfo,
    build_info,
    cuda_available,
    cuda_status,
    device_count,
    device_info,
    free_memory,
    require_cuda,
)
from tr.backend.cuda.native import load_native, native_module, require_native

__all__ = [
    "DeviceInfo",
    "build_info",
    "cuda_available",
    "cuda_status",
    "device_count",
    "device_info",
    "free_memory",
    "require_cuda",
    "load_native",
    "native_module",
    "require_native",
]
