"""Data-parallel training over processes: the launcher's environment, the rendezvous, the rank group.

One process per device. A launcher starts the processes and tells each who it is through the environment;
the first family present wins:

- torchrun, tr-run: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``
- mpirun (Open MPI): ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_LOCAL_RANK``
- srun (SLURM): ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``

and in every case ``MASTER_ADDR``/``MASTER_PORT`` name rank 0's host and a free port (default port 29500;
the address may be left out when every rank runs on one machine: it is then 127.0.0.1).

Bootstrap (:func:`bootstrap`): rank 0 hosts a TCP key-value store on MASTER_ADDR:MASTER_PORT, listening on
that address only; every rank connects, posts its arrival and waits for all the others. A rank that never
arrives (it failed to start or died) makes the others raise a BackendError naming it when the bootstrap
timeout runs out, instead of hanging. Then the host collective (gloo, through torch.distributed) connects
through the same store, as the CUDA backend's NCCL communicator will: what ranks exchange to bootstrap goes
through the :class:`tr.backend.base.Store` interface, never through files. :func:`init_group` makes the
group once per process; every task of the process shares it.

Exchanges between the ranks after the bootstrap (a checkpoint save's ``Group.gather`` and ``Group.share``) wait
up to the operation timeout (TR_DIST_OP_TIMEOUT) for the slowest rank and then raise a BackendError naming the
exchange and the ranks that did not arrive.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

from tr.backend.base import Collective
from tr.backend.cpu.collective import LOOPBACK_HOSTS, GlooCollective
from tr.core import env as tr_env
from tr.core.errors import BackendError, ConfigError
from tr.core.log import get_logger

log = get_logger(__name__)

DEFAULT_PORT = 29500
# the defaults of TR_DIST_TIMEOUT (the bootstrap: 300 s) and TR_DIST_OP_TIMEOUT (one collective, e.g. waiting for
# a slow rank writing a checkpoint: 1800 s), declared in tr.core.env
DEFAULT_TIMEOUT_S = tr_env.variable("TR_DIST_TIMEOUT").default
DEFAULT_OP_TIMEOUT_S = tr_env.variable("TR_DIST_OP_TIMEOUT").default

# (launcher, rank, world size, local rank, variables that tell "all ranks on one machine": local size, nodes)
_FAMILIES = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", ("LOCAL_WORLD_SIZE",), ()),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     ("OMPI_COMM_WORLD_LOCAL_SIZE",), ()),
    ("SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", (), ("SLURM_NNODES", "SLURM_JOB_NUM_NODES")),
)
# Launchers whose variables switch a task to distributed mode without a distributed() call: they are set
# only inside launched processes (a SLURM batch script carries SLURM_NTASKS without being one rank).
_AUTO = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    """Who this process is in the world: rank, world size, rank on its machine, rank 0's address."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    launcher: str = field(default="", compare=False)  # for messages: which variables it came from

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank", "master_port"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"DistEnv.{name} must be an integer, got {v!r}")
        if self.world_size < 1:
            raise ConfigError(f"world size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside [0, {self.world_size}) for world size {self.world_size}")
        if self.local_rank < 0:
            raise ConfigError(f"local rank must be >= 0, got {self.local_rank}")
        if not 1 <= self.master_port <= 65535:
            raise ConfigError(f"master port must be in [1, 65535], got {self.master_port}")
        if not isinstance(self.master_addr, str) or not self.master_addr.strip():
            raise ConfigError(f"master address must be a host name or address, got {self.master_addr!r}")

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def loopback(self) -> bool:
        """Every rank is on this machine and talks over loopback only."""
        return self.master_addr in LOOPBACK_HOSTS or self.master_addr.startswith("127.")

    def __str__(self) -> str:
        src = f" ({self.launcher})" if self.launcher else ""
        return f"rank {self.rank} of {self.world_size}{src}, rendezvous {self.master_addr}:{self.master_port}"


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env[name].strip()
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={env[name]!r} is not an integer") from None


