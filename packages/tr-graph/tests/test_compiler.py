"""compile_program end to end: named roles, inits, AMP placement, variants, determinism, errors."""

import math

import pytest
from tr_graph_testlib import by_name, compile_bound, mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, Span, dtype_group
from tr.core.shape import Shape
from tr.graph import memory_plan
from tr.graph.atlas import lookup
from tr.graph.blueprint import (
    add2,
    avgpool,
    block,
    bn,
    cbr,
    conv,
    dropout,
    fc,
    flatten,
    gap,
    identity,
    maxpool,
    relu,
    repeat,
    seq,
)
from tr.graph.compiler import INPUT_REGIONS, compile_program, compile_with_plan
from tr.graph.layers.groups import DEEP_CONV, FC_B, FC_W, FIRST_CONV
from tr.graph.seed_scheme import seed_arena_bytes
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part as P
from tr.tensor.program import SHAPE_INVARIANT, Program

N1 = Shape(128, 1, 1, 1)
F32, F16 = Region(Role.ACTIVATION, dtype_group(DType.FP32)), Region(Role.ACTIVATION, dtype_group(DType.FP16))
S_INT32, S_FP32 = Region(Role.SCALAR, dtype_group(DType.INT32)), Region(Role.SCALAR, dtype_group(DType.FP32))
T_INT32, T_FP32 = Region(Role.TEMP, dtype_group(DType.INT32)), Region(Role.TEMP, dtype_group(DType.FP32))
I = INPUT_REGIONS
ROLES = {  # role: (region, dtype, shape or None)
    "labels_a": (I["a_label"], DType.INT32, N1), "data_a": (I["a_data"], DType.FP32, Shape(128, 28, 28, 1)),
    "labels_b": (I["b_label"], DType.INT32, N1), "data_b": (I["b_data"], DType.FP32, Shape(128, 28, 28, 1)),
    "labels": (T_INT32, DType.INT32, N1), "nan_flag": (S_INT32, DType.INT32, None),
    "step": (S_INT32, DType.INT32, None), "lr": (S_FP32, DType.FP32, Shape(1, 1, 1, 1)),
    "loss_scale": (S_FP32, DType.FP32, Shape(1, 1, 1, 1)),
    "result": (Region(Role.RESULT), DType.FP32, Shape(1, 1, 1, 3)),
    "accum": (Region(Role.RESULT_SUM), DType.FP32, Shape(1, 1, 1, 3)),
    "batch_train": (S_FP32, DType.FP32, None), "batch_train_last": (S_FP32, DType.FP32, None),
    "batch_val": (S_FP32, DType.FP32, None), "batch_val_last": (S_FP32, DType.FP32, None),
    "dropout_seed": (S_INT32, DType.INT32, Shape(1, 1, 1, 2)), "lr_table": (S_FP32, DType.FP32, None),
    "logits": (F32, DType.FP32, Shape(128, 1, 1, 10)),
    "probs": (T_FP32, DType.FP32, Shape(128, 1, 1, 10)), "pred": (Region(Role.PREDICTED), DType.INT32, N1),
}


def test_named_roles(models):
    p = compile_program(models.mlp_mnist, mlp_spec(lr_table_steps=50))
    assert set(ROLES) <= set(p.named)
    for role, (region, dtype, shape) in ROLES.items():
        t = p.tensor(role)
        assert (t.region, t.dtype) == (region, dtype), role
        assert shape is None or t.shape == shape, role
    assert p.tensor("lr_table").shape == Shape(1, 1, 1, 50)
    # the default: a one-entry table (a constant rate); there is no plan without one (the host never writes lr)
    assert compile_program(models.mlp_mnist, mlp_spec()).tensor("lr_table").shape == Shape(1, 1, 1, 1)
    amp = compile_program(models.mlp_mnist, mlp_spec(amp=True))
    assert amp.tensor("data_a").dtype == DType.FP16 and amp.tensor("data_a").pad_c == 4
    assert amp.tensor("logits").region == F16 and amp.tensor("probs").dtype == DType.FP32


