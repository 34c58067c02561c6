"""The op lists per part (exact for the MLP), gradient flow through residuals, optimizers."""

from tr_graph_testlib import mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.memory import Region, Role, Span, dtype_group
from tr.graph.archplan import ArchPlan
from tr.graph.blueprint import add2, block, bn, cbr, conv, dropout, fc, flatten, gap, identity, maxpool, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.graph import need_grad
from tr.graph.layers.groups import FC_B, FC_W, FIRST_CONV, FOLDED_SCALE, MEAN, VAR
from tr.graph.steps import Part as P


def names(calls):
    """[(op, {arg: tensor name or span})] with None arguments dropped."""
    out = []
    for c in calls:
        args = {k: (v if isinstance(v, Span) else v.name) for k, v in c.args.items() if v is not None}
        out.append((c.op, args))
    return out


sp = Span.of
GRAD, PARAM, M1 = Role.GRAD, Role.PARAM, Role.MOMENT1


def test_mlp_graphs_exactly(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    g = lambda step, part: names(part_calls(p, step, part))  # noqa: E731
    fc = lambda i, x, act=True: ("fc_fwd", {"x": x, "w": f"L{i}.w", "b": f"L{i}.b", "y": f"L{i}.y"})  # noqa: E731
    assert g("transfer_a", P.TRANSFER_A) == [("h2d_copy", {"labels": "labels_a", "data": "data_a"})]
    assert g("transfer_b", P.TRANSFER_B) == [("h2d_copy", {"labels": "labels_b", "data": "data_b"})]
    assert g("train_a", P.FIRST_FWD_A) == [("copy", {"x": "labels_a", "y": "labels"}), fc(0, "data_a")]
    assert g("train_b", P.FIRST_FWD_B) == [("copy", {"x": "labels_b", "y": "labels"}), fc(0, "data_b")]
    assert g("train_a", P.DEEP_FWD_BWD) == [
        fc(1, "L0.y"), fc(2, "L1.y"), fc(3, "L2.y"),
        ("softmax_ce_fwd", {"logits": "L3.y", "labels": "labels", "probs": "probs", "result": "result"}),
        ("softmax_ce_bwd", {"probs": "probs", "labels": "labels", "scale": "loss_scale", "dlogits": "L4.dx"}),
        ("fc_bwd", {"x": "L2.y", "w": "L3.w", "dy": "L4.dx", "dw": "L3.w.grad", "db": "L3.b.grad", "dx": "L3.dx"}),
        ("act_bwd", {"x": "L2.y", "dy": "L3.dx", "dx": "L2.act_dx"}),
        ("fc_bwd", {"x": "L1.y", "w": "L2.w", "dy": "L2.act_dx", "dw": "L2.w.grad", "db": "L2.b.grad", "dx": "L2.dx"}),
        ("act_bwd", {"x": "L1.y", "dy": "L2.dx", "dx": "L1.act_dx"}),
        ("fc_bwd", {"x": "L0.y", "w": "L1.w", "dy": "L1.act_dx", "dw": "L1.w.grad", "db": "L1.b.grad", "dx": "L1.dx"}),
    ]
    assert g("train_a", P.FIRST_BWD_A) == [
        ("act_bwd", {"x": "L0.y", "dy": "L1.dx", "dx": "L0.act_dx"}),
        ("fc_bwd", {"x": "data_a", "w": "L0.w", "dy": "L0.act_dx", "dw": "L0.w.grad", "db": "L0.b.grad"}),
    ]
    assert g("train_a", P.ZERO_GRAD) == [("range_clear", {"span": sp(GRAD) + sp(Role.RESULT) + sp(Role.GRAD_FP16)})]
    assert g("train_a", P.REDUCE_LATE) == [("range_allreduce_mean", {"span": sp(GRAD, early=False)})]
    assert g("train_a", P.REDUCE_EARLY) == [("range_allreduce_mean", {"span": sp(GRAD, early=True) + sp(Role.RESULT)})]
    assert g("train_a", P.CHECK_FINITE) == [("range_check_finite", {"span": sp(GRAD), "flag": "nan_flag"}),
                                            ("count_flag", {"flag": "nan_flag", "count": "skipped"})]
    common = {"lr": "lr", "flag": "nan_flag", "grad_scale": "loss_scale"}
    assert g("train_a", P.OPTIMIZER) == [
        ("lr_lookup", {"table": "lr_table", "step": "step", "lr": "lr"}),  # the rate of this step, on the device
        ("range_optimizer", {"w": sp(PARAM, decayed=True), "g": sp(GRAD, decayed=True),
                             "m": sp(M1, decayed=True), **common}),
        ("range_optimizer", {"w": sp(PARAM, decayed=False), "g": sp(GRAD, decayed=False),
                             "m": sp(M1, decayed=False), **common}),
        ("scalar_increment", {"x": "step"}),
    ]
    opt = part_calls(p, "train_a", P.OPTIMIZER)
    assert opt[1].attrs["rule"] == opt[2].attrs["rule"] == "momentum"
    assert opt[2].attrs["weight_decay"] == 0.0
    assert names(part_calls(p, "val_a", P.INFER_A)) == [
        ("fc_fwd", {"x": "data_a", "w": "L0.w", "b": "L0.b", "y": "L0.y@inf"}),
        ("fc_fwd", {"x": "L0.y@inf", "w": "L1.w", "b": "L1.b", "y": "L1.y@inf"}),
        ("fc_fwd", {"x": "L1.y@inf", "w": "L2.w", "b": "L2.b", "y": "L2.y@inf"}),
        ("fc_fwd", {"x": "L2.y@inf", "w": "L3.w", "b": "L3.b", "y": "L3.y@inf"}),
        ("softmax_ce_inf", {"logits": "L3.y@inf", "labels": "labels_a", "result": "result", "pred": "pred"}),
    ]
    assert [c.attrs["activation"] for c in part_calls(p, "val_b", P.INFER_B)[:4]] == ["relu", "relu", "relu", None]
    assert g("train_a", P.ACCUM_METRICS) == [("accum_metrics", {"result": "result", "accum": "accum",
                                                                "batch": "batch_train", "flag": "nan_flag",
                                                                "samples": "accum_samples"})]
    assert names(part_calls(p, "val_a", P.ACCUM_METRICS)) == [("accum_metrics", {"result": "result", "accum": "accum",
                                                                                 "batch": "batch_val"})]  # no skip flag
    assert g("train_last_a", P.ACCUM_METRICS_TRAIN_LAST)[0][1]["batch"] == "batch_train_last"
    assert g("val_last_a", P.ACCUM_METRICS_VAL_LAST)[0][1]["batch"] == "batch_val_last"
    assert g("clear_metrics", P.CLEAR_METRICS) == [("range_clear", {"span": sp(Role.RESULT_SUM)})]
    assert g("val_end", P.REDUCE_RESULT_SUM) == [("range_allreduce_mean", {"span": sp(Role.RESULT_SUM)})]
    # nothing for AMP casts, BN statistics, EMA or LARS in an FP32 MLP with momentum SGD
    absent = {x.value for x in (P.CAST_EARLY, P.CAST_LATE, P.CAST_WORKING, P.REDUCE_RUNNING, P.UPDATE_RUNNING,
                                P.FOLD_RUNNING, P.EMA_UPDATE, P.PREPARE_EMA, P.INFER_EMA_A, P.INFER_EMA_B)}
    assert not any(c.part in absent for step in p.steps.values() for c in step.calls)
    assert p.step("epoch_begin").calls == p.step("epoch_end").calls == ()
    assert [c.op for c in part_calls(p, "train_a", P.OPTIMIZER)] == ["lr_lookup", "range_optimizer", "range_optimizer",
                                                                     "scalar_increment"]  # no LARS update


def test_mlp_amp(models):
    p = compile_program(models.mlp_mnist, mlp_spec(amp=True))
    flf = names(part_calls(p, "train_a", P.FIRST_FWD_A))
    assert flf[1] == ("flatten_fwd", {"x": "data_a", "y": "L0.y"})  # data padded to 4 channels: FC needs dense rows
    assert part_calls(p, "train_a", P.FIRST_BWD_A) == ()  # a flatten has nothing to learn and no input gradient
    deep = part_calls(p, "train_a", P.DEEP_FWD_BWD)
    assert deep[0].op == "fc_fwd" and deep[0].args["w"].name == "L1.w.fp16"
    assert deep[0].args["w"].region == Region(Role.AMP_COPY, FC_W)
    last_bwd = deep[-1]
    assert deep[0].args["b"].name == "L1.b.fp16"
    assert deep[0].args["b"].region == Region(Role.AMP_COPY, FC_B)  # the epilogue's
    # the FC GEMMs write FP32 weight gradients (the bias gradient fused in its type): nothing to cast
    assert last_bwd.op == "fc_bwd" and last_bwd.args["dx"] is None and last_bwd.args["dw"].region == Region(GRAD, FC_W)
    assert last_bwd.args["dw"].dtype == DType.FP32 and last_bwd.args["db"].region == Region(GRAD, FC_B)
    assert last_bwd.args["dy"].dtype == DType.FP16
    assert part_calls(p, "train_a", P.CAST_LATE) == ()
    assert p.layout.region_bytes(Region(Role.GRAD_FP16, FC_W)) == 0
    assert part_calls(p, "train_a", P.CAST_EARLY) == ()  # no conv
    assert names(part_calls(p, "train_a", P.CAST_WORKING)) == [
        ("range_cast", {"src": sp(PARAM, amp_copy=True), "dst": sp(Role.AMP_COPY)})]
    assert [c.op for c in part_calls(p, "train_a", P.LOSS_SCALE)] == ["loss_scale_update"]
    assert [c.op for c in part_calls(p, "train_a", P.CHECK_FINITE)] == ["range_check_finite", "count_flag"]


def test_mlp_graphs_with_the_drelu_fusion(models, monkeypatch):
    """TR_FC_DRELU=1 (passes.fuse_drelu): each fc(relu) read only by an fc writes its relu mask, and that fc's
    dx GEMM applies the relu's backward; no act_bwd op is left."""
    monkeypatch.setenv("TR_FC_DRELU", "1")
    p = compile_program(models.mlp_mnist, mlp_spec())
    g = lambda step, part: names(part_calls(p, step, part))  # noqa: E731
    def fc(i, x, last=False):  # each fc(relu) writes its relu mask for the next fc's dx GEMM (fuse_drelu)
        return ("fc_fwd", {"x": x, "w": f"L{i}.w", "b": f"L{i}.b", "y": f"L{i}.y",
                           **({} if last else {"mask": f"L{i}.relu_mask"})})

    assert g("transfer_a", P.TRANSFER_A) == [("h2d_copy", {"labels": "labels_a", "data": "data_a"})]
    assert g("transfer_b", P.TRANSFER_B) == [("h2d_copy", {"labels": "labels_b", "data": "data_b"})]
    assert g("train_a", P.FIRST_FWD_A) == [("copy", {"x": "labels_a", "y": "labels"}), fc(0, "data_a")]
    assert g("train_b", P.FIRST_FWD_B) == [("copy", {"x": "labels_b", "y": "labels"}), fc(0, "data_b")]
    assert g("train_a", P.DEEP_FWD_BWD) == [
        fc(1, "L0.y"), fc(2, "L1.y"), fc(3, "L2.y", last=True),
        ("softmax_ce_fwd", {"logits": "L3.y", "labels": "labels", "probs": "probs", "result": "result"}),
        ("softmax_ce_bwd", {"probs": "probs", "labels": "labels", "scale": "loss_scale", "dlogits": "L4.dx"}),
        ("fc_bwd", {"x": "L2.y", "w": "L3.w", "dy": "L4.dx", "dw": "L3.w.grad", "db": "L3.b.grad", "dx": "L3.dx",
                    "mask": "L2.relu_mask"}),
        ("fc_bwd", {"x": "L1.y", "w": "L2.w", "dy": "L3.dx", "dw": "L2.w.grad", "db": "L2.b.grad", "dx": "L2.dx",
                    "mask": "L1.relu_mask"}),
        ("fc_bwd", {"x": "L0.y", "w": "L1.w", "dy": "L2.dx", "dw": "L1.w.grad", "db": "L1.b.grad", "dx": "L1.dx",
                    "mask": "L0.relu_mask"}),
    ]
    assert g("train_a", P.FIRST_BWD_A) == [
        ("fc_bwd", {"x": "data_a", "w": "L0.w", "dy": "L1.dx", "dw": "L0.w.grad", "db": "L0.b.grad"}),
    ]


def test_input_gradients_only_where_needed():
    plan = ArchPlan.from_blueprint(seq(flatten(), relu(), fc(4), relu(), fc(3)), (2, 2, 3), 3)
    # relu reads the flattened input, which no trained layer produces: no gradient through it
    assert [L.kind for L in plan.layers] == ["flatten", "act", "fc", "fc", "softmax_ce"]
    assert need_grad(plan) == [False, False, True, True, True]
    p = compile_program(seq(flatten(), relu(), fc(4), relu(), fc(3)), mlp_spec(input_shape=(2, 2, 3), num_classes=3))
    deep = part_calls(p, "train_a", P.DEEP_FWD_BWD)
    assert [c.op for c in deep] == ["act_fwd", "fc_fwd", "fc_fwd", "softmax_ce_fwd", "softmax_ce_bwd", "fc_bwd",
                                    "act_bwd", "fc_bwd"]
    assert deep[-1].args["dx"] is None


def test_residual_gradients_are_summed():
    m = seq(cbr(8, 3, p=1), block("basic", 8), block("basic", 16, stride=2), gap(), fc(5))
    p = compile_program(m, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4))
    deep = names(part_calls(p, "train_a", P.DEEP_FWD_BWD))
    acc = [a for op, a in deep if op == "accumulate"]
    # the first layer's output (the identity block's input) is a branch point: its stem's input gradient and
    # the join's gradient (masked by the join's relu, written by the last BN's backward as dz) are summed
    assert len(acc) == 1 and {acc[0]["x"][-3:], acc[0]["y"][-3:]} == {"dx1", ".dx"}
    ident = next(a for op, a in deep if op == "bn_bwd" and a.get("dz") in (acc[0]["x"], acc[0]["y"]))
    assert "y" in ident and "beta" not in ident  # the mask comes from the block's output
    # the projection block's input is the identity block's output: shortcut conv and stem conv gradients
    # are both read by that block's last bn_bwd (dy + dy2), with no accumulate op
    (two,) = [a for op, a in deep if op == "bn_bwd" and "dy2" in a]
    assert two["dy"].endswith(".dx") and two["dy2"].endswith(".dx") and "dz" in two
    # the first layer's backward (its own graph, after this one) reads the sum: it is the deep graph's last op
    assert deep[-1][0] == "accumulate"
    assert names(part_calls(p, "train_a", P.FIRST_BWD_A))[0][1]["dy"] == acc[0]["y"]


