"""GlooCollective: the CPU backend's Collective (mean all-reduce, broadcast from rank 0) over gloo.

Gloo comes from torch.distributed, imported only when a collective spans more than one rank: tr.backend
imports and runs without torch, and a one-rank collective needs nothing. The collective owns its own
``ProcessGroupGloo`` made from the rendezvous store (torch's global ``init_process_group`` state is never
touched, so a user's own default group cannot clash with tr's). Every call works in place on numpy memory
(the CPU arena) through ``torch.from_numpy``: no copies.

The mean is a gloo SUM then a division by the world size on each rank. Gloo's ring all-reduce leaves the
same bytes on every rank, so the ranks' weights stay bitwise equal step after step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from tr.core.errors import BackendError, ConfigError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _c10d(world_size: int) -> Any:
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise BackendError(f"the CPU collective over {world_size} ranks needs gloo from torch.distributed, "
                           f"which cannot be imported ({e}); install torch (pip install torch)") from e
    if not dist.is_available() or not dist.is_gloo_available():
        raise BackendError(f"the CPU collective over {world_size} ranks needs gloo, but this torch build has "
                           "no torch.distributed gloo backend")
    return dist


def _device(dist: Any, hostname: str | None, interface: str | None) -> Any:
    """Where gloo listens: an interface (GLOO_SOCKET_IFNAME), a host address (loopback for one-machine
    worlds, so no other address is ever used), or gloo's default (this host's name)."""
    interface = interface or os.environ.get("GLOO_SOCKET_IFNAME") or None
    if interface:
        return dist.ProcessGroupGloo.create_device(interface=interface)
    if hostname:
        return dist.ProcessGroupGloo.create_device(hostname=hostname)
    return dist.ProcessGroupGloo.create_default_device()


class GlooCollective:
    """Collective over ``world_size`` ranks whose rendezvous is ``store``.

    ``store``: a ``torch.distributed.Store``, or a tr store exposing one as ``torch_store``
    (tr.task.distributed.TcpStore). ``connect_timeout_s`` bounds the group's setup (every rank must
    construct its collective by then; default ``timeout_s``), ``timeout_s`` every later operation.
    ``hostname``/``interface`` pick the address gloo listens on (see :func:`_device`).
    """

    def __init__(self, store: Any, rank: int, world_size: int, *, timeout_s: float = 1800.0,
                 connect_timeout_s: float | None = None, hostname: str | None = None,
                 interface: str | None = None, prefix: str = "tr/gloo") -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ConfigError(f"world size must be an integer >= 1, got {world_size!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ConfigError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
        connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        for name, v in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not v > 0:
                raise ConfigError(f"collective {name} must be > 0 seconds, got {v!r}")
        self.rank, self.world_size, self.timeout_s = rank, world_size, float(timeout_s)
        self._pg: Any = None
        self._torch: Any = None
        self._opts: dict[str, Any] = {}
        self._closed = False
        if world_size == 1:
            return  # the mean over one rank is the identity; no torch needed
        dist = _c10d(world_size)
        import torch

        native = getattr(store, "torch_store", store)
        if not isinstance(native, dist.Store):
            raise BackendError(f"GlooCollective needs a torch.distributed.Store (or an object exposing one as "
                               f"torch_store), got {type(store).__name__}")
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timedelta(seconds=float(connect_timeout_s))
        opts._devices = [_device(dist, hostname, interface)]
        try:
            self._pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, native), rank, world_size, opts)
        except RuntimeError as e:
            raise BackendError(f"rank {rank}: the gloo group of {world_size} ranks did not connect within "
                               f"{connect_timeout_s:g} s (a rank died or is unreachable): {e}") from e
        self._torch = torch
        # Per-operation options: the operations' timeout, not the (shorter) setup one.
        op_timeout = timedelta(seconds=self.timeout_s)
        self._opts = {"allreduce": dist.AllreduceOptions(), "broadcast": dist.BroadcastOptions(),
                      "barrier": dist.BarrierOptions()}
        self._opts["allreduce"].reduceOp = dist.ReduceOp.SUM
        self._opts["broadcast"].rootRank, self._opts["broadcast"].rootTensor = 0, 0
        for o in self._opts.values():
            o.timeout = op_timeout

    # --- the Collective protocol ----------------------------------------------------------------------
    def allreduce_mean(self, buf: np.ndarray) -> None:
        """Replace FP32 ``buf`` in place by its element-wise mean over the ranks."""
        self._check(buf, "allreduce_mean")
        if self._pg is None or buf.size == 0:
            return
        if buf.dtype != np.float32:
            raise BackendError(f"allreduce_mean takes a float32 buffer, got {buf.dtype}")
        tensor = self._torch.from_numpy(buf)
        self._run("all-reduce", buf.nbytes, lambda: self._pg.allreduce([tensor], self._opts["allreduce"]))
        np.divide(buf, np.float32(self.world_size), out=buf)

    def broadcast(self, buf: np.ndarray) -> None:
        """Replace ``buf`` in place by rank 0's bytes (any dtype: it travels as bytes)."""
        self._check(buf, "broadcast")
        if self._pg is None or buf.size == 0:
            return
        raw = buf.reshape(-1).view(np.uint8)
        tensor = self._torch.from_numpy(raw)
        self._run("broadcast", raw.nbytes, lambda: self._pg.broadcast([tensor], self._opts["broadcast"]))

    def barrier(self) -> None:
        """Return once every rank has called it."""
        self._check(None, "barrier")
        if self._pg is not None:
            self._run("barrier", 0, lambda: self._pg.barrier(self._opts["barrier"]))

    def close(self) -> None:
        """Release the gloo group now (its threads end here, not in the interpreter's teardown); any later
        call raises."""
        self._pg = None
        self._closed = True

    # --- helpers --------------------------------------------------------------------------------------
    def _check(self, buf: np.ndarray | None, what: str) -> None:
        if self._closed:
            raise BackendError(f"{what} on a closed collective (rank {self.rank} of {self.world_size})")
        if buf is None:
            return
        if not isinstance(buf, np.ndarray):
            raise BackendError(f"{what} takes a numpy array, got {type(buf).__name__}")
        if not buf.flags.c_contiguous or not buf.flags.writeable:
            raise BackendError(f"{what} needs a contiguous, writable buffer (it works in place)")

    def _run(self, what: str, nbytes: int, start: Callable[[], Any]) -> None:
        try:
            start().wait()
        except RuntimeError as e:
            raise BackendError(f"rank {self.rank}: gloo {what} of {nbytes} bytes over {self.world_size} ranks "
                               f"failed (a rank died, or did not take part within {self.timeout_s:g} s): {e}") from e

    def __repr__(self) -> str:
        return f"GlooCollective(rank={self.rank}, world_size={self.world_size})"
