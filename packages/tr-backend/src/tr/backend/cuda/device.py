"""CUDA availability and device queries (the Python face of ``tr.backend._native``).

Nothing here raises on import or on a query of availability: a machine without a driver, an extension built
without CUDA, or no extension at all gives ``cuda_status() == (False, reason)``. Only the calls that need a
device (:func:`device_info`, :func:`require_cuda`) raise :class:`~tr.core.errors.DeviceUnavailableError`,
with that reason in the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tr.backend.cuda.native import load_native, require_native
from tr.core.errors import ConfigError, DeviceUnavailableError


@dataclass(frozen=True)
class DeviceInfo:
    """Static properties of one CUDA device."""

    index: int
    name: str
    capability: tuple[int, int]
    total_memory: int
    multiprocessor_count: int
    l2_cache_bytes: int
    shared_memory_per_block_optin: int
    pci_bus_id: str

    @property
    def sm(self) -> int:
        """The architecture number that TR_CUDA_ARCHS uses, e.g. 90 for capability (9, 0)."""
        return self.capability[0] * 10 + self.capability[1]


def cuda_status() -> tuple[bool, str]:
    """(available, reason). When unavailable, the reason names the cause (no extension, built without CUDA,
    no driver, driver too old, no device); when available, it summarises devices and versions."""
    loaded = load_native()
    if loaded.module is None:
        return False, loaded.error
    available, reason = loaded.module.cuda_status()
    return bool(available), str(reason)


def cuda_available() -> bool:
    """True when at least one CUDA device can be used."""
    return cuda_status()[0]


def device_count() -> int:
    """Number of usable CUDA devices; 0 when CUDA is unavailable for any reason."""
    loaded = load_native()
    return 0 if loaded.module is None else int(loaded.module.device_count())


def build_info() -> dict[str, Any]:
    """How the extension was built (see ``_native.build_info``); without the extension, says so."""
    loaded = load_native()
    if loaded.module is None:
        return {"cuda_compiled": False, "cuda_archs": [], "cuda_runtime_version": 0, "cuda_reason": loaded.error}
    return dict(loaded.module.build_info())


def require_cuda(device: int | None = None) -> None:
    """Raise DeviceUnavailableError (message: the reason) unless CUDA, and `device` if given, are usable."""
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise ConfigError(f"CUDA device index must be an int >= 0, got {device!r}")
    available, reason = cuda_status()
    if not available:
        raise DeviceUnavailableError(f"CUDA unavailable: {reason}")
    if device is not None and device >= (count := device_count()):
        raise DeviceUnavailableError(f"CUDA device {device} does not exist: {count} device(s) visible")


def device_info(index: int = 0) -> DeviceInfo:
    """Properties of device `index`; raises DeviceUnavailableError when it cannot be used."""
    require_cuda(index)
    p = require_native().device_properties(index)
    return DeviceInfo(
        index=int(p.index),
        name=str(p.name),
        capability=(int(p.major), int(p.minor)),
        total_memory=int(p.total_memory),
        multiprocessor_count=int(p.multiprocessor_count),
        l2_cache_bytes=int(p.l2_cache_bytes),
        shared_memory_per_block_optin=int(p.shared_memory_per_block_optin),
        pci_bus_id=str(p.pci_bus_id),
    )


def free_memory(index: int = 0) -> int:
    """Free memory of device `index` in bytes."""
    require_cuda(index)
    return int(require_native().free_memory(index))

