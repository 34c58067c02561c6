"""benchmarks/cnn.py quotes only rows whose every timed step applied its update: a PyTorch row that skipped
steps (GradScaler, non-finite gradients) is never the strongest twin, and tr's ratio is not quoted when tr skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cnn  # noqa: E402


def _rows(**skips: int) -> dict[str, dict]:
    speeds = {"tr": 1000.0, "pytorch_eager": 800.0, "pytorch_cuda_graph": 850.0, "pytorch_compile_default": 950.0}
    rows = {k: {"images_per_s": v, "ms_per_step": 1.0, "skipped_steps_timed": skips.get(k, 0)}
            for k, v in speeds.items()}
    rows["tr"].update(compile_s=1.0, compile_split_s={"capture_s": 1.0}, arena_gib=1.0, launches_per_step=2,
                      backend="cuda")
    return rows


def test_the_strongest_twin_is_the_fastest_row_that_stepped():
    assert cnn.strongest(_rows()) == "pytorch_compile_default"
    assert cnn.strongest(_rows(pytorch_compile_default=50)) == "pytorch_cuda_graph"
    assert cnn.strongest(_rows(pytorch_eager=1, pytorch_cuda_graph=2, pytorch_compile_default=3)) is None


def test_the_json_names_unquotable_rows_and_quotes_no_ratio_for_them(tmp_path, capsys):
    a = cnn.parse(["--device", "cpu", "--json", str(tmp_path / "r.json")])
    cnn.write_json(a, _rows(pytorch_compile_default=50), {})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["not_quotable"] == ["pytorch_compile_default"]
    assert doc["strongest_pytorch"] == "pytorch_cuda_graph"
    assert abs(doc["tr_vs_strongest_pytorch"] - 1000 / 850) < 1e-12
    cnn.write_json(a, _rows(tr=3), {})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["not_quotable"] == ["tr"] and "tr_vs_strongest_pytorch" not in doc
    cnn.report(a, _rows(tr=3))
    out = capsys.readouterr().out
    assert "NOT QUOTABLE: 3/50 timed steps skipped" in out and "not quoted (tr skipped timed steps)" in out
