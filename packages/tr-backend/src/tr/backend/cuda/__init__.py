"""The CUDA backend of tr. Importing it never fails: without a driver, a device or the compiled extension,
``cuda_status()`` says why and ``CudaBackend()`` (like every call that needs a device) raises
DeviceUnavailableError naming the reason. Importing it registers the CUDA op builders (tr.backend.cuda.ops)."""

from tr.backend.cuda import ops  # noqa: F401  (registers the CUDA op builders)
from tr.backend.cuda.backend import CudaBackend, CudaGraph
from tr.backend.cuda.cudnn import CudnnPlanStats, cudnn_plan_stats, load_cudnn
from tr.backend.cuda.cudnn import frontend_built as cudnn_frontend_built
from tr.backend.cuda.cudnn import plan_cache_path as cudnn_plan_cache_path
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
from tr.backend.cuda.nccl import NcclCollective, load_nccl


def is_available() -> bool:
    """True when a CudaBackend can be made: a usable device and an extension built with the CUDA ops."""
    module = native_module()
    return module is not None and hasattr(module, "Context") and cuda_available()


__all__ = [
    "CudaBackend",
    "CudaGraph",
    "CudnnPlanStats",
    "NcclCollective",
    "DeviceInfo",
    "build_info",
    "cuda_available",
    "cuda_status",
    "device_count",
    "device_info",
    "free_memory",
    "is_available",
    "require_cuda",
    "cudnn_frontend_built",
    "cudnn_plan_cache_path",
    "cudnn_plan_stats",
    "load_cudnn",
    "load_native",
    "load_nccl",
    "native_module",
    "require_native",
]
