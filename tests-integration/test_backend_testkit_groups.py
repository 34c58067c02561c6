"""The backend tests build arenas without tr.graph (tr-backend may not import it), so
packages/tr-backend/tests/backend_testkit.py restates the memory groups tr.graph declares: they must stay the same
groups, or the CUDA tests (which run only on a GPU) would lay out memory no compiled plan has."""

import importlib.util
from pathlib import Path

from tr.graph import compiler
from tr.graph.layers import groups

KIT = Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests" / "backend_testkit.py"


def test_the_backend_testkit_groups_are_tr_graphs():
    spec = importlib.util.spec_from_file_location("backend_testkit_copy", KIT)
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)
    for name in ("FC_W", "FC_B", "FIRST_CONV", "DEEP_CONV", "BN_W", "BN_B", "MEAN", "VAR", "FOLDED_BIAS",
                 "FOLDED_SCALE"):
        assert getattr(kit, name) == getattr(groups, name), name
    inputs = {name: r.group for name, r in compiler.INPUT_REGIONS.items()}
    assert (kit.A_LABEL, kit.A_DATA, kit.B_LABEL, kit.B_DATA) == (
        inputs["a_label"], inputs["a_data"], inputs["b_label"], inputs["b_data"])
    assert (kit.SCALAR_FP32, kit.SCALAR_INT32) == (compiler.FP32_SCALAR, compiler.INT32_SCALAR)
    assert kit.TEMP_FP32 == compiler.FP32_TEMP