def test_add_of_the_same_value_twice():
    m = seq(fc(4), add2(identity(), identity()), fc(3))
    p = compile_program(m, mlp_spec(input_shape=(1, 1, 2), num_classes=3))
    deep = names(part_calls(p, "train_a", P.DEEP_FWD_BWD))
    assert ("copy", {"x": "L2.dx", "y": "L0.dsum"}) in deep
    assert ("accumulate", {"x": "L2.dx", "y": "L0.dsum"}) in deep
    assert names(part_calls(p, "train_a", P.FIRST_BWD_A))[0][1]["dy"] == "L0.dsum"


def test_batch_norm_graphs():
    m = seq(conv(8, 3, p=1), bn(momentum=0.05, eps=1e-3), relu(), maxpool(2), flatten(), fc(16), bn(), fc(4))
    p = compile_program(m, mlp_spec(input_shape=(4, 4, 2), num_classes=4))
    assert names(part_calls(p, "train_a", P.UPDATE_RUNNING)) == [("range_copy", {"src": sp(Role.RUNNING_NEXT),
                                                                                 "dst": sp(Role.RUNNING),
                                                                                 "flag": "nan_flag"})]
    assert names(part_calls(p, "train_a", P.REDUCE_RUNNING)) == [("range_allreduce_mean",
                                                                  {"span": sp(Role.RUNNING_NEXT)})]
    eq = part_calls(p, "epoch_end", P.FOLD_RUNNING)
    assert [(c.op, c.layer, c.attrs["eps"]) for c in eq] == [("bn_update_eq", 0, 1e-3), ("bn_update_eq", 2, 1e-5)]
    assert eq[0].args["mean"].region == Region(Role.RUNNING, MEAN)
    assert eq[0].args["scale"].region == Region(Role.FOLDED, FOLDED_SCALE)
    # conv+bn+relu+maxpool: one cbr whose BN kernels pool
    fwd = next(c for c in part_calls(p, "train_a", P.FIRST_FWD_A) if c.op == "bn_maxpool_fwd")
    assert fwd.attrs == {"momentum": 0.05, "eps": 1e-3, "kernel": 2, "stride": 2, "padding": 0}
    assert fwd.args["mean_in"].region == Region(Role.RUNNING, MEAN)
    assert fwd.args["var_out"].region == Region(Role.RUNNING_NEXT, VAR)
    assert fwd.args["saved_mean"].region == Region(Role.TEMP, dtype_group(DType.FP32))
    inf = [c.op for c in part_calls(p, "val_a", P.INFER_A)]
    assert inf == ["conv_fwd", "bn_inf", "maxpool_inf", "fc_fwd", "bn_inf", "fc_fwd", "softmax_ce_inf"]
    bwd = [c.op for c in part_calls(p, "train_a", P.FIRST_BWD_A)]
    assert bwd == ["bn_maxpool_bwd", "conv_bwd"]
    # the flatten before the fc is gone (the fc reads [N,H,W,C]); the one feeding a BN1d would be kept
    assert all(c.op != "flatten_fwd" for c in part_calls(p, "train_a", P.DEEP_FWD_BWD))
    assert fwd.args["mask"].region == Region(Role.MASK) and fwd.args["y"].shape.h == 2