def read_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """The DistEnv the launcher's variables describe (world size 1 when there are none)."""
    env = os.environ if environ is None else environ
    for launcher, rk, ws, lr, local_sizes, node_counts in _FAMILIES:
        if ws not in env and rk not in env:
            continue
        for need, other in ((ws, rk), (rk, ws)):
            if need not in env:
                raise ConfigError(f"{other}={env[other]} is set but {need} is not; a {launcher} launch sets both")
        rank, world = _int(env, rk), _int(env, ws)
        if world < 1 or not 0 <= rank < world:
            raise ConfigError(f"{rk}={rank} is outside [0, {world}) for {ws}={world}")
        one_machine = world == 1 or any(n in env and _int(env, n) == world for n in local_sizes) or any(
            n in env and _int(env, n) == 1 for n in node_counts)
        addr = env.get("MASTER_ADDR", "").strip()
        if not addr:
            if not one_machine:
                raise ConfigError(f"{ws}={world} but MASTER_ADDR is not set: set MASTER_ADDR to rank 0's host "
                                  f"and MASTER_PORT to a free port on it")
            addr = "127.0.0.1"
        port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT", "").strip() else DEFAULT_PORT
        if lr in env:
            local = _int(env, lr)
        else:  # no local rank: every rank on this machine counts from 0, otherwise one rank per machine
            local = rank if (one_machine or addr in LOOPBACK_HOSTS or addr.startswith("127.")) else 0
        return DistEnv(rank, world, local, addr, port, launcher)
    return DistEnv(launcher="no launcher")


def auto_env(environ: Mapping[str, str] | None = None) -> DistEnv | None:
    """The DistEnv when a torchrun/tr-run or mpirun launch of more than one rank is visible, else None."""
    env = os.environ if environ is None else environ
    if any(v in env and _int(env, v) > 1 for v in _AUTO):
        return read_env(env)
    return None


def _seconds(timeout_s: float | None, variable: str, what: str) -> float:
    if timeout_s is None:
        timeout_s = tr_env.get(variable)  # its default when unset; a ConfigError naming a bad value
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ConfigError(f"the {what} must be > 0 seconds, got {timeout_s!r}")
    return float(timeout_s)


def bootstrap_timeout(timeout_s: float | None = None) -> float:
    """``timeout_s``, else TR_DIST_TIMEOUT, else DEFAULT_TIMEOUT_S; must be > 0."""
    return _seconds(timeout_s, "TR_DIST_TIMEOUT", "bootstrap timeout")


def op_timeout(timeout_s: float | None = None) -> float:
    """How long one collective may wait for the slowest rank before the run fails (gloo's operation timeout,
    the NCCL watchdog's): ``timeout_s``, else TR_DIST_OP_TIMEOUT, else DEFAULT_OP_TIMEOUT_S; must be > 0."""
    return _seconds(timeout_s, "TR_DIST_OP_TIMEOUT", "collective operation timeout")


# --- the rendezvous store -----------------------------------------------------------------------------------

def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise BackendError(f"training on more than one rank needs torch.distributed (a TCP store and gloo), which "
                           f"cannot be imported ({e}); install torch (pip install torch)") from e
    return dist