def test_inits(models):
    p = compile_program(seq(conv(8, 3, p=1), bn(eps=1e-3), relu(), gap(), fc(5)),
                        mlp_spec(input_shape=(6, 6, 3), num_classes=5, amp=True))
    inits = {i.tensor.name: i for i in p.inits}
    w = inits["L0.w"]
    assert (w.kind, w.fan_in, w.fan_out, w.tensor.shape) == ("weight", 27, 72, Shape(8, 3, 3, 3))  # KRSC
    assert w.tensor.region == Region(Role.PARAM, FIRST_CONV) and w.tensor.dtype == DType.FP32
    assert w.family == "conv"
    f = inits["L2.w"]  # cbr, gap, fc
    assert (f.kind, f.fan_in, f.fan_out, f.tensor.shape, f.layer) == ("weight", 8, 5, Shape(5, 1, 1, 8), 2)
    assert (inits["L2.b"].kind, inits["L2.b"].fan_in) == ("bias", 8)
    assert f.family == "fc" and {i.family for n, i in inits.items() if i.kind != "weight"} == {""}
    assert [inits[f"L0.{n}"].kind for n in ("gamma", "beta", "prev_mean", "prev_var", "next_mean", "next_var")] == [
        "ones", "zeros", "zeros", "ones", "zeros", "ones"]
    assert inits["L0.eq_scale"].kind == "const" and math.isclose(inits["L0.eq_scale"].value, 1 / math.sqrt(1.001))
    assert inits["loss_scale"].value == 65536.0 and inits["batch_train"].value == 128.0
    assert not any(n.endswith((".grad", ".grad16", ".fp16", ".m")) for n in inits)


def test_amp_placement():
    p = compile_program(seq(cbr(16, 3, p=1), conv(16, 3, p=1), bn(), gap(), fc(4)),
                        mlp_spec(input_shape=(8, 8, 3), num_classes=4, amp=True))
    t = by_name(p)
    assert t["L0.w"].region == Region(Role.PARAM, FIRST_CONV)
    assert t["L0.w.fp16"].region == Region(Role.AMP_COPY, FIRST_CONV)
    assert t["L1.w"].region == Region(Role.PARAM, DEEP_CONV)
    assert t["L1.w.grad16"].region == Region(Role.GRAD_FP16, DEEP_CONV)
    assert all(x.dtype == DType.FP16 for x in p.tensors if x.region in (F16,))
    assert not any(x.region == F32 for x in p.tensors)
    first = part_calls(p, "train_a", P.FIRST_FWD_A)
    assert [c.op for c in first] == ["copy", "conv_fwd", "bn_fwd"]  # the CBR is the first layer, its relu in bn_fwd
    assert first[2].attrs["activation"] == "relu"
    assert first[1].args["w"].name == "L0.w.fp16" and first[1].args["x"].name == "data_a"
    bwd = part_calls(p, "train_a", P.FIRST_BWD_A)
    assert [c.op for c in bwd] == ["bn_bwd", "conv_bwd"] and bwd[-1].args["dx"] is None
    # the relu mask is recomputed from the conv output: the layer's output is not read by its backward
    assert bwd[0].args["y"] is None and bwd[0].args["beta"].name == "L0.beta" and bwd[0].args["x"].name == "L0.conv_y"
    assert bwd[-1].args["dw"].region == Region(Role.GRAD_FP16, FIRST_CONV)
    # the FC's weight gradient is FP32 from its GEMM: only the first conv's FP16 gradient is cast
    assert t["L4.w.grad"].region == Region(Role.GRAD, FC_W) and "L4.w.grad16" not in t
    assert t["L4.b.fp16"].region == Region(Role.AMP_COPY, FC_B) and t["L4.b.fp16"].dtype == DType.FP16
    for part, group, early in ((P.CAST_EARLY, DEEP_CONV, True), (P.CAST_LATE, FIRST_CONV, False)):
        (c,) = part_calls(p, "train_a", part)
        assert c.args["src"] == Span.of(Role.GRAD_FP16, early=early)
        assert c.args["dst"] == Span.of(Role.GRAD, fp16_grad=True, early=early)
        # each covers exactly its group's region
        assert p.layout.span(c.args["src"]) == p.layout.regions[Region(Role.GRAD_FP16, group)]
        assert p.layout.span(c.args["dst"]) == p.layout.regions[Region(Role.GRAD, group)]
        assert (c.attrs["src_dtype"], c.attrs["dst_dtype"]) == (DType.FP16, DType.FP32)