def test_dropout_train_only():
    p = compile_program(seq(fc(8), relu(), dropout(0.3), fc(2)), mlp_spec(input_shape=(1, 1, 4), num_classes=2))
    deep = part_calls(p, "train_a", P.DEEP_FWD_BWD)
    d = next(c for c in deep if c.op == "dropout_fwd")
    assert d.attrs == {"p": 0.3} and d.args["seed"].name == "dropout_seed" and d.args["mask"].dtype == DType.INT8
    assert any(c.op == "dropout_bwd" for c in deep)
    inf = part_calls(p, "val_a", P.INFER_A)
    assert [c.op for c in inf] == ["fc_fwd", "fc_fwd", "softmax_ce_inf"]
    assert inf[1].args["x"] is inf[0].args["y"]


def _opt(spec_kw, m=None):
    m = m or seq(conv(4, 3, p=1), bn(), relu(), gap(), fc(3))
    p = compile_program(m, mlp_spec(input_shape=(4, 4, 2), num_classes=3, **spec_kw))
    return part_calls(p, "train_a", P.OPTIMIZER)


def test_optimizers():
    sgd = _opt({"optimizer": "sgd", "weight_decay": 5e-4})
    assert [(c.op, c.attrs.get("rule"), c.attrs.get("weight_decay")) for c in sgd] == [
        ("lr_lookup", None, None), ("range_optimizer", "sgd", 5e-4), ("range_optimizer", "sgd", 0.0),
        ("scalar_increment", None, None)]
    assert sgd[1].args["m"] is None and sgd[1].args["v"] is None
    assert sgd[0].args["table"].shape.c == 1  # the default table: one rate for every step
    adamw = _opt({"optimizer": "adamw", "beta1": 0.8, "beta2": 0.99})
    assert [c.attrs.get("rule") for c in adamw[1:3]] == ["adamw", "adam"]
    assert adamw[1].args["v"] == sp(Role.MOMENT2, decayed=True) and adamw[1].args["step"].name == "step"
    assert adamw[1].attrs["beta1"] == 0.8 and adamw[1].attrs["beta2"] == 0.99
    lars = _opt({"optimizer": "lars", "weight_decay": 1e-4, "lr_table_steps": 100, "trust_coefficient": 0.02})
    assert [c.op for c in lars] == ["lr_lookup", "range_optimizer", "lars_update", "lars_update", "scalar_increment"]
    assert lars[1].attrs["rule"] == "momentum" and lars[1].args["w"] == sp(PARAM, decayed=False)
    assert [c.args["w"].name for c in lars[2:4]] == ["L0.w", "L2.w"]
    assert lars[2].args["ratio"].region == Region(Role.TRUST_RATIO, FIRST_CONV)
    assert lars[3].args["ratio"].region == Region(Role.TRUST_RATIO, FC_W)
    assert lars[2].attrs == {"nesterov": False, "momentum": 0.9, "weight_decay": 1e-4, "trust_coefficient": 0.02,
                             "eps": 1e-8, "trust_clip": 100.0}
    assert {c.attrs["trust_clip"] for c in _opt({"optimizer": "lars", "trust_clip": 7.0})[2:4]} == {7.0}
    assert lars[0].args["table"].shape.c == 100
    nest = _opt({"optimizer": "lars_nesterov"})
    assert nest[1].attrs["rule"] == "nesterov" and nest[2].attrs["nesterov"]


