"""NcclWatchdog: turns a rank that died mid-training into an error on every other rank, instead of a hang.

A captured step waits inside ncclAllReduce for every rank. When a peer dies, NCCL either reports it (a
network peer's closed socket: ncclCommGetAsyncError turns into an error) or the kernels simply wait forever
(peers over NVLink/PCIe). A thread polls the communicator every ``poll_s`` seconds; while the training loop is
armed (it is waiting on the device) and has not beaten for ``timeout_s`` seconds, or as soon as NCCL reports
an error, the thread aborts the communicator (ncclCommAbort ends the waiting kernels, so the loop's wait
returns) and records why. The loop calls :meth:`check` before each launch and raises that reason.

The loop's cost per step is one attribute test and one clock read (``beat``). Disarm it around host work that
legitimately takes long on one rank (a checkpoint written between epochs) so its own watchdog stays quiet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from tr.backend.cuda.nccl import IN_PROGRESS
from tr.core.errors import BackendError, ConfigError
from tr.core.log import get_logger

log = get_logger(__name__)


class Watched(Protocol):
    rank: int
    world_size: int

    def async_error(self) -> int: ...
    def error_text(self, code: int) -> str: ...
    def abort(self) -> None: ...


class NcclWatchdog:
    def __init__(self, comm: Watched, timeout_s: float, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for name, v in (("timeout_s", timeout_s), ("poll_s", poll_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"NcclWatchdog {name} must be > 0 seconds, got {v!r}")
        self.comm, self.timeout_s, self.poll_s, self.clock = comm, float(timeout_s), float(poll_s), clock
        self.failure: str | None = None
        self.armed = False
        self.last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the training loop's side -------------------------------------------------------------------------
    def arm(self) -> None:
        """From now on, a wait longer than timeout_s without a beat means a peer stopped answering."""
        self.last = self.clock()
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def beat(self) -> None:
        """The loop made progress (a step's copy finished)."""
        self.last = self.clock()

    def check(self) -> None:
        """BackendError once the watchdog aborted the communicator (nothing may be launched on it then)."""
        if self.failure is not None:
            raise BackendError(self.failure)

    # --- the thread ---------------------------------------------------------------------------------------
    def start(self) -> NcclWatchdog:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="tr-nccl-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread (before the communicator is destroyed: the two must not race)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def poll(self) -> bool:
        """One look at the communicator; True when it was aborted now."""
        if self.failure is not None:
            return False
        code = self.comm.async_error()
        who = f"rank {self.comm.rank} of {self.comm.world_size}"
        if code not in (0, IN_PROGRESS):  # busy is healthy
            if code == -1:  # closed by its owner: nothing left to watch
                return False
            return self._fail(f"{who}: NCCL reported {self.comm.error_text(code)} (a peer rank failed or its "
                              f"connection broke); the communicator was aborted")
        waited = self.clock() - self.last
        if self.armed and waited > self.timeout_s:
            return self._fail(f"{who}: no training progress for {waited:.0f} s (timeout {self.timeout_s:g} s) while "
                              f"waiting for a collective: a peer rank died or hangs; the communicator was aborted")
        return False

    def _fail(self, why: str) -> bool:
        self.failure = why
        log.error("%s", why)
        try:
            self.comm.abort()
        except Exception as e:  # already gone: the reason above still stands
            log.error("ncclCommAbort failed: %s", e)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.poll():
                return

    def __enter__(self) -> NcclWatchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
