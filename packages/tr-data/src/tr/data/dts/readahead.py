"""Read-ahead for a JPEG DTS pack read PARTIAL: the seed's A/B buffers over the page cache.

A PARTIAL epoch visits the pack one buffer of ``buffer_blocks`` blocks at a time (tr.data.seeds.
block_shuffle_order). While the workers decode buffer b, a thread asks the kernel to read buffer b + 1's blocks
(``madvise(MADV_WILLNEED)`` on the mapping: asynchronous, whole 16 MiB blocks), and once the workers are in
buffer b it lets buffer b - 1 go (``madvise(MADV_DONTNEED)`` drops the mapping's pages, ``posix_fadvise(
POSIX_FADV_DONTNEED)`` the cached file pages), so a pack larger than memory streams through about two buffers
of page cache instead of random 4 KiB faults. The samples and their bytes do not change: this only moves I/O.

The thread follows the workers through a progress function (samples done so far, in epoch positions) and
stops with the epoch.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable, Sequence

from tr.core.log import get_logger

log = get_logger(__name__)

Span = tuple[int, int]  # (byte offset, length) in the file


def _page_span(offset: int, length: int, size: int) -> Span:
    """The span widened to whole pages and clipped to the file (madvise needs a page-aligned start)."""
    page = mmap.PAGESIZE
    start = offset // page * page
    end = min(size, offset + length)
    return start, max(0, end - start)


class Readahead:
    """``spans[b]``: the byte ranges of buffer b's blocks; ``starts[b]``: the epoch position of its first sample
    (``starts[0] == 0``); ``progress()``: samples done so far, in the same positions. ``advice`` records what
    was advised, in order: ("willneed" | "release", buffer)."""

    def __init__(self, mapping: mmap.mmap, path: str | os.PathLike, spans: Sequence[Sequence[Span]],
                 starts: Sequence[int], progress: Callable[[], int], poll_s: float = 0.002) -> None:
        if len(spans) != len(starts):
            raise ValueError(f"{len(spans)} buffers of spans but {len(starts)} buffer starts")
        self._map, self._path = mapping, os.fspath(path)
        self._size = len(mapping)
        self._spans = [list(s) for s in spans]
        self._starts = list(starts)
        self._progress, self._poll = progress, poll_s
        self._stop = threading.Event()
        self.advice: list[tuple[str, int]] = []
        self._thread = threading.Thread(target=self._run, name="tr-dts-readahead", daemon=True)

    def start(self) -> Readahead:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _willneed(self, b: int) -> None:
        for off, n in self._spans[b]:
            start, length = _page_span(off, n, self._size)
            if length:
                self._map.madvise(mmap.MADV_WILLNEED, start, length)
        self.advice.append(("willneed", b))

    def _release(self, b: int, fd: int | None) -> None:
        for off, n in self._spans[b]:
            start, length = _page_span(off, n, self._size)
            if not length:
                continue
            self._map.madvise(mmap.MADV_DONTNEED, start, length)
            if fd is not None:
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)
        self.advice.append(("release", b))

    def _wait_for(self, position: int) -> bool:
        while self._progress() < position:
            if self._stop.wait(self._poll):
                return False
        return True

    def _run(self) -> None:
        try:
            fd = os.open(self._path, os.O_RDONLY) if hasattr(os, "posix_fadvise") else None
        except OSError:
            fd = None
        try:
            if self._spans:
                self._willneed(0)
            for b in range(len(self._spans)):
                if not self._wait_for(self._starts[b]):
                    return
                if b + 1 < len(self._spans):
                    self._willneed(b + 1)
                if b >= 1:
                    self._release(b - 1, fd)
        except (OSError, ValueError) as e:  # advice is only advice: reading still works without it
            log.warning("DTS read-ahead for %s stopped: %s", self._path, e)
        finally:
            if fd is not None:
                os.close(fd)

