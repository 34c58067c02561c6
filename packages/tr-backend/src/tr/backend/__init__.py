"""tr.backend: the Backend protocol, the op registry, and the CPU backend (the CUDA one is tr.backend.cuda).

    from tr.backend import get_backend
    be = get_backend("auto")          # CUDA when available, else CPU
    be.allocate(program.layout)
    g = be.capture_branches("train_a", program.step("train_a").branches)
    be.launch(g)
"""

from tr.backend.base import Backend, CapturedGraph, Collective, HostBuffer
from tr.backend.cpu import CpuBackend, CpuGraph
from tr.backend.registry import cuda_available, get_backend, missing_ops, op_impls, register_op

__all__ = [
    "Backend", "CapturedGraph", "Collective", "HostBuffer", "CpuBackend", "CpuGraph", "cuda_available",
    "get_backend", "missing_ops", "op_impls", "register_op",
]
