"""NCCL for the CUDA backend: one communicator per process, made through the ranks' Store.

Rank 0 asks NCCL for a unique id and ``set``s it under :data:`UID_KEY`; the other ranks ``get`` it; then every
rank joins the communicator on its device. With one rank no store is needed (a local id). The communicator
is nonblocking: joining it waits at most ``timeout_s`` for the other ranks, then aborts and raises
BackendError (a rank that died during bootstrap costs a timeout, never a hang); ``async_error()`` is what
:class:`tr.backend.cuda.watchdog.NcclWatchdog` polls while training. The backend captures
``range_allreduce_mean`` as ``ncclAllReduce(ncclAvg)`` in place on this communicator, inside its CUDA graphs.

NCCL is opened at run time (``libnccl.so.2``): from ``TR_NCCL_PATH``, NVIDIA's wheels (nvidia-nccl-cu13:
``nvidia/nccl/lib``, or ``nvidia/cu13/lib``), the library found at build time, then the system's loader. When
none loads, DeviceUnavailableError names every path tried.
"""

from __future__ import annotations

from typing import Any

from tr.backend.base import Store
from tr.backend.cuda.native import require_native, wheel_libraries
from tr.core.errors import BackendError, ConfigError, DeviceUnavailableError
from tr.core.log import get_logger

log = get_logger(__name__)

UID_KEY = "tr/nccl/uid"
UID_BYTES = 128
IN_PROGRESS = 7  # ncclInProgress


def nccl_candidates() -> list[str]:
    """libnccl.so.2 from NVIDIA's wheels in this interpreter (nvidia/nccl/lib, nvidia/cu13/lib, nvidia/cu12/lib)."""
    return wheel_libraries((sub, "libnccl.so.2") for sub in ("nccl/lib", "cu13/lib", "cu12/lib"))


def _native() -> Any:
    native = require_native()
    if not hasattr(native, "NcclComm"):
        raise DeviceUnavailableError("NCCL unavailable: tr.backend._native was built without the CUDA ops")
    return native


_ADDED = False


def load_nccl() -> tuple[str, int]:
    """Open NCCL now: (library path, version code such as 23007). Raises DeviceUnavailableError naming the
    paths tried."""
    global _ADDED
    native = _native()
    if not _ADDED:
        native.add_nccl_candidates(nccl_candidates())
        _ADDED = True
    path, version = native.load_nccl()
    return str(path), int(version)


class NcclCollective:
    """This process's NCCL communicator: ``rank`` of ``world_size`` on CUDA device ``device``.

    Keep it alive as long as the graphs captured with it (the CudaBackend given it does)."""

    def __init__(self, comm: Any, rank: int, world_size: int, device: int) -> None:
        self.comm = comm
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.device = int(device)

    @classmethod
    def from_store(cls, store: Store | None, device: int = 0, rank: int | None = None,
                   world_size: int | None = None, key: str = UID_KEY, timeout_s: float = 300.0) -> NcclCollective:
        """Join the communicator of all ranks: rank 0 publishes the unique id under ``key``, the others read it.
        ``rank`` and ``world_size`` default to the store's; without a store the world must be one rank.
        Waits at most ``timeout_s`` (> 0) for the other ranks to join, then raises BackendError."""
        rank = int(getattr(store, "rank", 0) if rank is None else rank)
        world = int(getattr(store, "world_size", 1) if world_size is None else world_size)
        if world < 1 or not 0 <= rank < world:
            raise ConfigError(f"NCCL rank {rank} is outside [0, {world}) for world size {world}")
        if store is None and world > 1:
            raise ConfigError(f"an NCCL communicator of {world} ranks needs a Store to share its unique id, got None")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ConfigError(f"the NCCL join timeout must be > 0 seconds, got {timeout_s!r}")
        load_nccl()
        native = _native()
        if rank == 0 or store is None:
            uid = bytes(native.NcclComm.unique_id())
            if store is not None:
                store.set(key, uid)
        else:
            uid = bytes(store.get(key))
        if len(uid) != UID_BYTES:
            raise BackendError(f"the NCCL unique id under {key!r} has {len(uid)} bytes, expected {UID_BYTES}")
        comm = native.NcclComm(uid, world, rank, int(device), float(timeout_s))
        log.info("NCCL communicator: rank %d of %d on device %d", rank, world, device)
        return cls(comm, rank, world, device)

    @classmethod
    def local(cls, device: int = 0) -> NcclCollective:
        """A one-rank communicator (no store): the NCCL path of a single process, e.g. for tests."""
        return cls.from_store(None, device, 0, 1)

    @property
    def handle(self) -> int:
        """The ncclComm_t as an integer (BackendError once closed)."""
        return int(self.comm.handle)

    def async_error(self) -> int:
        """ncclCommGetAsyncError: 0 healthy, IN_PROGRESS busy, another NCCL code once it failed, -1 closed."""
        return int(self.comm.async_error())

    def error_text(self, code: int) -> str:
        return "closed" if code == -1 else f"{self.comm.error_text(int(code))} ({code})"

    def abort(self) -> None:
        """ncclCommAbort: collectives waiting on a dead peer end; the graphs captured with it are dead too."""
        self.comm.abort()

    def close(self) -> None:
        """Destroy the communicator now; graphs captured with it must not be launched afterwards."""
        self.comm.destroy()

    def __repr__(self) -> str:
        return f"NcclCollective(rank {self.rank} of {self.world_size}, device {self.device})"
