"""The parser fuzzer shared by the tr-data, tr-tensor and tr-task tests and the integration tests (their
conftests put this folder on sys.path and expose ``run_fuzz`` as the ``fuzz`` fixture).

Two drivers:

* ``run_fuzz``: every case mutates one valid file deterministically (numpy Generator seeded per suite),
  loads it and accepts exactly two outcomes: a successful load (a mutated payload byte can leave a valid
  file) or a tr.core.errors.DataError whose message names the file.
* ``run_cases``: the general form for structure-aware suites, which build their own cases (a field edited
  and its checksums recomputed, a JSON value of another type, a state_dict with a tensor renamed) and check
  a load with their own oracle: each case loads (its oracle's asserts hold) or raises one of the accepted
  tr errors naming what it read.

For both, anything else, or a case slower than SLOW_CASE_S, fails with the case's recipe. The mutation
helpers (``mutate``, ``mutate_at``, ``near``, ``mutate_json``) are pure functions of the Generator. Every
suite's count is recorded; a test file's last test checks its suites' counts against its plan (``print_total``,
``one_process``). As a pytest plugin (``install(config)`` from a conftest's pytest_configure, or ``-p
parser_fuzz``) the module gives the ``fuzz`` fixture (``run_fuzz``) and ends the run with a per-suite count and
a total. Only numpy, pytest and tr.core: it runs where tr-data is installed alone.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tr.core.errors import DataError

EXTREME_U32 = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x10000)
SLOW_CASE_S = 5.0  # one parse taking longer than this counts as a hang


# ---- byte mutations -------------------------------------------------------------------------------------

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


def mutate_at(raw: bytes, start: int, length: int, r: np.random.Generator) -> tuple[bytes, str]:
    """``mutate`` aimed at ``raw[start:start + length]`` (a header inside a file: half of the edits land in
    it, the rest after it); the bytes before ``start`` are kept."""
    tail, how = mutate(raw[start:], r, header=max(1, length))
    return raw[:start] + tail, f"{how} (counted from byte {start})"


def near(v: int, r: np.random.Generator, bits: int = 32) -> int:
    """An interesting value for an unsigned ``bits``-bit field whose valid value is ``v``: off by one, zero,
    one, doubled, halved, grown by a page or a thousandfold, one bit flipped, or the type's extremes."""
    top = (1 << bits) - 1
    picks = (0, 1, v - 1, v + 1, 2 * v, v // 2, v + 4096, v * 1000, v ^ (1 << int(r.integers(0, bits))), top,
             top - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, 1 << 31, (1 << 31) - 1)
    return int(picks[int(r.integers(0, len(picks)))]) & top


# ---- JSON mutations -------------------------------------------------------------------------------------

ODD_JSON: tuple[Any, ...] = (None, True, False, 0, -1, 1.5, -0.0, 2**31, 2**63, -(2**63) - 1, 2**64, 10**40, 1e308,
                             float("nan"), float("inf"), float("-inf"), "", "x", "\x00", "\u00e9\u4e2d", "1",
                             [], {}, [None], {"": None}, [[[]]], "x" * 5000)


@dataclass(frozen=True)
class Deep:
    """A placeholder for a value nested ``depth`` levels deep (``[[[...]]]``): ``dumps`` writes it as text,
    since json.dumps cannot build what json.loads will refuse (Python's recursion limit)."""

    depth: int


