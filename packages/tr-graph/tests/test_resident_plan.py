"""A plan with a device-resident input (tr.graph.resident): the data sets in role RESIDENT, indices in the input
buffers, augment_affine at the head of the training and inference chains; inputs that cannot work refused."""

import pytest
from tr_graph_testlib import mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.memory import Region, Role
from tr.graph.blueprint import fc, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.resident import ResidentInput
from tr.graph.steps import Part as P

MODEL = seq(fc(32, True), relu(), fc(10, True))
CHAIN = (("crop_slot", 2), ("degrees", 20.0), ("pad", 2), ("rotation_slot", 3))
NORM = (("mean", (0.1307,)), ("std", (0.3081,)))


def resident(train=600, val=100, image=(28, 28, 1)) -> ResidentInput:
    return ResidentInput(train, val, image, CHAIN, NORM)


@pytest.mark.parametrize("amp", [False, True])
def test_the_plan_gathers_its_batches_from_the_resident_sets(amp):
    p = compile_program(MODEL, mlp_spec(input_shape=(28, 28, 1), batch=50, amp=amp, input=resident()))
    t = {x.name: x for x in p.tensors}
    assert t["train_set"].region == Region(Role.RESIDENT) and t["train_set"].dtype is DType.UINT8
    assert tuple(t["train_set"].shape.dims) == (600, 28, 28, 1) and tuple(t["val_set"].shape.dims) == (100, 28, 28, 1)
    assert t["data_a"].dtype is DType.INT32 and tuple(t["data_a"].shape.dims) == (50, 1, 1, 1)
    assert t["aug_x"].dtype is (DType.FP16 if amp else DType.FP32)
    fwd = part_calls(p, "train_a", P.FIRST_FWD_A)
    aug = next(c for c in fwd if c.op == "augment_affine")
    assert aug.args["src"].name == "train_set" and aug.args["index"].name == "data_a"
    assert aug.args["key"].name == "aug_key" and aug.args["y"].name == "aug_x"
    assert aug.attrs["degrees"] == 20.0 and aug.attrs["pad"] == 2
    first_layer = [c for c in fwd if c.op not in ("copy", "augment_affine")]
    assert all(c.args["x"].name == "aug_x" for c in first_layer[:1])
    inf = part_calls(p, "val_b", P.INFER_B)
    assert inf[0].op == "augment_affine" and inf[0].args["src"].name == "val_set"
    assert inf[0].args["index"].name == "data_b" and "degrees" not in inf[0].attrs
    assert p.layout.region_bytes(Region(Role.RESIDENT)) >= 700 * 784


def test_without_a_val_set_inference_reads_the_train_set():
    p = compile_program(MODEL, mlp_spec(input_shape=(28, 28, 1), batch=50, input=resident(val=0)))
    assert "val_set" not in {x.name for x in p.tensors}
    assert part_calls(p, "val_a", P.INFER_A)[0].args["src"].name == "train_set"


def test_a_host_fed_plan_has_no_resident_region():
    p = compile_program(MODEL, mlp_spec(input_shape=(28, 28, 1), batch=50))
    assert p.layout.region_bytes(Region(Role.RESIDENT)) == 0
    assert not any(r.role is Role.RESIDENT for r in p.layout.regions)
    assert not any(c.op == "augment_affine" for c in part_calls(p, "train_a", P.FIRST_FWD_A))
    assert "val_transfer_a" not in p.steps and p.step("epoch_order").calls == p.step("val_begin").calls == ()


@pytest.mark.parametrize("val", [100, 0])
def test_the_resident_steps_choose_their_batches_on_the_device(val):
    p = compile_program(MODEL, mlp_spec(input_shape=(28, 28, 1), batch=50, input=resident(val=val)))
    labels = "val_labels" if val else "train_labels"  # without a val set, validation reads the train set
    for ab in "ab":
        (train,) = p.step(f"transfer_{ab}").calls
        assert (train.op, train.part, train.attrs["pad"]) == ("batch_select", f"transfer_{ab}", True)
        assert train.args["order"].name == "train_order" and train.args["index"].name == f"data_{ab}"
        (sel,) = p.step(f"val_transfer_{ab}").calls
        assert (sel.op, sel.part, sel.attrs["pad"]) == ("batch_select", f"input_val_{ab}", False)
        assert sel.args["order"] is None and sel.args["labels_all"].name == labels
        assert sel.args["index"].name == f"data_{ab}" and sel.args["pos"].name == "val_pos"
    (order,) = p.step("epoch_order").calls
    assert (order.op, order.part, order.args["order"].name) == ("shuffle_order", "input_train_begin", "train_order")
    (restart,) = p.step("val_begin").calls
    assert (restart.op, restart.part, restart.args["pos"].name) == ("batch_restart", "input_val_begin", "val_pos")


@pytest.mark.parametrize("kw, match", [
    (dict(input=resident(image=(27, 28, 1))), "do not give the plan's input"),
    (dict(input=resident(image=(28, 28, 3))), "do not give the plan's input"),
    (dict(input=resident(train=0)), "train_samples must be an integer >= 1"),
    (dict(input=resident(val=-1)), "val_samples must be an integer >= 0"),
    (dict(input=resident(), train_resolution=24), "leave the train and val resolutions unset"),
    (dict(input="mnist"), "input must be an input plan"),
])
def test_inputs_that_cannot_work_are_refused(kw, match):
    with pytest.raises(ConfigError, match=match):
        mlp_spec(input_shape=(28, 28, 1), batch=50, **kw)
