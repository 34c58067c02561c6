"""Kernels compiled outside tr, launched inside the CUDA backend's captured graphs.

A CUDA builder of an op family made outside tr (tr.task.extension) returns ``launch_kernel(b, kernel, grid, block,
args, shared=0)``: the native op ``extern_kernel`` (csrc/ops/extern_kernel.cu), which records one cuLaunchKernel of
the kernel's CUfunction with the geometry and parameter values fixed at capture. It becomes a node of the step's
CUDA graph like tr's own kernels: a graph launch runs it with nothing in Python.

``kernel`` is a :class:`Kernel` (CUDA C++ source compiled by CuPy's NVRTC the first time a graph uses it, once per
device), a ``cupy.RawKernel``, a CuPy function (``raw_kernel.kernel``; its ``ptr`` is the CUfunction), or a
CUfunction handle as an int (whoever loaded it keeps its module loaded). The CuPy objects are kept alive with the
backend, so their modules stay loaded as long as the graphs that launch them.

``args``, in the kernel's parameter order:
- a str: the call's tensor (or span) argument of that name, passed as its device address (a ``T*`` parameter);
- ``numpy.int32``, ``numpy.int64``, ``numpy.float32``, ``numpy.float64``: that C type (int, long long, float,
  double);
- a Python int: a ``long long``, a Python float: a ``double`` (CuPy's conventions for RawKernel arguments).
The extension checks the parameter count and sizes against the compiled kernel where the driver can say (CUDA 12.4
and later), and the block against the kernel's thread and shared-memory limits, when the graph is captured.

CuPy is optional (``pip install 'tr-backend[cupy]'``, or ``[cupy12]`` for CUDA 12): it is imported only when a
kernel is compiled, and its absence is a BackendError that says what to install.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.signatures.extern_kernel import EXTERN_KERNEL
from tr.core.errors import BackendError, ConfigError, TrError
from tr.core.ops import EXTERN_PARAM_CODES

# Parameter type codes of the native op's param_types (codes.hpp's ExternParam)
POINTER, INT32, INT64, FLOAT32, FLOAT64 = (EXTERN_PARAM_CODES[k] for k in ("pointer", "int32", "int64", "float32",
                                                                          "float64"))
PARAM_TYPES = {np.int32: INT32, np.int64: INT64, np.float32: FLOAT32, np.float64: FLOAT64}

CUPY_HINT = ("pip install 'tr-backend[cupy]' (CUDA 13) or 'tr-backend[cupy12]' (CUDA 12), the CuPy wheel built "
             "for the CUDA the driver runs")

# the CuPy function objects each backend's graphs launch: their modules stay loaded while the backend lives
_KEEP: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def require_cupy(why: str) -> ModuleType:
    """CuPy, or a BackendError naming ``why`` it is needed and what to install."""
    try:
        import cupy
    except ImportError as e:
        raise BackendError(f"{why} needs CuPy, which is not installed ({e}); {CUPY_HINT}") from e
    return cupy


class Kernel:
    """An ``extern "C" __global__`` function ``name`` of CUDA C++ ``code`` (extern "C": NVRTC keeps the name
    unmangled), compiled at run time by CuPy (cupy.RawKernel, NVRTC)
    the first time a captured graph uses it, once per device. ``options`` go to NVRTC (e.g. ``("--fmad=false",)``
    to round a*b+c twice, as numpy does). Making one needs no CuPy and no GPU."""

    def __init__(self, code: str, name: str, options: Sequence[str] = ()) -> None:
        if not isinstance(code, str) or not code.strip():
            raise ConfigError(f"Kernel code must be CUDA C++ source (a non-empty str), got {code!r:.60}")
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"Kernel name must be the __global__ function's name (an identifier), got {name!r}")
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise ConfigError(f"Kernel options must be a sequence of str, got {options!r}")
        if re.search(rf"\b{name}\s*\(", code) is None:
            raise ConfigError(f"Kernel code defines no function {name!r}")
        self.code = code
        self.name = name
        self.options = tuple(options)
        self._raw: Any = None

    def function(self, device: int) -> Any:
        """CuPy's function object for ``device`` (``.ptr``: the CUfunction), compiled on first use."""
        cupy = require_cupy(f"compiling kernel {self.name!r}")
        if self._raw is None:
            self._raw = cupy.RawKernel(self.code, self.name, self.options)
        with cupy.cuda.Device(device):
            return self._raw.kernel  # compiles (NVRTC, cached by CuPy) and loads the module on this device

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, {len(self.code)} chars of CUDA C++, options={self.options!r})"