def test_bias_free_model_skips_the_bias_update():
    ops = _opt({}, seq(conv(4, 3, p=1), gap(), fc(3, bias=False)))
    assert [(c.op, c.attrs.get("rule")) for c in ops] == [("lr_lookup", None), ("range_optimizer", "momentum"),
                                                          ("scalar_increment", None)]


def test_grad_clip_attribute():
    p = compile_program(seq(fc(3)), mlp_spec(input_shape=(1, 1, 2), num_classes=3, grad_clip=5.0))
    assert part_calls(p, "train_a", P.CHECK_FINITE)[0].attrs == {"clip": 5.0}


def test_bn_running_statistics_join_the_nan_flag():
    # Inputs of 1e30 overflow the running variance with finite gradients: the statistics are checked too.
    m = seq(conv(8, 3, p=1), bn(), relu(), flatten(), fc(4))
    p = compile_program(m, mlp_spec(input_shape=(4, 4, 2), num_classes=4))
    nan = part_calls(p, "train_a", P.CHECK_FINITE)
    assert [c.op for c in nan] == ["range_check_finite", "range_check_finite", "count_flag"]
    assert names(nan[:2]) == [("range_check_finite", {"span": sp(GRAD), "flag": "nan_flag"}),
                              ("range_check_finite", {"span": sp(Role.RUNNING_NEXT), "flag": "nan_flag"})]
    assert nan[0].attrs == {"clip": 0.0} and nan[1].attrs == {"clip": 0.0, "accumulate": True}
    # without BN there is nothing more to check
    mlp = compile_program(seq(fc(8), relu(), fc(4)), mlp_spec(input_shape=(1, 1, 4), num_classes=4))
    assert [c.op for c in part_calls(mlp, "train_a", P.CHECK_FINITE)] == ["range_check_finite", "count_flag"]


