"""tr-task test configuration: the parser fuzzer of tools/testkit/parser_fuzz.py (fixture ``fuzz``;
test_fuzz_checkpoint.py imports its structure-aware driver) and its per-suite summary at the end of the run;
``resign``, a checkpoint manifest edited with its checksum recomputed."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tr.task import checkpoint_files

_TESTKIT = str(Path(__file__).resolve().parents[3] / "tools" / "testkit")
if _TESTKIT not in sys.path:
    sys.path.insert(0, _TESTKIT)

import parser_fuzz  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    parser_fuzz.install(config)  # the fixture ``fuzz`` and the per-suite summary


def _resign(path: Path, edit: Callable[[dict[str, Any]], None] | None = None, **changes: Any) -> None:
    m = json.loads((path / checkpoint_files.MANIFEST).read_text())
    m.update(changes)
    if edit is not None:
        edit(m)
    body = {k: v for k, v in m.items() if k != "sha256"}
    m["sha256"] = hashlib.sha256(checkpoint_files._canonical(body)).hexdigest()
    (path / checkpoint_files.MANIFEST).write_text(json.dumps(m))


@pytest.fixture
def resign() -> Callable[..., None]:
    """``resign(path, epoch=3)``: the checkpoint at ``path`` with these manifest keys changed (then ``edit``, a
    function given the manifest, e.g. ``edit=lambda m: m["config"].pop("env")``, run on it) and the manifest's
    checksum recomputed, as a hand edit that knows the format would make it (so the semantic checks decide)."""
    return _resign