def _paths(doc: Any, at: tuple = ()) -> Iterator[tuple]:
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*at, i))


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def mutate_json(doc: Any, r: np.random.Generator, protect: Sequence[str] = ()) -> tuple[Any, str]:
    """One structure-aware edit of a copy of the JSON document ``doc`` and its description: a value replaced
    by one of another type or an extreme (ODD_JSON), a number nudged, a string cut or grown, a key deleted,
    renamed or added, a list item dropped, repeated or two swapped, a value wrapped or nested deeply.
    ``protect``: top-level keys left alone (e.g. a checksum the caller recomputes)."""
    doc = copy.deepcopy(doc)
    paths = [p for p in _paths(doc) if p and p[0] not in protect]
    if not paths:
        return doc, "unchanged (nothing to edit)"
    path = paths[int(r.integers(0, len(paths)))]
    parent, key = _get(doc, path[:-1]), path[-1]
    v = parent[key]
    where = "/".join(map(str, path))
    k = int(r.integers(0, 10))
    if k == 0 and isinstance(v, (bool, int, float)):
        if isinstance(v, bool):
            new: Any = not v
        elif isinstance(v, int):
            new = [v + 1, v - 1, -v - 1, v * 2**33, float(v), str(v), v + 2**63][int(r.integers(0, 7))]
        else:
            new = [v * -1.0, v * 1e300, float("nan"), v + 1e-7, int(v) if np.isfinite(v) else 0][int(r.integers(0, 5))]
        parent[key] = new
        return doc, f"{where}: {v!r} -> {new!r}"
    if k == 1 and isinstance(v, str):
        new = [v[:-1], v + "x", "", v.upper(), v[::-1], v * 50, v + "\x00"][int(r.integers(0, 7))]
        parent[key] = new
        return doc, f"{where}: string {v[:40]!r} -> {new[:40]!r}"
    if k == 2 and isinstance(parent, dict):
        del parent[key]
        return doc, f"{where}: deleted"
    if k == 3 and isinstance(parent, dict):
        parent[f"{key}_"] = parent.pop(key)
        return doc, f"{where}: key renamed to {key}_"
    if k == 4 and isinstance(v, dict):
        v["zz_fuzz"] = ODD_JSON[int(r.integers(0, len(ODD_JSON)))]
        return doc, f"{where}: unknown key zz_fuzz added"
    if k == 5 and isinstance(v, list) and v:
        i, j = int(r.integers(0, len(v))), int(r.integers(0, len(v)))
        op = int(r.integers(0, 4))
        if op == 0:
            del v[i]
        elif op == 1:
            v.insert(i, copy.deepcopy(v[j]))
        elif op == 2:
            v[i], v[j] = v[j], v[i]
        else:
            v.reverse()
        return doc, f"{where}: list {('item dropped', 'item repeated', 'items swapped', 'reversed')[op]} ({i}, {j})"
    if k == 6:
        parent[key] = [v] if r.random() < 0.5 else {"value": v}
        return doc, f"{where}: wrapped"
    if k == 7 and r.random() < 0.3:
        depth = int(r.choice([50, 5000]))
        parent[key] = Deep(depth)
        return doc, f"{where}: nested {depth} deep"
    new = copy.deepcopy(ODD_JSON[int(r.integers(0, len(ODD_JSON)))])
    parent[key] = new
    return doc, f"{where}: {str(v)[:40]!r} -> {str(new)[:40]!r}"


def dumps(doc: Any, **kw: Any) -> str:
    """json.dumps that writes ``Deep`` placeholders as deeply nested lists."""
    deep: dict[str, int] = {}

    def default(o: Any) -> Any:
        if isinstance(o, Deep):
            tag = f"\x01deep{len(deep)}\x01"
            deep[tag] = o.depth
            return tag
        raise TypeError(f"{type(o).__name__} is not JSON")

    text = json.dumps(doc, default=default, **kw)
    for tag, depth in deep.items():
        text = text.replace(json.dumps(tag), "[" * depth + "]" * depth)
    return text


# ---- files ----------------------------------------------------------------------------------------------

