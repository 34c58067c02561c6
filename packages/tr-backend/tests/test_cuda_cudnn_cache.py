"""The cuDNN autotuning cache across processes (issue 11), on a GPU: a second compile of the same CNN builds
only the cached engines, untimed, and trains to the same bytes; stale entries, a corrupt file and
TR_CUDNN_CACHE=0 fall back to a search (with a logged warning where the file was bad), never to an error.

Each compile runs in its own process (cudnn_cache_child.py): the plans of one process are shared in memory,
so only a fresh process shows what the file alone saves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

CHILD = Path(__file__).with_name("cudnn_cache_child.py")
PLANS = 5  # two fprop, two wgrad, one dgrad (cudnn_cache_child.py)


def _compile(cache_dir: Path, math: str = "fp32", **env: str) -> tuple[dict, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("TR_CUDNN_CACHE", "TR_CUDNN_AUTOTUNE")}
    # TR_CONV=cudnn: no silent direct kernels; the cache holds autotuned engines only (the default rule reads none)
    e.update(TR_CACHE_DIR=str(cache_dir), TR_CONV="cudnn", TR_CUDNN_AUTOTUNE="1", **env)
    p = subprocess.run([sys.executable, str(CHILD), math], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"child failed:\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def _summary(run: dict) -> str:
    s = run["stats"]
    return (f"{s['graphs']} plans, {s['plans_built']} built, {s['autotuned']} tuned, {s['cache_hits']} hits: "
            f"{s['seconds']:.2f} s ({s['build_seconds']:.2f} s building, {s['tune_seconds']:.2f} s timing)")


@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_second_compile_builds_the_cached_engines_untimed(tmp_path, math):
    cold, _ = _compile(tmp_path, math)
    warm, warnings = _compile(tmp_path, math)
    print(f"\ncuDNN planning, {math}: cold {_summary(cold)}; warm {_summary(warm)}")
    c, w = cold["stats"], warm["stats"]
    assert c["graphs"] == PLANS and c["cache_misses"] == PLANS and c["cache_hits"] == 0, c
    assert (w["graphs"], w["cache_hits"], w["cache_misses"], w["cache_stale"]) == (PLANS, PLANS, 0, 0), w
    assert w["autotuned"] == 0 and w["tune_seconds"] == 0 and w["plans_built"] == PLANS, w
    assert warm["infos"] == cold["infos"]  # the same engines, by name
    assert warm["losses"] == cold["losses"] and warm["digest"] == cold["digest"]  # the same bytes
    cache = Path(cold["cache"])
    assert cache.parent == tmp_path and cache.is_file() and warm["cache"] == cold["cache"]
    assert re.fullmatch(r"cudnn_plans-[A-Za-z0-9._-]+-sm\d+-cudnn\d+-fe\d+\.tsv", cache.name), cache.name
    assert len([ln for ln in cache.read_text().splitlines() if not ln.startswith("#")]) == PLANS
    assert "plan cache" not in warnings


def test_stale_corrupt_or_disabled_cache_means_a_search(tmp_path):
    cold, _ = _compile(tmp_path)
    cache = Path(cold["cache"])
    header, entries = [], []
    for line in cache.read_text().splitlines():
        (header if line.startswith("#") else entries).append(line)

    # engines cuDNN does not offer (as after an upgrade that changed its heuristics): searched, then replaced
    cache.write_text("\n".join(header + [e.split("\t")[0] + "\teng99999_k1=7" for e in entries]) + "\n")
    stale, warnings = _compile(tmp_path)
    s = stale["stats"]
    assert (s["cache_stale"], s["cache_hits"], s["cache_misses"], s["graphs"]) == (PLANS, 0, 0, PLANS), s
    assert "eng99999_k1=7" in warnings and "searching again" in warnings
    assert "eng99999" not in cache.read_text()
    for a, b in zip(stale["losses"], cold["losses"]):  # a new search may pick other (deterministic) engines
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b))

    # garbage: ignored with a warning, rewritten whole
    cache.write_bytes(b"\x00\xff not a cache\n")
    corrupt, warnings = _compile(tmp_path)
    assert corrupt["stats"]["cache_misses"] == PLANS and "ignored" in warnings
    assert cache.read_text().startswith("# tr cuDNN plan cache v1")

    # off: neither read nor written
    before = cache.read_bytes()
    off, _ = _compile(tmp_path, TR_CUDNN_CACHE="0")
    o = off["stats"]
    assert (o["cache_hits"], o["cache_misses"], o["cache_stale"]) == (0, 0, 0) and off["cache"] == ""
    assert cache.read_bytes() == before
