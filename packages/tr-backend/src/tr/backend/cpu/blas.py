"""Threads of the BLAS library numpy uses (OpenBLAS in numpy's wheels), through ctypes.

OpenBLAS splits each GEMM over its threads and makes them wait for each other; when other work (the data
pipeline's workers, another process) holds some of the cores, every GEMM waits for a descheduled thread
and a training step can get ten times slower. ``CpuBackend(threads=...)`` or ``set_blas_threads`` lets the
task give BLAS only the cores it really has. numpy builds without OpenBLAS (MKL, Accelerate) are left
alone: the functions report that they could not act.
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import cache

import numpy as np

_SET = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
        "openblas_set_num_threads")
_GET = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
        "openblas_get_num_threads")


@cache
def _openblas() -> ctypes.CDLL | None:
    root = os.path.dirname(np.__file__)
    places = (("..", "numpy.libs"), (".dylibs",), (".libs",))  # Linux, macOS and older Linux wheels
    candidates = [p for parts in places for p in glob.glob(os.path.join(root, *parts, "*openblas*"))]
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if any(hasattr(lib, n) for n in _SET):
            return lib
    return None


def _fn(names: tuple[str, ...]):
    lib = _openblas()
    if lib is None:
        return None
    for n in names:
        if hasattr(lib, n):
            return getattr(lib, n)
    return None


def blas_threads() -> int | None:
    """OpenBLAS's current thread count, or None when numpy does not use a reachable OpenBLAS."""
    get = _fn(_GET)
    return int(get()) if get is not None else None


def set_blas_threads(n: int) -> bool:
    """Make numpy's OpenBLAS use ``n`` threads (process-wide); False when that is not possible."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        from tr.core.errors import ConfigError

        raise ConfigError(f"BLAS threads must be an integer >= 1, got {n!r}")
    fn = _fn(_SET)
    if fn is None:
        return False
    fn(ctypes.c_int(n))
    return True
