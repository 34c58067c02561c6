"""The parser fuzzer shared by the tr-data and tr-tensor tests (their conftests expose it as the ``fuzz``
fixture; the root conftest puts this folder on sys.path).

Every case mutates one valid file deterministically (numpy Generator seeded per suite), loads it and
accepts exactly two outcomes: a successful load (a mutated payload byte can leave a valid file) or a
tr.core.errors.DataError whose message names the file. Anything else, or a case slower than SLOW_CASE_S,
fails with the case's recipe. Only numpy, pytest and tr.core: it runs where tr-data is installed alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tr.core.errors import DataError

EXTREME_U32 = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x10000)
SLOW_CASE_S = 5.0  # one parse taking longer than this counts as a hang


def mutate(raw: bytes, r: np.random.Generator, header: int = 64) -> tuple[bytes, str]:
    """One mutation of ``raw`` and a description of it. Half of the edits aim at the first ``header``
    bytes, where the parsers' size and type fields live."""
    n = len(raw)
    b = bytearray(raw)

    def pos() -> int:
        lim = min(n, header) if r.random() < 0.5 else n
        return int(r.integers(0, max(1, lim)))

    k = int(r.integers(0, 7))
    if k == 0 and n:
        ps = [pos() for _ in range(int(r.integers(1, 5)))]
        for p in ps:
            b[p] ^= 1 << int(r.integers(0, 8))
        return bytes(b), f"bit flips at {ps}"
    if k == 1:
        cut = int(r.integers(0, max(1, n)))
        return bytes(b[:cut]), f"truncated to {cut} bytes"
    if k == 2:
        extra = r.integers(0, 256, int(r.integers(1, 65)), dtype=np.uint8).tobytes()
        return bytes(b) + extra, f"{len(extra)} bytes appended"
    if k == 3 and n >= 4:
        p = min(pos(), n - 4)
        v = int(EXTREME_U32[int(r.integers(0, len(EXTREME_U32)))])
        order = "little" if r.random() < 0.5 else "big"
        b[p : p + 4] = v.to_bytes(4, order)
        return bytes(b), f"u32 {v:#x} ({order}) at {p}"
    if k == 4 and n:
        p = pos()
        ln = int(r.integers(1, 33))
        del b[p : p + ln]
        return bytes(b), f"{ln} bytes deleted at {p}"
    if k == 5 and n:
        p = pos()
        ins = r.integers(0, 256, int(r.integers(1, 17)), dtype=np.uint8).tobytes()
        b[p:p] = ins
        return bytes(b), f"{len(ins)} bytes inserted at {p}"
    if n:
        p = pos()
        v = int(r.choice([0x00, 0xFF, 0x7F, 0x80]))
        ln = int(r.integers(1, 9))
        b[p : p + ln] = bytes([v]) * len(b[p : p + ln])
        return bytes(b), f"{ln} bytes set to {v:#x} at {p}"
    return bytes(b), "unchanged (empty file)"


@dataclass
class Outcome:
    cases: int = 0
    loaded: int = 0
    rejected: int = 0
    unchanged: int = 0  # mutations that gave back the same bytes (e.g. a zero written over a zero)
    slowest_s: float = 0.0


def run_fuzz(
    label: str,
    seeds: Sequence[tuple[Path, bytes]],
    load: Callable[[Path], object],
    cases: int,
    seed: int,
    names: Callable[[Path], Sequence[str]] = lambda p: (str(p),),
    header: int = 64,
) -> Outcome:
    """Run ``cases`` mutations of the ``seeds`` files (each seed file in turn, restored when done).
    ``names(path)``: strings of which the DataError must contain at least one."""
    r = np.random.default_rng(seed)
    out = Outcome()
    dirty: tuple[Path, bytes] | None = None  # the seed file that holds a mutation (restored on a switch)
    for i in range(cases):
        path, raw = seeds[i * len(seeds) // cases]  # in blocks: one restore per seed, not per case
        if dirty is not None and dirty[0] != path:
            dirty[0].write_bytes(dirty[1])
        dirty = (path, raw)
        data, how = mutate(raw, r, header)
        out.unchanged += data == raw
        path.write_bytes(data)
        t0 = time.perf_counter()
        try:
            load(path)
            out.loaded += 1
        except DataError as e:
            msg = str(e)
            assert any(s in msg for s in names(path)), f"{label} case {i} ({how}): error does not name the file: {msg}"
            out.rejected += 1
        except Exception as e:  # noqa: BLE001 - the point: nothing but DataError may escape
            raise AssertionError(f"{label} case {i} ({how}): {type(e).__name__}: {e}") from e
        dt = time.perf_counter() - t0
        out.slowest_s = max(out.slowest_s, dt)
        assert dt < SLOW_CASE_S, f"{label} case {i} ({how}) took {dt:.1f} s"
        out.cases += 1
    if dirty is not None:
        dirty[0].write_bytes(dirty[1])
    print(f"[fuzz] {label}: {out.cases} cases, {out.loaded} loaded, {out.rejected} DataError, "
          f"slowest {out.slowest_s * 1e3:.1f} ms")
    return out
