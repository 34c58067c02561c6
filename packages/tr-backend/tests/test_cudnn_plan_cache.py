"""The cuDNN autotuning cache's file, without a GPU (csrc/ops/conv_plan_cache.cpp through the extension's test
hooks): its format and name, the directory settings, atomic writes merged with what other processes wrote
(concurrent writers keep every entry), and a corrupt, unreadable or unwritable file ignored with a warning."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from tr.backend.cuda.cudnn import CudnnPlanStats, cudnn_plan_stats, log_plan_cache_warnings
from tr.backend.cuda.native import load_native

native = load_native().module
pytestmark = pytest.mark.skipif(native is None or not hasattr(native, "_plan_cache_parse"),
                                reason="extension built without the CUDA ops")

IDENT = "gpu=NVIDIA H200 sm90 cudnn=92400 frontend=13200"
MAGIC = "# tr cuDNN plan cache v1"


def _warnings() -> list[str]:
    return list(native.take_cudnn_plan_cache_warnings())


def _read(path) -> dict[str, str]:
    ok, entries, why = native._plan_cache_parse(path.read_text(), IDENT)
    assert ok and why == "", why
    return dict(entries)


@pytest.fixture(autouse=True)
def _no_leftover_warnings():
    _warnings()
    yield
    _warnings()


def test_identity_and_file_name_sanitise_the_gpu_name():
    assert native._plan_cache_ident("NVIDIA H200", 9, 0, 92400, 13200) == IDENT
    assert native._plan_cache_file_name("NVIDIA H200", 9, 0, 92400, 13200) == \
        "cudnn_plans-NVIDIA_H200-sm90-cudnn92400-fe13200.tsv"
    assert native._plan_cache_file_name("NVIDIA GeForce RTX 4090 (a/b)", 8, 9, 91000, 10800) == \
        "cudnn_plans-NVIDIA_GeForce_RTX_4090_a_b-sm89-cudnn91000-fe10800.tsv"
    assert native._plan_cache_file_name("/", 9, 0, 1, 2) == "cudnn_plans-gpu-sm90-cudnn1-fe2.tsv"


def test_format_round_trips():
    entries = {"fprop:n8:h16:FP32,FP32,FP32:tf32=0:ws1024M": "eng0_k2=1_k3=0", "wgrad:n1": "eng42"}
    text = native._plan_cache_format(IDENT, entries)
    assert text.startswith(MAGIC) and text.splitlines()[1] == "# " + IDENT
    assert native._plan_cache_parse(text, IDENT) == (True, entries, "")


@pytest.mark.parametrize("text, why", [
    ("", "first line"),
    ("\x00\xff garbage\n", "first line"),
    ("key\tengine\n", "first line"),
    (MAGIC + "\n", "second line"),
    (MAGIC + "\n# gpu=NVIDIA A100 sm80 cudnn=92400 frontend=13200\nk\teng0\n", "expected '# " + IDENT),
])
def test_parse_refuses_what_is_not_a_cache_for_this_gpu_and_version(text, why):
    ok, entries, got = native._plan_cache_parse(text, IDENT)
    assert not ok and entries == {} and why in got, got


def test_parse_skips_malformed_lines_and_keeps_the_rest():
    text = "\n".join([MAGIC, "# " + IDENT, "a\teng1", "no tab", "x\ty\tz", "\tempty key", "# a comment", "",
                      "crlf\teng2\r", "b\teng3", "a\teng4"]) + "\n"
    ok, entries, why = native._plan_cache_parse(text, IDENT)
    assert ok and entries == {"a": "eng4", "b": "eng3"}  # the last of two lines for one key wins
    assert why == "4 malformed line(s) skipped, the first at line 4"


def test_directory_settings(monkeypatch):
    monkeypatch.setenv("TR_CACHE_DIR", "/somewhere/tr")
    monkeypatch.delenv("TR_CUDNN_CACHE", raising=False)
    assert native._plan_cache_directory() == "/somewhere/tr"
    monkeypatch.delenv("TR_CACHE_DIR")
    monkeypatch.setenv("HOME", "/home/me")
    assert native._plan_cache_directory() == "/home/me/.cache/tr"
    for off in ("0", "false", "No", "OFF"):
        monkeypatch.setenv("TR_CUDNN_CACHE", off)
        assert native._plan_cache_directory() == ""
    monkeypatch.setenv("TR_CUDNN_CACHE", "1")
    assert native._plan_cache_directory() == "/home/me/.cache/tr"


def test_store_writes_atomically_and_merges_other_writers(tmp_path):
    path = tmp_path / "new" / "dir" / "plans.tsv"  # directories are made
    native._plan_cache_store(str(path), IDENT, "k1", "eng1")
    assert _read(path) == {"k1": "eng1"}
    # another process rewrote the file meanwhile: its entries are kept, ours win where both measured a key
    path.write_text(native._plan_cache_format(IDENT, {"k1": "eng-other", "k2": "eng2"}))
    native._plan_cache_store(str(path), IDENT, "k3", "eng3")
    assert _read(path) == {"k1": "eng1", "k2": "eng2", "k3": "eng3"}
    assert native._plan_cache_entries(str(path), IDENT) == {"k1": "eng1", "k2": "eng2", "k3": "eng3"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["plans.tsv", "plans.tsv.lock"]  # no temp files
    assert _warnings() == []


def test_an_existing_file_is_read_once_on_first_lookup(tmp_path):
    path = tmp_path / "plans.tsv"
    path.write_text(native._plan_cache_format(IDENT, {"k": "eng7"}))
    assert native._plan_cache_entries(str(path), IDENT) == {"k": "eng7"}
    path.write_text(native._plan_cache_format(IDENT, {"k": "eng8"}))
    assert native._plan_cache_entries(str(path), IDENT) == {"k": "eng7"}  # until a store merges the file


_WRITER = """
import sys
from tr.backend import _native as n
path, ident, rank = sys.argv[1], sys.argv[2], sys.argv[3]
for i in range(25):
    n._plan_cache_store(path, ident, f"rank{rank}:shape{i}", f"eng{i}_k2={rank}")