def test_only_regions_holding_tensors_exist(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    assert [r.name for r in p.layout.regions] == [
        "param/fc_b", "param/fc_w", "grad/fc_b", "grad/fc_w", "result", "moment1/fc_b", "moment1/fc_w",
        "input/a_label", "input/a_data", "input/b_label", "input/b_data", "activation/fp32", "scalar/fp32",
        "scalar/int32", "temp/fp32", "temp/int32", "predicted", "result_sum"]
    assert list(p.layout.regions) == sorted({t.region for t in p.tensors})
    for r in (Region(Role.AMP_COPY, FC_W), Region(Role.GRAD_FP16, FC_W), F16, Region(Role.EMA, FC_W),
              Region(Role.SCALAR, dtype_group(DType.FP16))):
        assert p.layout.region_bytes(r) == 0 and r not in p.layout.regions
    assert all(b > a for a, b in p.layout.regions.values())
    assert p.layout.total_bytes == sum(p.layout.region_bytes(r) for r in p.layout.regions)
    assert all(t.offset % 256 == 0 and t.slot_bytes % 256 == 0 for t in p.tensors)


def test_same_blueprint_same_offsets(models):
    spec = mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=8, amp=True)
    a, b = compile_program(models.resnet50, spec), compile_program(models.resnet50, spec)
    key = lambda p: [(t.name, t.offset, t.slot_bytes) for t in p.tensors]  # noqa: E731
    assert key(a) == key(b)
    assert a.layout == b.layout and a.steps == b.steps


def test_variants_share_offsets_and_take_max_slots():
    m = seq(conv(8, 3, p=1), bn(), relu(), maxpool(2), gap(), fc(4))
    p, bound = compile_bound(m, CompileSpec((16, 16, 3), 4, 32, last_train_batch=5, val_batch=64, last_val_batch=3,
                                            train_resolution=16, val_resolution=24))
    assert list(p.variants) == ["train", "train_last", "val", "val_last"]
    assert {v for v, _ in bound} == {SHAPE_INVARIANT, *p.variants}  # nothing bound for a variant no step runs
    data = {v: next(c for c in lookup(bound, v, P.FIRST_FWD_A if p.variants[v].train else P.INFER_A)
                    if c.op == "conv_fwd").args["x"] for v in p.variants}
    assert {v: d.shape for v, d in data.items()} == {
        "train": Shape(32, 16, 16, 3), "train_last": Shape(5, 16, 16, 3), "val": Shape(64, 24, 24, 3),
        "val_last": Shape(3, 24, 24, 3)}
    assert len({(d.offset, d.slot_bytes, d.id) for d in data.values()}) == 1
    assert data["train"].slot_bytes >= data["val"].nbytes  # the largest variant fits
    assert p.tensor("data_a").shape == Shape(64, 24, 24, 3)  # canonical shape: the largest
    # every training tensor of every train variant fits its slot
    for v in ("train", "train_last"):
        for c in lookup(bound, v, P.DEEP_FWD_BWD):
            for t in c.args.values():
                if hasattr(t, "nbytes"):
                    assert t.nbytes <= t.slot_bytes
    assert {c.args["batch"].name for v in p.variants for c in lookup(bound, v, P.ACCUM_METRICS)} == {
        "batch_train", "batch_train_last", "batch_val", "batch_val_last"}
    # the steps run each variant's bindings
    for step, variant, part in (("train_a", "train", P.DEEP_FWD_BWD), ("train_last_b", "train_last", P.DEEP_FWD_BWD),
                                ("val_b", "val", P.INFER_B), ("val_last_a", "val_last", P.INFER_A)):
        assert part_calls(p, step, part) == lookup(bound, variant, part) != ()
    assert p.meta["ops_checked"] > 0


def test_weights_must_not_depend_on_resolution(models):
    with pytest.raises(CompileError, match=r"layer 13: L13.w would change shape between variants "
                                           r"\(train: \[4096,1,1,25088\], .*val: \[4096,1,1,32768\]"):
        compile_program(models.vgg16_bn, CompileSpec((224, 224, 3), 1000, 8, val_resolution=256, amp=True))


