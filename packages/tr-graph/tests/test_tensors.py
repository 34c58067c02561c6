import pytest

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, dtype_group
from tr.core.shape import Shape
from tr.graph.layers.base import FEATURE, PARAM, TRAIN
from tr.graph.layers.groups import FC_B, FC_W
from tr.graph.tensors import TensorTable
from tr.tensor.dtensor import slot_bytes_for
from tr.tensor.program import VariantInfo

F16, F32 = Region(Role.ACTIVATION, dtype_group(DType.FP16)), Region(Role.ACTIVATION, dtype_group(DType.FP32))
W_FC_W, W_FC_B = Region(Role.PARAM, FC_W), Region(Role.PARAM, FC_B)
VARIANTS = {"train": VariantInfo("train", 8, 4, True), "val": VariantInfo("val", 32, 4, False)}


def test_slot_is_the_max_over_the_variants_that_use_it():
    t = TensorTable(VARIANTS)
    for v, n in (("train", 8), ("val", 32)):
        t.add("f", v, Shape(n, 4, 4, 3), F16, DType.FP16, pad_c=8, cls=FEATURE, phase=TRAIN)
    (info,) = t.finish({"f"})
    # a training tensor ignores the (bigger) validation shape
    assert info.slot == slot_bytes_for(Shape(8, 4, 4, 3), DType.FP16, 8) and info.canonical == Shape(8, 4, 4, 3)


def test_unused_pooled_tensors_are_dropped_and_params_must_not_change():
    t = TensorTable(VARIANTS)
    t.add("g", "train", Shape(8, 1, 1, 3), F32, DType.FP32, cls=FEATURE, phase=TRAIN)
    assert t.finish(set()) == []
    t.add("w", "train", Shape(3, 1, 1, 5), W_FC_W, DType.FP32, cls=PARAM, phase="any", layer=4)
    t.add("w", "val", Shape(3, 1, 1, 7), W_FC_W, DType.FP32, cls=PARAM, phase="any", layer=4)
    with pytest.raises(CompileError, match=r"layer 4: w would change shape between variants"):
        t.finish(set())
    with pytest.raises(CompileError, match="declared differently"):
        t.add("w", "val", Shape(3, 1, 1, 5), W_FC_B, DType.FP32, cls=PARAM, phase="any")
