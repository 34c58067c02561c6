"""NcclWatchdog without a device: a fake communicator and a fake clock show when it aborts and what it says.
(The real communicator's async_error/abort are exercised on the GPU in test_cuda_nccl.py.)"""

from __future__ import annotations

import time

import pytest

from tr.backend.cuda.nccl import IN_PROGRESS
from tr.backend.cuda.watchdog import NcclWatchdog
from tr.core.errors import BackendError, ConfigError


class FakeComm:
    rank, world_size = 1, 4

    def __init__(self) -> None:
        self.code = 0
        self.aborted = 0

    def async_error(self) -> int:
        return -1 if self.aborted else self.code

    def error_text(self, code: int) -> str:
        return f"remote process exited or there was a network error ({code})"

    def abort(self) -> None:
        self.aborted += 1


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_busy_or_healthy_communicator_is_left_alone():
    comm, clock = FakeComm(), Clock()
    wd = NcclWatchdog(comm, timeout_s=10, clock=clock)
    wd.arm()
    for code in (0, IN_PROGRESS, 0):
        comm.code = code
        clock.t += 4
        wd.beat()
        assert wd.poll() is False
    wd.check()
    assert comm.aborted == 0 and wd.failure is None


def test_an_error_reported_by_nccl_aborts_at_once_and_check_raises_it():
    comm = FakeComm()
    wd = NcclWatchdog(comm, timeout_s=1000)  # not armed: an error needs no timeout
    comm.code = 6  # ncclRemoteError
    assert wd.poll() is True
    assert comm.aborted == 1
    with pytest.raises(BackendError, match=r"rank 1 of 4: NCCL reported remote process exited .*\(6\).*aborted"):
        wd.check()
    assert wd.poll() is False and comm.aborted == 1  # once


def test_no_progress_while_armed_aborts_after_the_timeout_only():
    comm, clock = FakeComm(), Clock()
    wd = NcclWatchdog(comm, timeout_s=30, clock=clock)
    wd.arm()
    clock.t += 29
    assert wd.poll() is False
    wd.disarm()  # host work between epochs: as long as it likes
    clock.t += 500
    assert wd.poll() is False
    wd.arm()
    clock.t += 31
    assert wd.poll() is True and comm.aborted == 1
    with pytest.raises(BackendError, match=r"no training progress for 31 s \(timeout 30 s\).*peer rank died"):
        wd.check()


def test_a_closed_communicator_ends_the_watch_quietly():
    comm = FakeComm()
    comm.aborted = 1  # closed by its owner
    wd = NcclWatchdog(comm, timeout_s=1, clock=lambda: 1e9)
    wd.arm()
    assert wd.poll() is False and wd.failure is None


def test_the_thread_polls_and_stops():
    comm = FakeComm()
    wd = NcclWatchdog(comm, timeout_s=60, poll_s=0.01).start()
    comm.code = 3  # ncclInternalError
    deadline = time.monotonic() + 5
    while wd.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    wd.stop()
    assert comm.aborted == 1 and wd.failure.startswith("rank 1 of 4: NCCL reported") and "(3)" in wd.failure
    assert wd._thread is None


@pytest.mark.parametrize("bad", [0, -1, "5", True])
def test_settings_out_of_range_are_refused(bad):
    with pytest.raises(ConfigError, match="timeout_s must be > 0"):
        NcclWatchdog(FakeComm(), timeout_s=bad)
