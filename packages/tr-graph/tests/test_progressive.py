"""Progressive resizing in the plan: one training variant and step per side, one arena sized for the largest,
transfers that read the smaller sides packed, and the sides checked against the network's total stride."""

import pytest

from tr.core.errors import CompileError, ConfigError
from tr.core.shape import Shape
from tr.graph.blueprint import bn, conv, fc, flatten, gap, maxpool, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.spec import CompileSpec


def _first_conv(p, step: str):
    return next(c for c in p.step(step).calls if c.op == "conv_fwd").args["x"]


CNN = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2), conv(16, 3, 1, 1), bn(), relu(), maxpool(2), gap(), fc(10))


def _spec(**kw) -> CompileSpec:
    base = dict(input_shape=(64, 64, 3), num_classes=10, batch=4, last_train_batch=3, train_resolution=64)
    return CompileSpec(**{**base, **kw})


def test_one_training_variant_and_step_per_side():
    p = compile_program(CNN, _spec(progressive_resolutions=(32, 48)))
    v = p.variants
    assert list(v) == ["train", "train_last", "train@32", "train_last@32", "train@48", "train_last@48", "val",
                       "val_last"]
    assert [(v[n].batch, v[n].resolution) for n in ("train@32", "train_last@32", "train", "val")] == [
        (4, 32), (3, 32), (4, 64), (4, 64)]  # validation at the final side
    for side in (32, 48):
        for ab in "ab":
            assert _first_conv(p, f"train_{ab}@{side}").shape == Shape(4, side, side, 3)
            assert _first_conv(p, f"train_last_{ab}@{side}").shape == Shape(3, side, side, 3)
            (copy,) = p.step(f"transfer_{ab}@{side}").calls
            assert copy.attrs == {"buffer": "ab".index(ab), "packed": True}
            assert copy.args["data"].shape == Shape(4, side, side, 3)
    (copy,) = p.step("transfer_a").calls  # the final side's: the buffer's own shape
    assert copy.attrs == {"buffer": 0} and copy.args["data"].shape == Shape(4, 64, 64, 3)
    # one arena: every side's tensors in the final side's slots (the same offsets, at most its bytes)
    assert p.layout.total_bytes == compile_program(CNN, _spec()).layout.total_bytes
    a, b = _first_conv(p, "train_a@32"), _first_conv(p, "train_a")
    assert (a.offset, a.region) == (b.offset, b.region) and a.nbytes < b.nbytes


def test_frozen_and_side_steps_combine():
    p = compile_program(CNN, _spec(progressive_resolutions=(32,), freeze_first_layer=True))
    assert {"train_a_frozen@32", "train_last_b_frozen@32", "train_a_frozen", "train_a@32"} <= set(p.steps)


def test_a_side_off_the_networks_total_stride_is_refused_naming_it():
    strided = seq(conv(8, 3, 2, 1), bn(), relu(), maxpool(2), conv(16, 3, 2, 1), relu(), gap(), fc(10))
    with pytest.raises(ConfigError, match=r"training side 20 is not a multiple of 8, the network's total stride: "
                                          r"layer \d+ \(.*\) takes the 64x64 input down by 8"):
        compile_program(strided, _spec(progressive_resolutions=(20,)))
    compile_program(strided, _spec(progressive_resolutions=(24, 40)))  # multiples of 8: fine
    with pytest.raises(ConfigError, match="training side 36 is not a multiple of 8"):  # the stride-4 CNN takes 36
        compile_program(strided, _spec(progressive_resolutions=(36,)))
    compile_program(CNN, _spec(progressive_resolutions=(36,)))


def test_weights_that_depend_on_the_side_are_refused():
    with pytest.raises(CompileError, match=r"would change shape between variants .*train@32.*put gap\(\) before "
                                           r"the fc"):
        compile_program(seq(conv(4, 3, 1, 1), relu(), maxpool(2), flatten(), fc(10)),
                        _spec(progressive_resolutions=(32,)))


@pytest.mark.parametrize("kw, msg", [
    (dict(progressive_resolutions=(48, 32)), r"distinct lower training sides in ascending order"),
    (dict(progressive_resolutions=(32, 32)), r"distinct lower training sides"),
    (dict(progressive_resolutions=(64,)), r"each below the final side 64 \(the compiled maximum\)"),
    (dict(progressive_resolutions=(96,)), r"each below the final side 64"),
    (dict(progressive_resolutions=[32]), r"must be a tuple of sides"),
    (dict(progressive_resolutions=(0,)), r"progressive resolution must be an integer >= 1, got 0"),
])
def test_bad_progressive_sides_in_the_spec(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        _spec(**kw)
