"""Loading the extension ``tr.backend._native`` so that a failure never breaks an import.

A pure-Python install (no compiled module), an extension built for another Python, or one that cannot be
loaded all become a reason string: :func:`load_native` records it and the CUDA API reports it as the cause
of :class:`~tr.core.errors.DeviceUnavailableError`.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from tr.core.errors import DeviceUnavailableError
from tr.core.log import get_logger

log = get_logger(__name__)

NATIVE_MODULE = "tr.backend._native"


@dataclass(frozen=True)
class NativeLoad:
    """The outcome of importing the extension: the module, or why there is none."""

    module: ModuleType | None
    error: str = ""

    @property
    def loaded(self) -> bool:
        return self.module is not None


@cache
def load_native(name: str = NATIVE_MODULE) -> NativeLoad:
    """Import the extension once; never raises (the answer is cached per module name)."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # ImportError, or anything the module init raised: report, don't propagate
        reason = (
            f"{name} could not be imported ({type(exc).__name__}: {exc}); tr-backend was installed without "
            "its compiled extension or for another Python: reinstall it from source "
            "(pip install --no-build-isolation packages/tr-backend)"
        )
        log.debug("native extension unavailable: %s", reason)
        return NativeLoad(None, reason)
    return NativeLoad(module)


def native_module() -> ModuleType | None:
    """The extension module, or None when it cannot be loaded."""
    return load_native().module


def require_native() -> ModuleType:
    """The extension module; raises DeviceUnavailableError naming the cause when it cannot be loaded."""
    result = load_native()
    if result.module is None:
        raise DeviceUnavailableError(f"CUDA unavailable: {result.error}")
    return result.module


def wheel_libraries(locations: Iterable[tuple[str, str]]) -> list[str]:
    """The files (subdirectory, library name) that NVIDIA's wheels installed in this interpreter's ``nvidia``
    namespace, in the order given: the first candidates of the run-time loaders (cuBLASLt, NCCL, cuDNN)."""
    spec = importlib.util.find_spec("nvidia")
    found: list[str] = []
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub, name in locations:
            path = Path(root) / sub / name
            if path.is_file():
                found.append(str(path))
    return found
