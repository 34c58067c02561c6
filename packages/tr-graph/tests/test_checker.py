"""The reuse checker passes compiled plans and catches planted bad ones."""

import dataclasses

import pytest
from tr_graph_testlib import by_name, mlp_spec, relocate

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, dtype_group
from tr.core.ops import OpCall
from tr.core.shape import Shape
from tr.graph.blueprint import bn, conv, fc, gap, relu, seq
from tr.graph.checker import check_chain, check_program
from tr.graph.compiler import INPUT_REGIONS, compile_program
from tr.graph.steps import Part as P
from tr.tensor.dtensor import DTensor

F32 = Region(Role.ACTIVATION, dtype_group(DType.FP32))


@pytest.fixture(scope="module")
def vgg(models):
    return compile_program(models.vgg16_bn, mlp_spec(input_shape=(32, 32, 3), num_classes=1000, batch=4, amp=True,
                                                     last_train_batch=3, val_batch=6))


@pytest.fixture(scope="module")
def resnet(models):
    return compile_program(models.resnet50, mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=2,
                                                     val_resolution=96))


def test_compiled_plans_pass(models, vgg, resnet):
    mlp = compile_program(models.mlp_mnist, mlp_spec())
    # every step's calls: 4 training steps (zero grad, first layer 2, deep 10, reduce early, first backward 2, reduce
    # late, NaN check 2, metric sum, optimizer 4: lr_lookup, 2 range_optimizer, step count), 4 validation steps
    # (inference 5, metric sum), 2 transfers, the metrics' clear and all-reduce; no working copies to refresh, no
    # statistics to fold
    def run(p):  # the calls the checker replays: every step's, a call two steps run once per step
        return sum(len(s.calls) for s in p.steps.values())

    assert check_program(mlp) == run(mlp) == 4 * (1 + 2 + 10 + 1 + 2 + 1 + 2 + 1 + 4) + 4 * (5 + 1) + 2 + 1 + 1
    # the plan holds each call once: the deep part, optimizer etc. are shared by the a and b steps
    assert mlp.num_ops == 45 < run(mlp)
    assert check_program(vgg) == run(vgg) > 400 and vgg.num_ops < run(vgg)
    assert check_program(resnet) == run(resnet) > 1400
    # reuse is real: far fewer bytes than tensors
    pooled = [t for t in resnet.tensors if t.region == F32]
    assert len({t.offset for t in pooled}) < len(pooled) / 2.5


@pytest.fixture(scope="module")
def small():
    m = seq(conv(4, 3, p=1), bn(), relu(), conv(4, 3, p=1), bn(), relu(), gap(), fc(3))
    return compile_program(m, mlp_spec(input_shape=(6, 6, 2), num_classes=3, batch=2))


def test_catches_an_overwritten_backward_input(small):
    # L0.y (the first cbr's output) is the input of the conv in the cbr at layer 1, read again by its
    # conv_bwd; the GAP output written after it (and alive until the fc backward) is moved onto it
    t = by_name(small)
    bad = relocate(small, {t["L2.y"].id: t["L0.y"].offset})
    with pytest.raises(CompileError, match=r"conv_bwd @L1\): reads x=L0.y, but L2.y overwrote its bytes at op \d+ "
                                           r"\(deep_fwd_bwd: gap_fwd @L2\)"):
        check_program(bad)


def test_catches_overwritten_saved_statistics(small):
    t = by_name(small)
    bad = relocate(small, {t["L1.saved_inv_std"].id: t["L0.saved_mean"].offset})
    with pytest.raises(CompileError, match=r"reads saved_mean=L0.saved_mean, but L1.saved_inv_std overwrote"):
        check_program(bad)


def test_catches_an_overwritten_mask(vgg):
    t = by_name(vgg)
    masks = sorted((x for x in vgg.tensors if x.region == Region(Role.MASK)), key=lambda x: x.id)
    first, second = masks[0], masks[1]  # maxpool masks of stages 1 and 2
    bad = relocate(vgg, {second.id: first.offset})
    with pytest.raises(CompileError, match=rf"reads mask={first.name}, but {second.name} overwrote"):
        check_program(bad)
    assert t[first.name].dtype == DType.INT8


def test_catches_a_relu_output_needed_by_its_backward(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    t = by_name(p)
    # act_bwd of layer 1 reads L1.y (the relu output); put the next layer's output gradient there
    bad = relocate(p, {t["L3.dx"].id: t["L1.y"].offset})
    with pytest.raises(CompileError, match="L1.y"):
        check_program(bad)


def test_catches_forbidden_in_place(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    t = by_name(p)
    bad = relocate(p, {t["L3.dx"].id: t["L2.y"].offset})  # fc_bwd may not write dx over its x
    with pytest.raises(CompileError, match="share bytes but the op does not allow them in place"):
        check_program(bad)


def test_catches_uninitialised_read(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    step = p.step("train_last_b")
    (copy,) = [c for c in step.calls_of(P.FIRST_FWD_B.value) if c.op == "copy"]
    cut = dataclasses.replace(step, branches=tuple(
        dataclasses.replace(b, calls=tuple(c for c in b.calls if c is not copy)) for b in step.branches))
    # the label copy is gone from one step: the loss (after the zero grad and four fc layers) reads labels nothing wrote
    with pytest.raises(CompileError, match=r"^step train_last_b: op 5 \(deep_fwd_bwd: softmax_ce_fwd @L4\): reads "
                                           "labels=labels before anything wrote it"):
        check_program(dataclasses.replace(p, steps={**p.steps, "train_last_b": cut}))


def test_check_chain_on_hand_made_calls():
    def t(i, off, size=256):
        return DTensor(i, f"t{i}", F32, Shape(1, 1, 1, 8), DType.FP32, size, off)

    a, b, c = t(0, 0), t(1, 256), t(2, 0)
    fwd = OpCall.make("act_fwd", {"x": a, "y": b}, {"kind": "relu"}, layer=3, part=P.DEEP_FWD_BWD.value)
    ok = OpCall.make("act_bwd", {"x": b, "dy": b, "dx": c}, {"kind": "relu"})
    batch = DTensor(9, "in", INPUT_REGIONS["a_data"], Shape(1, 1, 1, 8), DType.FP32, 256, 4096)
    seed = OpCall.make("copy", {"x": batch, "y": a}, part=P.FIRST_FWD_A.value)
    check_chain([seed, fwd, ok], {})
    clobber = OpCall.make("copy", {"x": b, "y": c})  # c shares a's bytes; no part: shown as "-"
    with pytest.raises(CompileError, match=r"^here: op 3 \(deep_fwd_bwd: act_fwd @L3\): reads x=t0, but t2 overwrote "
                                           r"its bytes at op 2 \(-: copy\)$"):
        check_chain([seed, fwd, clobber, fwd], {0: "t0", 2: "t2"}, "here: ")