def test_meta(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    m = p.meta
    assert m["arena_bytes"] == p.layout.total_bytes
    assert m["num_layers"] == 5 and m["num_params"] == 1_462_538 and m["num_tensors"] == len(p.tensors)
    assert m["pooled_lower_bound"] <= m["pooled_bytes"] < m["no_reuse_bytes"] - m["arena_bytes"] + m["pooled_bytes"]
    c = compile_with_plan(models.mlp_mnist, mlp_spec())
    assert m["arena_bytes"] < seed_arena_bytes(c.arch, mlp_spec(), c.program)


class _NoAlloc(Exception):
    pass


BAD = [
    (seq(conv(8, 3), add2(identity(), seq(conv(16, 3, p=1), bn()))), (8, 8, 3),
     r"layer 3 \(add at model\[1\]\): add2 channel mismatch: the shortcut gives 8 channels but the stem gives 16"),
    (seq(conv(8, 3), maxpool(3, 2), conv(8, 5)), (6, 6, 3),
     r"layer 2 \(conv 8 k5 s1 p0 at model\[2\]\): conv kernel 5x5 is larger than its input 1x1"),
    (seq(conv(8, 9), relu()), (6, 6, 3), r"layer 0 .*conv kernel 9x9 is larger than its input 6x6"),
    (seq(conv(4, 3), avgpool(5)), (6, 6, 3), r"layer 1 \(avgpool k5 s5 p0 .*\): avgpool kernel 5x5 is larger"),
    (seq(conv(8, 3), flatten(), fc(8), conv(8, 1)), (6, 6, 3), r"layer 3 \(conv 8 k1 s1 p0 at model\[3\]\): conv after "
                                                              r"flatten \(layer 1\)"),
    (seq(fc(8), seq(), fc(2)), (1, 1, 4), r"layer 1 \(seq at model\[1\]\): empty seq"),
    (seq(), (1, 1, 4), r"layer 0 \(seq at model\): empty seq"),
    (seq(fc(8), fc(0)), (1, 1, 4), r"layer 1 \(fc 0 at model\[1\]\): fc out must be >= 1, got 0"),
    (seq(conv(-8, 3), fc(2)), (4, 4, 1), r"layer 0 .*conv out channels must be >= 1, got -8"),
    (seq(conv(8, 3, s=0), fc(2)), (4, 4, 1), r"layer 0 .*conv stride must be >= 1, got 0"),
    (seq(conv(8, 0), fc(2)), (4, 4, 1), r"layer 0 .*conv kernel must be >= 1, got 0"),
    (seq(fc(8), repeat(relu(), 0), fc(2)), (1, 1, 4), r"layer 1 \(repeat at model\[1\]\): times must be >= 1"),
    (seq(fc(8), dropout(1.0), fc(2)), (1, 1, 4),
     r"layer 1 \(dropout 1.0 at model\[1\]\): dropout p must be in \[0, 1\)"),
    (seq(fc(8), dropout(-0.5), fc(2)), (1, 1, 4), r"layer 1 .*dropout p must be in \[0, 1\), got -0.5"),
    (seq(fc(8), fc(3)), (1, 1, 4), r"layer 2 \(softmax_ce 2 at loss\): the loss needs logits \[N,1,1,2\]"),
    (seq(conv(8, 3)), (6, 6, 3), r"the loss needs logits .*the last layer gives \[N,4,4,8\]"),
    (seq(relu(), fc(2)), (1, 1, 4), r"layer 0 \(relu at model\[0\]\): the first layer reads the input batch"),
    (seq(flatten(), relu()), (2, 1, 1), "no trained parameters"),
    (seq(block("basic", 8), fc(2)), (4, 4, 8), r"reads the network input"),
]


@pytest.mark.parametrize("model, hwc, msg", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_models_raise_before_allocation(model, hwc, msg, monkeypatch):
    def refuse(*a, **k):
        raise _NoAlloc

    monkeypatch.setattr(memory_plan.MemoryPlan, "alloc", refuse)
    with pytest.raises(CompileError, match=msg):
        compile_program(model, CompileSpec(hwc, 2, 4))


def test_compile_with_plan_returns_the_arch(models):
    c = compile_with_plan(models.vgg16_bn, mlp_spec(input_shape=(32, 32, 3), num_classes=1000, batch=2, amp=True))
    assert isinstance(c.program, Program) and c.seconds > 0
    assert [L.kind for L in c.arch.layers].count("cbr") == 13 and c.arch.layers[0].first
    # the classifier reads 1x1x512 under AMP (C % 8 == 0): no flatten, the fc reads [N,H,W,C] directly
    assert "flatten" not in [L.kind for L in c.arch.layers]


def test_spec_bn_override(models):
    p = compile_program(seq(conv(4, 3), bn(momentum=0.2), relu(), gap(), fc(2)),
                        CompileSpec((5, 5, 1), 2, 2, bn_momentum=0.01, bn_eps=1e-3))
    c = next(c for c in part_calls(p, "train_a", P.FIRST_FWD_A) if c.op == "bn_fwd")  # conv+bn+relu: a cbr
    assert c.attrs == {"momentum": 0.01, "eps": 1e-3, "activation": "relu"}