def test_loss_scale_rules_reach_the_plan():
    def update(**kw):
        p = compile_program(seq(fc(8), relu(), fc(4)), mlp_spec(input_shape=(1, 1, 4), num_classes=4, amp=True, **kw))
        call = part_calls(p, "train_a", P.LOSS_SCALE)[-1]
        assert call.op == "loss_scale_update"
        return p, call

    p, dyn = update()
    assert dyn.attrs == {"rule": "dynamic", "growth_interval": 2000}
    assert dyn.args["tracker"].name == "loss_scale_tracker"
    assert dyn.args["tracker"].dtype == DType.INT32
    assert p.named["loss_scale_tracker"].region == Region(Role.SCALAR, dtype_group(DType.INT32))
    assert {i.tensor.name: i.value for i in p.inits}["loss_scale"] == 65536.0
    p, dyn = update(loss_scale_growth_interval=7, loss_scale_init=1024.0)
    assert dyn.attrs["growth_interval"] == 7 and {i.tensor.name: i.value for i in p.inits}["loss_scale"] == 1024.0
    p, st = update(loss_scale_rule="static")
    assert st.attrs == {"rule": "static"} and st.args["tracker"] is None and "loss_scale_tracker" not in p.named
    assert {i.tensor.name: i.value for i in p.inits}["loss_scale"] == 8192.0