assert not n.take_cudnn_plan_cache_warnings()
"""


def test_concurrent_processes_keep_every_entry(tmp_path):
    """Data-parallel ranks store their results at the same moment: the lock and the merge keep them all."""
    path = tmp_path / "plans.tsv"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), IDENT, str(r)], stderr=subprocess.PIPE)
             for r in range(6)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert _read(path) == {f"rank{r}:shape{i}": f"eng{i}_k2={r}" for r in range(6) for i in range(25)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plans.tsv", "plans.tsv.lock"]


def test_corrupt_file_is_ignored_with_a_warning_then_rewritten(tmp_path):
    path = tmp_path / "plans.tsv"
    path.write_bytes(b"\x00\x01 half a file")
    assert native._plan_cache_entries(str(path), IDENT) == {}
    (w,) = _warnings()
    assert str(path) in w and "ignored" in w
    native._plan_cache_store(str(path), IDENT, "k", "eng1")
    assert _read(path) == {"k": "eng1"}


def test_unreadable_and_unwritable_cache_only_warns(tmp_path):
    path = tmp_path / "plans.tsv"
    path.mkdir()  # a directory where the file should be: read and rename both fail
    assert native._plan_cache_entries(str(path), IDENT) == {}
    native._plan_cache_store(str(path), IDENT, "k", "eng1")  # never raises
    native._plan_cache_store(str(path), IDENT, "k2", "eng2")  # warned once: later stores stay in memory
    warnings = _warnings()
    assert len(warnings) == 2 and "cannot be read" in warnings[0] and "cannot be written" in warnings[1]
    assert native._plan_cache_entries(str(path), IDENT) == {"k": "eng1", "k2": "eng2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plans.tsv", "plans.tsv.lock"]  # no temp file left
    native._plan_cache_store(str(tmp_path / "x.tsv"), IDENT, "bad\tkey", "eng1")
    (w,) = _warnings()
    assert "not storable" in w


def test_warnings_are_logged_on_the_cudnn_logger(tmp_path, caplog):
    path = tmp_path / "plans.tsv"
    path.write_text("not a cache\n")
    native._plan_cache_entries(str(path), IDENT)
    with caplog.at_level(logging.WARNING, logger="tr.backend.cuda.cudnn"):
        log_plan_cache_warnings()
    assert [r.name for r in caplog.records] == ["tr.backend.cuda.cudnn"]
    assert "is not one for" in caplog.records[0].getMessage()


def test_plan_stats_are_counters_that_subtract():
    s = cudnn_plan_stats()
    assert isinstance(s, CudnnPlanStats) and s.graphs >= 0 and s.seconds >= 0.0
    d = CudnnPlanStats(graphs=3, cache_hits=2, seconds=1.5) - CudnnPlanStats(graphs=1, seconds=0.5)
    assert (d.graphs, d.cache_hits, d.seconds) == (2, 2, 1.0)
