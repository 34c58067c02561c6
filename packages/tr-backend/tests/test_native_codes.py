"""The codes that cross the CUDA boundary are declared once in tr.core and generated into csrc/ops/codes.hpp
(tools/gen_native_codes.py): the committed header is what the generator writes now, the generator is
deterministic, and the C++ keeps no copy of its own."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tr.core.dtype import DType
from tr.core.ops import (
    ACTIVATION_CODES,
    ACTIVATIONS,
    BN_ACTIVATION_CODES,
    BN_ACTIVATIONS,
    BN_MASK_CODES,
    BN_MASKS,
    CONV_ENGINE_CODES,
    CONV_ENGINES,
    EXTERN_PARAM_CODES,
    EXTERN_PARAMS,
    IMAGE_GEOM,
    IMAGE_GEOM_COLS,
    ONEHOT_LOSS_CODES,
    ONEHOT_LOSSES,
    OPTIMIZER_RULE_CODES,
    OPTIMIZER_RULES,
)

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "gen_native_codes.py"
CSRC = ROOT / "packages" / "tr-backend" / "csrc"


def _generator():
    spec = importlib.util.spec_from_file_location("tr_gen_native_codes", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()


def _enums(text: str) -> dict[str, dict[str, int]]:
    """{enum: {member: code}} of the header's `enum class X : int { A = 0, ... };`"""
    out = {}
    for name, body in re.findall(r"enum class (\w+) : int \{([^}]*)\};", text):
        out[name] = {m: int(c) for m, c in re.findall(r"(\w+) = (-?\d+)", body)}
    return out


def test_the_committed_header_is_current():
    assert GEN.HEADER.read_text() == GEN.render(), f"run python {TOOL.relative_to(ROOT)} and rebuild the extension"
    assert GEN.main(["--check"]) == 0


def test_the_generator_is_deterministic_across_processes():
    def run(seed: str) -> str:
        code = f"import runpy; print(runpy.run_path({str(TOOL)!r}, run_name='gen')['render'](), end='')"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                              text=True).stdout

    first = run("1")
    assert first == run("2") == GEN.render()


def test_the_header_holds_the_tr_core_numbers():
    enums = _enums(GEN.HEADER.read_text())
    assert enums["DT"] == {GEN.DT_NAMES[d]: d.code for d in DType}
    assert enums["ActKind"] == {k.upper(): ACTIVATION_CODES[k] for k in ACTIVATIONS}
    assert enums["BnAct"] == {("NONE" if a is None else a.upper()): BN_ACTIVATION_CODES[a] for a in BN_ACTIVATIONS}
    assert enums["BnMask"]["NONE"] == BN_MASK_CODES["", None]
    assert enums["BnMask"]["RELU6_FROM_Y"] == BN_MASK_CODES["y", "relu6"]
    assert enums["BnMask"]["SILU_FROM_X"] == BN_MASK_CODES["x", "silu"]
    assert enums["OptRule"] == {r.upper(): OPTIMIZER_RULE_CODES[r] for r in OPTIMIZER_RULES}
    assert enums["OneHotLoss"] == {k.upper(): ONEHOT_LOSS_CODES[k] for k in ONEHOT_LOSSES}
    assert enums["ConvEngine"] == {e.upper(): CONV_ENGINE_CODES[e] for e in CONV_ENGINES}
    assert enums["ExternParam"] == {p.upper(): EXTERN_PARAM_CODES[p] for p in EXTERN_PARAMS}
    # the image geometry table's columns by name (image.cu reads no column by position)
    assert enums["GeomCol"] == {name.upper(): k for k, name in enumerate(IMAGE_GEOM)}
    counts = dict(re.findall(r"constexpr int (\w+) = (\d+);", GEN.HEADER.read_text()))
    assert {k: int(v) for k, v in counts.items()} == {
        "kNumDT": len(DType), "kNumActKinds": len(ACTIVATIONS), "kNumBnActs": len(BN_ACTIVATIONS),
        "kNumBnMasks": len(BN_MASKS), "kNumOptRules": len(OPTIMIZER_RULES), "kNumOneHotLosses": len(ONEHOT_LOSSES),
        "kNumConvEngines": len(CONV_ENGINES), "kNumExternParams": len(EXTERN_PARAMS),
        "kNumGeomCols": len(IMAGE_GEOM), "kImageGeomRow": IMAGE_GEOM_COLS}


def test_the_image_kernels_read_the_geometry_by_column_name():
    text = (CSRC / "ops" / "image.cu").read_text()
    assert "geom_col(" in text and "kImageGeomRow" in text
    assert not re.search(r"\bgp\[\s*\d", text), "image.cu reads a geometry column by position"


def test_the_tables_are_dense_and_consistent():
    # the native ops check a code against its count, so every table numbers 0..n-1
    assert sorted(d.code for d in DType) == list(range(len(DType)))
    for codes in (ACTIVATION_CODES, BN_ACTIVATION_CODES, BN_MASK_CODES):
        assert sorted(codes.values()) == list(range(len(codes)))
    assert set(BN_ACTIVATIONS) - {None} <= set(ACTIVATIONS)
    for source, act in BN_MASKS:
        assert act in BN_ACTIVATIONS and (source == "") == (act is None) and source in ("", "x", "y")


def test_a_table_with_a_gap_or_a_repeated_name_is_refused():
    with pytest.raises(ValueError, match=r"codes \[0, 2\] must be 0..1"):
        GEN._table("E", "kNumE", "t", {"a": 0, "b": 2}, str.upper)
    with pytest.raises(ValueError, match="not distinct"):
        GEN._table("E", "kNumE", "t", {"a": 0, "A": 1}, str.upper)


def test_no_native_source_keeps_its_own_copy():
    generated = set(_enums(GEN.HEADER.read_text()))
    header = GEN.HEADER.resolve()
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".cu", ".cuh", ".cpp", ".hpp") or path.resolve() == header:
            continue
        text = path.read_text()
        for name in generated:
            assert not re.search(rf"\benum(\s+class)?\s+{name}\b", text), f"{path.name} declares {name} again"
        # the hand-kept tables this header replaced
        assert not re.search(r"\benum (Kind|Mask)\b|\bNUM_KINDS\b|\bMASK6?_FROM_[XY]\b|\bNO_MASK\b", text), path.name