def _function(b: CudaBinder, kernel: Any) -> tuple[int, Any]:
    """(CUfunction handle, the object that keeps its module loaded or None)."""
    if isinstance(kernel, (int, np.integer)) and not isinstance(kernel, bool):
        if int(kernel) <= 0:
            b.fail(f"kernel handle {int(kernel):#x} is not a CUfunction", ConfigError)
        return int(kernel), None
    try:
        fn = _cupy_function(kernel, int(getattr(b.backend, "device", 0)))
    except TrError as e:  # CuPy missing: say which op needed it
        raise type(e)(f"{b.where}: {e}") from e
    if fn is None:
        b.fail(f"kernel must be a tr.backend.cuda.extern_kernel.Kernel, a cupy.RawKernel, a CuPy function or a "
               f"CUfunction handle (int), got {type(kernel).__name__}", ConfigError)
    return int(fn.ptr), fn


def _cupy_function(kernel: Any, device: int) -> Any:
    """CuPy's function object for ``kernel`` on ``device`` (compiled on first use), or None for another type."""
    if isinstance(kernel, Kernel):
        return kernel.function(device)
    cupy = require_cupy(f"launching {type(kernel).__name__} {kernel!r:.60}")
    if isinstance(kernel, cupy.RawKernel):
        with cupy.cuda.Device(device):
            return kernel.kernel
    if isinstance(kernel, cupy.cuda.function.Function):
        return kernel
    return None


def _dims(b: CudaBinder, what: str, v: Any) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, (int, np.integer)) else v
    if (not isinstance(t, (tuple, list)) or not 1 <= len(t) <= 3
            or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in t)):
        b.fail(f"{what} must be an int >= 1 or a tuple of 1 to 3 of them, got {v!r}", ConfigError)
    x, y, z = (*(int(d) for d in t), 1, 1)[:3]
    return x, y, z


def kernel_args(b: CudaBinder, args: Sequence[Any]) -> tuple[list[int], list[int], list[float]]:
    """The native op's parameter lists for ``args`` (see the module docstring), one entry a parameter:
    (param_types: its type code, param_ints: a pointer's address or an integer's value, 0 for a float,
    param_floats: a float's value, 0.0 for the others)."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        b.fail(f"args must be a list of the kernel's arguments, got {args!r}", ConfigError)
    types: list[int] = []
    ints: list[int] = []
    floats: list[float] = []
    names = {a.name: a for a in b.opdef.args}
    for i, v in enumerate(args):
        if isinstance(v, str):
            arg = names.get(v)
            if arg is None:
                b.fail(f"kernel argument {i} names {v!r}, which is not an argument of {b.call.op} "
                       f"({sorted(names)})", ConfigError)
            if not b.has(v):
                b.fail(f"kernel argument {i} names {v!r}, which this call leaves out (optional)", ConfigError)
            address = b.span(v)[0] if arg.kind == "span" else b.ptr(v)
            types.append(POINTER)
            ints.append(address - (1 << 64) if address >= 1 << 63 else address)  # its 64 bits as an int64
            floats.append(0.0)
        elif type(v) in PARAM_TYPES:
            code = PARAM_TYPES[type(v)]
            types.append(code)
            ints.append(int(v) if code in (INT32, INT64) else 0)
            floats.append(float(v) if code in (FLOAT32, FLOAT64) else 0.0)
        elif isinstance(v, int) and not isinstance(v, bool):
            if not -(1 << 63) <= v < (1 << 63):
                b.fail(f"kernel argument {i} = {v} does not fit a long long", ConfigError)
            types.append(INT64)
            ints.append(v)
            floats.append(0.0)
        elif isinstance(v, float):
            types.append(FLOAT64)
            ints.append(0)
            floats.append(v)
        else:
            b.fail(f"kernel argument {i} is {type(v).__name__} {v!r}; expected an argument name (str), a numpy "
                   "int32/int64/float32/float64, an int or a float", ConfigError)
    return types, ints, floats


def launch_kernel(b: CudaBinder, kernel: Any, grid: Any, block: Any, args: Sequence[Any], shared: int = 0) -> Any:
    """The native op that launches ``kernel`` on ``grid`` x ``block`` threads with ``shared`` bytes of dynamic
    shared memory and ``args`` (see the module docstring), for a CUDA builder to return."""
    g, bl = _dims(b, "grid", grid), _dims(b, "block", block)
    if isinstance(shared, bool) or not isinstance(shared, (int, np.integer)) or shared < 0:
        b.fail(f"shared must be an int >= 0 (bytes of dynamic shared memory), got {shared!r}", ConfigError)
    types, ints, floats = kernel_args(b, args)
    handle, keep = _function(b, kernel)
    op = b.make(EXTERN_KERNEL, function=handle, grid_x=g[0], grid_y=g[1], grid_z=g[2], block_x=bl[0],
                block_y=bl[1], block_z=bl[2], shared=int(shared), param_types=types, param_ints=ints,
                param_floats=floats)
    if keep is not None:
        _KEEP.setdefault(b.backend, []).append(keep)
    return op