def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a new file (a new inode): a map of the previous content (a reader that
    keeps its file mapped) keeps its bytes instead of faulting on a truncated file."""
    path.unlink(missing_ok=True)
    path.write_bytes(data)


@contextmanager
def scratch(prefix: str = "tr-fuzz-") -> Iterator[Path]:
    """A temporary directory in memory (/dev/shm where it is writable, else the system's temp dir): suites
    write a mutated file per case, so their cases stay cheap."""
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix=prefix, dir=where) as d:
        yield Path(d)


# ---- drivers --------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    cases: int = 0
    loaded: int = 0
    rejected: int = 0
    unchanged: int = 0  # mutations that gave back the same bytes (e.g. a zero written over a zero)
    slowest_s: float = 0.0
    errors: Counter = field(default_factory=Counter)  # refusals by error class


RAN: dict[str, int] = {}  # label -> cases run in this process (the terminal summary)


def record(label: str, cases: int) -> None:
    """Count ``cases`` of suite ``label`` in the run's summary (the drivers call it)."""
    RAN[label] = RAN.get(label, 0) + cases


Case = tuple[str, Callable[[], object], Sequence[str]]  # (recipe, run the load and its oracle, names)


class _Runner:
    def __init__(self, label: str, accept: tuple[type[BaseException], ...], slow_s: float) -> None:
        self.label, self.accept, self.slow_s = label, accept, slow_s
        self.out = Outcome()

    def one(self, i: int, how: str, run: Callable[[], object], names: Sequence[str]) -> None:
        out = self.out
        t0 = time.perf_counter()
        try:
            run()
            out.loaded += 1
        except self.accept as e:
            msg = str(e)
            assert any(s in msg for s in names), \
                f"{self.label} case {i} ({how}): {type(e).__name__} does not name {list(names)}: {msg}"
            out.rejected += 1
            out.errors[type(e).__name__] += 1
        except Exception as e:  # noqa: BLE001 - the point: nothing but the accepted errors may escape
            raise AssertionError(f"{self.label} case {i} ({how}): {type(e).__name__}: {e}") from e
        dt = time.perf_counter() - t0
        out.slowest_s = max(out.slowest_s, dt)
        assert dt < self.slow_s, f"{self.label} case {i} ({how}) took {dt:.1f} s"
        out.cases += 1

    def done(self, refused: str) -> Outcome:
        out = self.out
        record(self.label, out.cases)
        print(f"[fuzz] {self.label}: {out.cases} cases, {out.loaded} loaded, {out.rejected} {refused}, "
              f"slowest {out.slowest_s * 1e3:.1f} ms")
        return out


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
    runner = _Runner(label, (DataError,), SLOW_CASE_S)
    dirty: tuple[Path, bytes] | None = None  # the seed file that holds a mutation (restored on a switch)
    for i in range(cases):
        path, raw = seeds[i * len(seeds) // cases]  # in blocks: one restore per seed, not per case
        if dirty is not None and dirty[0] != path:
            dirty[0].write_bytes(dirty[1])
        dirty = (path, raw)
        data, how = mutate(raw, r, header)
        runner.out.unchanged += data == raw
        path.write_bytes(data)
        runner.one(i, how, lambda p=path: load(p), names(path))
    if dirty is not None:
        dirty[0].write_bytes(dirty[1])
    return runner.done("DataError")


def run_cases(
    label: str,
    cases: Iterable[Case],
    accept: tuple[type[BaseException], ...] = (DataError,),
    slow_s: float = SLOW_CASE_S,
) -> Outcome:
    """Run every (recipe, run, names) case: ``run()`` loads and checks the result itself (returning means
    "loaded correctly") or raises one of ``accept`` whose message contains one of ``names``. A case that
    raises anything else fails the suite with its recipe."""
    runner = _Runner(label, accept, slow_s)
    for i, (how, run, names) in enumerate(cases):
        runner.one(i, how, run, names)
    return runner.done("refused" + (f" {dict(runner.out.errors)}" if runner.out.errors else ""))


# ---- a test file's closing check ------------------------------------------------------------------------

# The mark of a file's last test, which reads the counts its suites left in this process.
one_process = pytest.mark.skipif(bool(os.environ.get("PYTEST_XDIST_WORKER")),
                                 reason="under pytest-xdist the suites above ran in other processes: their counts are "
                                        "not here")


def print_total(what: str, counts: Mapping[str, int]) -> int:
    """Print the cases a test file's suites ran (``counts``: suite label -> cases) and return their total, for
    the file's last test to check against its plan."""
    total = sum(counts.values())
    print(f"[fuzz] {what}: {total} cases in all ({counts})")
    return total


# ---- the plugin: the ``fuzz`` fixture and the run's summary ---------------------------------------------

@pytest.fixture
def fuzz() -> Callable[..., Outcome]:
    """``run_fuzz``."""
    return run_fuzz


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RAN:
        return
    terminalreporter.section("fuzz cases")
    for label, n in RAN.items():
        terminalreporter.write_line(f"[fuzz] {label}: {n} cases")
    terminalreporter.write_line(f"[fuzz] total: {sum(RAN.values())} cases in {len(RAN)} suites")


def install(config: Any) -> None:
    """Make this module a plugin of the pytest run (once): its ``fuzz`` fixture, and the fuzz summary that ends
    the run. Each conftest whose tests fuzz calls it from its pytest_configure."""
    me = sys.modules[__name__]
    if not config.pluginmanager.is_registered(me):
        config.pluginmanager.register(me, "tr-parser-fuzz")