def _listen(env: DistEnv) -> socket.socket | None:
    """A socket bound to MASTER_ADDR:MASTER_PORT for rank 0's store, or None when MASTER_ADDR is not an
    address of this machine (the store then listens on all of them, as torch's does)."""
    try:
        infos = socket.getaddrinfo(env.master_addr, env.master_port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise BackendError(f"rank 0 cannot resolve MASTER_ADDR {env.master_addr!r}: {e}") from e
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRNOTAVAIL and not env.loopback:
            return None
        raise BackendError(f"rank 0 cannot host the rendezvous on {env.master_addr}:{env.master_port}: {e} "
                           f"(is MASTER_PORT free?)") from e
    return sock


class TcpStore:
    """tr's :class:`tr.backend.base.Store` over torch's TCPStore, hosted by rank 0.

    ``torch_store`` is the underlying ``torch.distributed.Store`` (what gloo connects through).
    """

    def __init__(self, native: Any, env: DistEnv, timeout_s: float) -> None:
        self.torch_store = native
        self.env = env
        self.rank, self.world_size = env.rank, env.world_size
        self.timeout_s = timeout_s

    @property
    def where(self) -> str:
        return f"{self.env.master_addr}:{self.env.master_port}"

    @classmethod
    def connect(cls, env: DistEnv, timeout_s: float) -> TcpStore:
        """Rank 0: host the store. Other ranks: reach it within ``timeout_s`` (rank 0 may start later)."""
        dist = _dist()
        timeout = timedelta(seconds=timeout_s)
        if env.rank == 0:
            sock = _listen(env)
            try:
                native = dist.TCPStore(env.master_addr, env.master_port, None, True, timeout=timeout,
                                       wait_for_workers=False,
                                       master_listen_fd=None if sock is None else sock.detach())
            except RuntimeError as e:
                raise BackendError(f"rank 0 cannot host the rendezvous on {env.master_addr}:{env.master_port}: "
                                   f"{e}") from e
            return cls(native, env, timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:  # probe until rank 0 listens: torch's client would retry past the deadline, noisily
            try:
                socket.create_connection((env.master_addr, env.master_port),
                                         timeout=max(0.05, min(1.0, deadline - time.monotonic()))).close()
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"rank {env.rank}: bootstrap timed out after {timeout_s:g} s: no rendezvous at "
                        f"{env.master_addr}:{env.master_port}; rank 0, which hosts it, did not start or died "
                        f"(missing ranks: [0]; {e})") from None
                time.sleep(0.05)  # rank 0 is not listening yet: retry shortly
        remaining = timedelta(seconds=max(0.1, deadline - time.monotonic()))
        try:
            native = dist.TCPStore(env.master_addr, env.master_port, None, False, timeout=remaining)
            native.set_timeout(timeout)
        except RuntimeError as e:
            raise BackendError(f"rank {env.rank}: cannot join the rendezvous at {env.master_addr}:"
                               f"{env.master_port}: {e}") from e
        return cls(native, env, timeout_s)

    # --- the Store protocol ---------------------------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        try:
            self.torch_store.set(key, value)
        except RuntimeError as e:
            raise self._lost(e) from e

    def get(self, key: str, timeout_s: float | None = None) -> bytes:
        """``key``'s value, waiting up to ``timeout_s`` (default: the store's timeout) for a rank to set it."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            self.torch_store.wait([key], timedelta(seconds=max(0.01, timeout_s)))
            return bytes(self.torch_store.get(key))
        except RuntimeError as e:
            if self._alive():
                raise BackendError(f"rank {self.rank}: no rank set {key!r} in the rendezvous at {self.where} "
                                   f"within {timeout_s:g} s") from e
            raise self._lost(e) from e

    # --- more ---------------------------------------------------------------------------------------------
    def add(self, key: str, n: int) -> int:
        try:
            return int(self.torch_store.add(key, n))
        except RuntimeError as e:
            raise self._lost(e) from e

    def has(self, key: str) -> bool:
        return bool(self.torch_store.check([key]))

    def missing(self, keys: list[str], timeout_s: float) -> list[int]:
        """Wait up to ``timeout_s`` for every key; the indices of those still absent then (none: all came)."""
        try:
            self.torch_store.wait(keys, timedelta(seconds=max(0.01, timeout_s)))
            return []
        except RuntimeError as e:
            err = e
        try:
            missing = [i for i, k in enumerate(keys) if not self.has(k)]
        except RuntimeError:
            raise self._lost(err) from err
        if not missing:
            raise self._lost(err) from err
        return missing

    def barrier(self, name: str) -> None:
        """Every rank returns once all have called ``barrier(name)`` (a name is used once). Rank 0, which hosts
        the store, returns last, once every other rank has seen the barrier open: it may then close the store
        (exit, or raise what the barrier guarded) without cutting off a rank still reading it, which would see
        "lost the rendezvous store" instead of the error they all share."""
        if self.add(f"{name}/count", 1) == self.world_size:
            self.set(f"{name}/go", b"1")
        self.get(f"{name}/go")
        if self.world_size == 1:
            return
        if self.rank == 0:
            self.get(f"{name}/gone")
        elif self.add(f"{name}/left", 1) == self.world_size - 1:
            self.set(f"{name}/gone", b"1")

    def close(self) -> None:
        self.torch_store = None

    def _alive(self) -> bool:
        try:
            self.torch_store.check(["tr/rdzv/probe"])
            return True
        except RuntimeError:
            return False

    def _lost(self, e: Exception) -> BackendError:
        return BackendError(f"rank {self.rank}: lost the rendezvous store at {self.where} (hosted by rank 0: it "
                            f"exited or died): {e}")


# --- the group ----------------------------------------------------------------------------------------------

class Group:
    """This process's place in the world: its DistEnv, the store and the host collective."""

    def __init__(self, env: DistEnv, store: TcpStore | None, collective: Collective, timeout_s: float) -> None:
        self.env, self.store, self.collective, self.timeout_s = env, store, collective, timeout_s
        self._seq = 0

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def is_main(self) -> bool:
        return self.env.rank == 0

    def agree(self, what: str, facts: Mapping[str, Any]) -> None:
        """Raise ConfigError on every rank when the ranks' ``facts`` differ (e.g. steps per epoch): a plan
        that differs between ranks would otherwise hang in a collective or train on garbage."""
        if self.store is None:
            return
        self._seq += 1
        base = f"tr/agree/{self._seq}/{what}"
        self.store.set(f"{base}/{self.rank}", json.dumps(dict(facts), sort_keys=True, default=str).encode())
        values = [json.loads(self.store.get(f"{base}/{r}")) for r in range(self.world_size)]
        self.store.barrier(f"{base}/read")  # rank 0 hosts the store: it must outlive everyone's reads
        for key in sorted({k for v in values for k in v}):
            seen = [v.get(key) for v in values]
            if any(s != seen[0] for s in seen):
                per_rank = ", ".join(f"rank {r}: {s!r}" for r, s in enumerate(seen))
                raise ConfigError(f"the ranks disagree on {what} {key} ({per_rank}); every rank must run the "
                                  f"same configuration")

    @property
    def op_timeout_s(self) -> float:
        """How long one exchange waits for the slowest rank: the collective's operation timeout
        (TR_DIST_OP_TIMEOUT, see :func:`op_timeout`)."""
        return float(getattr(self.collective, "timeout_s", None) or op_timeout())

    def gather(self, what: str, value: bytes) -> list[bytes] | None:
        """Every rank's ``value`` in rank order on rank 0, None on the others; every rank calls it, in the same
        order as its other group calls (small values: they go through the store). Rank 0 waits up to the
        operation timeout for the others, then raises a BackendError naming ``what`` and the missing ranks."""
        if self.store is None:
            return [value]
        self._seq += 1
        base = f"tr/gather/{self._seq}/{what}"
        self.store.set(f"{base}/{self.rank}", value)
        if not self.is_main:
            return None
        keys = [f"{base}/{r}" for r in range(self.world_size)]
        timeout = self.op_timeout_s
        missing = self.store.missing(keys, timeout)
        if missing:
            raise BackendError(f"rank 0: {what}: rank(s) {missing} of {self.world_size} did not arrive within "
                               f"{timeout:g} s (TR_DIST_OP_TIMEOUT): every rank must call it at the same point, "
                               f"and these died, hang or took another path")
        return [self.store.get(k) for k in keys]  # rank 0 hosts: it reads last

    def share(self, what: str, value: bytes | None, timeout_s: float | None = None) -> bytes:
        """Rank 0's ``value`` on every rank (the others pass None); every rank calls it, in the same order as
        its other group calls. Each rank waits up to ``timeout_s`` (default: the operation timeout): the others
        for rank 0's value, rank 0 until every other rank has read it (it hosts the store, and must not close it
        under a reader); then a BackendError names ``what`` and the missing ranks."""
        if self.store is None:
            if value is None:
                raise ConfigError(f"share({what!r}): rank 0 must pass the value, got None")
            return value
        self._seq += 1
        key = f"tr/share/{self._seq}/{what}"
        timeout = self.op_timeout_s if timeout_s is None else timeout_s
        if self.is_main:
            if value is None:
                raise ConfigError(f"share({what!r}): rank 0 must pass the value, got None")
            self.store.set(key, value)
            missing = self.store.missing([f"{key}/read/{r}" for r in range(1, self.world_size)], timeout)
            if missing:
                raise BackendError(f"rank 0: {what}: rank(s) {[r + 1 for r in missing]} of {self.world_size} did "
                                   f"not take rank 0's answer within {timeout:g} s (TR_DIST_OP_TIMEOUT): they "
                                   f"died, hang or took another path")
            return value
        try:
            got = self.store.get(key, timeout)
        except BackendError as e:
            raise BackendError(f"rank {self.rank}: {what}: no answer from rank 0 (waited up to {timeout:g} s, "
                               f"TR_DIST_OP_TIMEOUT; missing ranks: [0]): it died, hangs or took another path "
                               f"({e})") from e
        self.store.set(f"{key}/read/{self.rank}", b"1")
        return got

    def close(self) -> None:
        """Release the collective, then the store (rank 0: stops hosting it)."""
        close = getattr(self.collective, "close", None)
        if callable(close):
            close()
        if self.store is not None:
            self.store.close()

    def __repr__(self) -> str:
        return f"Group({self.env})"


def _rendezvous(store: TcpStore, env: DistEnv, timeout_s: float) -> None:
    """Every rank posts its arrival; rank 0 waits for all and posts the outcome, which the others read, so
    every rank that is up reports the same missing ranks (and rank 0 keeps hosting the store until they have
    read it)."""
    rank, world = env.rank, env.world_size
    store.set(f"tr/rdzv/rank/{rank}", json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode())
    if rank == 0:
        missing = store.missing([f"tr/rdzv/rank/{r}" for r in range(world)], timeout_s)
        store.set("tr/rdzv/missing", json.dumps(missing).encode())
        readers = world - 1 - len(missing)
        if missing and readers > 0:  # let the others read the outcome (bounded: they may die as well)
            store.missing(["tr/rdzv/read"], min(5.0, timeout_s))
    else:
        # rank 0 posts the outcome when its own timeout ends, which began before this rank connected
        missing = json.loads(store.get("tr/rdzv/missing", store.timeout_s + min(store.timeout_s, 10.0)))
        if missing and store.add("tr/rdzv/readers", 1) == world - 1 - len(missing):
            store.set("tr/rdzv/read", b"1")
    if missing:
        raise BackendError(
            f"rank {rank}: bootstrap timed out after {store.timeout_s:g} s waiting for rank(s) {missing} of world size "
            f"{world} at the rendezvous {store.where}; missing ranks: {missing} (they failed to start, crashed or "
            f"died)")


def bootstrap(env: DistEnv, timeout_s: float | None = None, op_timeout_s: float | None = None) -> Group:
    """Join the world ``env`` describes: store, arrival of every rank, host collective. Raises
    BackendError naming the missing ranks when some rank does not arrive within the timeout."""
    timeout = bootstrap_timeout(timeout_s)
    op_wait = op_timeout(op_timeout_s)
    if env.world_size == 1:
        return Group(env, None, GlooCollective(None, 0, 1), timeout)
    _dist()  # import torch first (seconds, when ranks start together): the timeout counts from here
    t0 = time.monotonic()
    store = TcpStore.connect(env, timeout)
    _rendezvous(store, env, timeout - (time.monotonic() - t0))
    coll = GlooCollective(store, env.rank, env.world_size, timeout_s=op_wait, connect_timeout_s=timeout,
                          hostname=("::1" if env.master_addr == "::1" else "127.0.0.1") if env.loopback else None)
    log.info("joined the world: %s in %.2f s", env, time.monotonic() - t0)
    return Group(env, store, coll, timeout)


_GROUP: Group | None = None


def init_group(env: DistEnv | None = None, timeout_s: float | None = None,
               op_timeout_s: float | None = None) -> Group:
    """This process's group, bootstrapped on first use (``env`` defaults to :func:`read_env`)."""
    global _GROUP
    env = env or read_env()
    if _GROUP is not None:
        if _GROUP.env != env:
            raise BackendError(f"this process already joined the world as {_GROUP.env}; it cannot join as {env}")
        return _GROUP
    _GROUP = bootstrap(env, timeout_s, op_timeout_s)
    atexit.register(close_group)
    return _GROUP


def close_group() -> None:
    """Leave the world: release this process's group (run at exit: torch's threads must end before the
    interpreter tears down, or the process aborts)."""
    global _GROUP
    group, _GROUP = _GROUP, None
    if group is not None:
        group.close()


def current_group() -> Group | None:
    return _GROUP


# --- what a task does with the group ------------------------------------------------------------------------

FORCE_NCCL_ENV = "TR_FORCE_NCCL"


def force_nccl(environ: Mapping[str, str] | None = None) -> bool:
    """TR_FORCE_NCCL=1: the CUDA backend runs its all-reduce through NCCL even with one rank (for tests)."""
    return tr_env.get(FORCE_NCCL_ENV, environ)


def backend_options(device: str, group: Group | None, cuda_device: int | None = None) -> tuple[str, dict[str, Any]]:
    """(backend kind, options for get_backend): the collective, and for CUDA the device (``cuda_device``: what
    use_gpu names for this process; None: the one LOCAL_RANK names) and an NCCL communicator made through the
    group's store (with more than one rank, or TR_FORCE_NCCL=1)."""
    force = force_nccl()
    if group is None and not force and cuda_device is None:
        return device, {}
    from tr.backend.registry import cuda_available

    kind = ("cuda" if cuda_available() else "cpu") if device == "auto" else device
    opts: dict[str, Any] = {} if group is None else {"collective": group.collective}
    if kind == "cuda":
        local = (0 if group is None else group.env.local_rank) if cuda_device is None else cuda_device
        if group is not None or cuda_device is not None:
            opts["device"] = local
        if force or (group is not None and group.world_size > 1):
            from tr.backend.cuda.nccl import NcclCollective

            rank, world = (0, 1) if group is None else (group.rank, group.world_size)
            timeout = bootstrap_timeout() if group is None else group.timeout_s
            opts["nccl"] = NcclCollective.from_store(None if group is None else group.store, local, rank, world,
                                                     timeout_s=timeout)
    return kind, opts


def broadcast_parameters(backend: Any, program: Any, collective: Collective) -> int:
    """Make every rank's initial model state (the InitSpec tensors of the roles that are ``shared``: BN
    statistics, parameters and those folded from them, EMA weights; not the scalars, as a rank's last-batch
    sizes are its own) rank 0's, in one broadcast of their bytes; returns the bytes sent. Initialisation is a
    pure function of the seed, so this only matters when ranks differ (a user initialiser with its own
    randomness), and then it is what keeps data-parallel training correct."""
    tensors = [i.tensor for i in program.inits if i.tensor.allocated and i.tensor.region.role.shared]
    if int(collective.world_size) == 1 or not tensors:
        return 0
    arrays = [backend.read(t) for t in tensors]
    flat = np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays])
    collective.broadcast(flat)
    off = 0
    for t, a in zip(tensors, arrays):
        backend.write(t, flat[off:off + a.nbytes].view(a.dtype))
        off += a.nbytes
    return off


def global_count(collective: Collective, n: int) -> float:
    """The mean over ranks of a per-rank count ``n``, exact (what a per-rank sum averaged over the ranks is
    divided by to become the global mean). Travels as two float32 parts below 2**24 so the sums stay exact."""
    world = int(collective.world_size)
    if world == 1:
        return float(n)
    buf = np.array([n >> 12, n & 0xFFF], np.float32)
    collective.allreduce_mean(buf)
    hi, lo = (round(float(v) * world) for v in buf)
    return (hi * 4096 + lo) / world
