"""The native worker pool: a worker thread that cannot start (memory or thread limit) unwinds cleanly,
joining the threads already started, and is a ConfigError instead of a hang in the constructor."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tr.core.errors import ConfigError
from tr.data import PreprocessorSettings, _native

ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")


def _run(code: str) -> subprocess.CompletedProcess:
    # A child process: before the fix the constructor deadlocked (or aborted), which must not take the
    # test run with it.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_a_thread_that_cannot_start_is_a_config_error_and_the_others_are_joined():
    r = _run("""
        import threading
        from tr.core.errors import ConfigError
        from tr.data import _native
        _native._fail_thread_start_at(5)
        try:
            _native.Engine(64)
        except ConfigError as e:
            print("ERR", e)
        _native._fail_thread_start_at(-1)
        e = _native.Engine(3)  # the pool works afterwards
        assert e.workers == 3
        del e
        print("OK")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERR preprocess_workers=64: could not start worker thread 6 (Resource temporarily unavailable" in r.stdout
    assert "use fewer workers" in r.stdout and r.stdout.rstrip().endswith("OK")


@pytest.mark.skipif(ASAN, reason="AddressSanitizer reserves terabytes of address space: no RLIMIT_AS under it")
def test_under_a_real_memory_limit():
    # The reporter's case: thousands of workers under an address-space limit (8 MiB stacks run out).
    r = _run("""
        import os, resource
        from tr.core.errors import ConfigError
        from tr.data import _native
        vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
        try:
            _native.Engine(4000)
            print("STARTED")
        except ConfigError as e:
            print("ERR", e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ERR preprocess_workers=4000: could not start worker thread"), r.stdout


def test_worker_counts_are_bounded_before_any_thread_starts():
    with pytest.raises(ConfigError, match=r"preprocess_workers must be <= 4096, got 5000"):
        PreprocessorSettings().preprocess_workers(5000)
    with pytest.raises(ConfigError, match=r"preprocess_workers must be in \[1, 4096\], got 2147483648"):
        _native.Engine(2**31)
    with pytest.raises(ConfigError, match=r"preprocess_workers must be in \[1, 4096\], got 0"):
        _native.Engine(0)
