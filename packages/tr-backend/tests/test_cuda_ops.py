"""Every CUDA op against the CPU backend on the same inputs (the CPU backend is the reference).

Tolerances (max |cuda - cpu| <= tol * max(1, max |cpu|) unless stated):
- exact (bit-identical): copies, casts, masks, dropout, pooling argmax, range ops, scalars, SGD/momentum/
  Nesterov updates and Adam's moments (same float32 operations in the same order, --fmad=false);
- 1e-6: element-wise transcendental (exp, tanh, erfc differ from numpy by an ulp or two), softmax-CE,
  avg/global pooling, Adam weights (float64 pow);
- 1e-5: reductions in another order: FP32 GEMMs (cuBLASLt vs BLAS), convolution, batch norm, LARS norms;
- TF32 GEMMs: ||cuda - cpu|| / ||cpu|| <= 5e-3; FP16 outputs: 2e-3 (one FP16 ulp is 2^-11 relative);
  BF16 inputs: relative norm 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import FC_B, FC_W, RESULT, RESULT_SUM, SCALAR_FP32, SCALAR_INT32, op
from cuda_testkit import Twin, close, rel_norm

from tr.core.memory import Region, Role, Span
from tr.core.ops import ACTIVATIONS, OPTIMIZER_RULES

pytestmark = pytest.mark.gpu


def exact(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert c.dtype == g.dtype
        assert np.array_equal(c.view(np.uint8), g.view(np.uint8)), f"{name}: differs from the CPU backend"


def check(tw: Twin, tol: float, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        close(g, c, tol, name)


# --- fully connected -------------------------------------------------------------------------------------
def _fc(dt="fp32", ydt=None, bias=True, xshape=(64, 5, 6, 10), o=70, bdt="fp32", tf32=False):
    tw = Twin(use_tf32=tf32)
    n, k = xshape[0], int(np.prod(xshape[1:]))
    tw.add("x", xshape, dt)
    tw.add("w", (o, 1, 1, k), dt)
    if bias:
        tw.add("b", (o,), bdt)
    tw.add("y", (n, 1, 1, o), ydt or dt)
    tw.add("dy", (n, 1, 1, o), dt)
    tw.add("dw", (o, 1, 1, k), ydt or dt)
    tw.add("db", (o,), ydt or dt)
    tw.add("dx", xshape, dt)
    tw.allocate()
    for name in ("x", "w", "dy") + (("b",) if bias else ()):
        tw.fill(name)
    return tw


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", [None, "relu"])
def test_fc_fwd_fp32(bias, act):
    tw = _fc(bias=bias)
    _, g = tw.run(op("fc_fwd", x=tw["x"], w=tw["w"], b=tw["b"] if bias else None, y=tw["y"], activation=act),
                  poison=("y",))
    print(f"\nfc_fwd fp32 bias={bias} act={act}: {g.ops[0].info}")
    check(tw, 1e-5, "y")


def test_fc_fwd_tf32_is_close_but_not_fp32():
    tw = _fc(tf32=True)
    _, g = tw.run(op("fc_fwd", x=tw["x"], w=tw["w"], b=tw["b"], y=tw["y"], activation="relu"), poison=("y",))
    print(f"\nfc_fwd tf32 bias relu: {g.ops[0].info}")
    c, g = tw.both("y")
    assert rel_norm(g, c) <= 5e-3


@pytest.mark.parametrize("ydt", ["fp16", "fp32"])
def test_fc_fwd_fp16_inputs_accumulate_in_fp32(ydt):
    tw = _fc(dt="fp16", ydt=ydt, xshape=(64, 1, 1, 256), o=96)
    _, g = tw.run(op("fc_fwd", x=tw["x"], w=tw["w"], b=tw["b"], y=tw["y"], activation="relu"), poison=("y",))
    print(f"\nfc_fwd fp16 -> {ydt}, fp32 bias, relu: {g.ops[0].info}")
    check(tw, 2e-3 if ydt == "fp16" else 1e-5, "y")


def test_fc_fwd_bf16_inputs():
    tw = _fc(dt="bf16", ydt="fp32", xshape=(32, 1, 1, 128), o=48)
    tw.run(op("fc_fwd", x=tw["x"], w=tw["w"], b=tw["b"], y=tw["y"]), poison=("y",))
    c, g = tw.both("y")
    assert rel_norm(g, c) <= 1e-2


@pytest.mark.parametrize("with_db,with_dx", [(True, True), (False, True), (True, False)])
def test_fc_bwd_fp32(with_db, with_dx):
    tw = _fc()
    tw.run(op("fc_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], db=tw["db"] if with_db else None,
              dx=tw["dx"] if with_dx else None), poison=("dw", "db", "dx"))
    check(tw, 1e-5, "dw", *(("db",) if with_db else ()), *(("dx",) if with_dx else ()))


def test_fc_bwd_amp_fp16_inputs_fp32_weight_grads():
    tw = _fc(dt="fp16", ydt="fp32", xshape=(64, 1, 1, 256), o=96)
    _, g = tw.run(op("fc_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], db=tw["db"], dx=tw["dx"]),
                  poison=("dw", "db", "dx"))
    print(f"\nfc_bwd fp16 -> fp32 dw/db: {g.ops[0].info}")
    check(tw, 1e-5, "dw", "db")
    check(tw, 2e-3, "dx")


def test_fc_bwd_tf32():
    tw = _fc(tf32=True)
    _, g = tw.run(op("fc_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], db=tw["db"], dx=tw["dx"]))
    print(f"\nfc_bwd tf32: {g.ops[0].info}")
    for name in ("dw", "dx", "db"):
        c, g = tw.both(name)
        assert rel_norm(g, c) <= 5e-3, name


# --- activations -----------------------------------------------------------------------------------------
def _act(dt="fp32"):
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, (8, 9, 10, 3), dt)
    tw.add("mask", (8, 9, 10, 3), "int8")
    tw.allocate()
    tw.fill("x", -5, 5)
    tw.fill("dy")
    return tw


@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("dt", ["fp32", "fp16"])
def test_activation_forward_backward_inference(kind, dt):
    tol = 1e-6 if dt == "fp32" else 2e-3
    tw = _act(dt)
    tw.run(op("act_fwd", x=tw["x"], y=tw["y"], mask=tw["mask"], kind=kind), poison=("y", "mask"))
    check(tw, tol, "y")
    exact(tw, "mask")
    tw.run(op("act_bwd", x=tw["x"], dy=tw["dy"], dx=tw["dx"], kind=kind), poison=("dx",))
    check(tw, tol, "dx")
    tw.run(op("act_inf", x=tw["x"], y=tw["y"], kind=kind), poison=("y",))
    check(tw, tol, "y")


def test_relu_backward_from_mask_in_place():
    tw = _act()
    tw.run(op("act_fwd", x=tw["x"], y=tw["y"], mask=tw["mask"], kind="relu"))
    tw.run(op("act_bwd", x=tw["y"], dy=tw["dy"], dx=tw["dy"], mask=tw["mask"], kind="relu"))
    exact(tw, "dy")


# --- softmax cross-entropy ----------------------------------------------------------------------------------
def _sce(n, k, integer_logits=False):
    tw = Twin()
    tw.add("z", (n, 1, 1, k))
    tw.add("probs", (n, 1, 1, k))
    tw.add("d", (n, 1, 1, k))
    tw.add("result", (3,))
    tw.add("scale", (1,))
    tw.add("labels", (n,), "int32")
    tw.add("pred", (n,), "int32")
    tw.allocate()
    if integer_logits:
        tw.fill("z", -3, 3)
        tw.write("z", np.round(tw.cpu.read(tw["z"])))
    else:
        tw.fill("z", -4, 4)
    tw.write("labels", tw.rng.integers(0, k, n))
    tw.write("scale", [8.0])
    return tw


@pytest.mark.parametrize("n,k,ls,ties", [(128, 10, 0.0, False), (128, 10, 0.1, False), (16, 1000, 0.0, True),
                                         (300, 37, 0.2, True)])
def test_softmax_ce_forward_backward_inference(n, k, ls, ties):
    tw = _sce(n, k, ties)
    tw.run(op("softmax_ce_fwd", logits=tw["z"], labels=tw["labels"], probs=tw["probs"], result=tw["result"],
              label_smoothing=ls), poison=("probs", "result"))
    check(tw, 1e-6, "probs")
    c, g = (a.ravel() for a in tw.both("result"))
    assert abs(g[0] - c[0]) <= 1e-6 * max(1.0, abs(c[0])), (g, c)
    assert g[1] == c[1] and g[2] == c[2], (g, c)
    tw.run(op("softmax_ce_bwd", probs=tw["probs"], labels=tw["labels"], scale=tw["scale"], dlogits=tw["d"],
              label_smoothing=ls), poison=("d",))
    check(tw, 1e-6, "d")
    tw.run(op("softmax_ce_inf", logits=tw["z"], labels=tw["labels"], result=tw["result"], pred=tw["pred"],
              label_smoothing=ls), poison=("result", "pred"))
    exact(tw, "pred")
    c, g = (a.ravel() for a in tw.both("result"))
    assert abs(g[0] - c[0]) <= 1e-6 * max(1.0, abs(c[0])) and g[1] == c[1] and g[2] == c[2]


def test_softmax_ce_loss_is_deterministic_across_replays():
    tw = _sce(512, 100)
    _, g = tw.run(op("softmax_ce_fwd", logits=tw["z"], labels=tw["labels"], probs=tw["probs"], result=tw["result"]))
    first = tw.gpu.read(tw["result"]).copy()
    for _ in range(5):
        tw.gpu.launch(g)
        assert np.array_equal(tw.gpu.read(tw["result"]).view(np.uint32), first.view(np.uint32))


# --- dropout ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["fp32", "fp16"])
def test_dropout_mask_matches_cpu_bit_for_bit(dt):
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, (16, 5, 5, 33), dt)
    tw.add("mask", (16, 5, 5, 33), "int8")
    tw.add("seed", (2,), "int32")
    tw.allocate()
    tw.fill("x")
    tw.fill("dy")
    tw.write("seed", np.array([0x12345678, 0x0BADF00D], np.int32))
    fwd = op("dropout_fwd", x=tw["x"], y=tw["y"], mask=tw["mask"], seed=tw["seed"], p=0.3)
    gc, gg = tw.run(fwd, poison=("y", "mask"))
    exact(tw, "mask", "y", "seed")
    tw.cpu.launch(gc)  # a second step draws a fresh mask from the advanced seed
    tw.gpu.launch(gg)
    exact(tw, "mask", "y", "seed")
    keep = tw.gpu.read(tw["mask"]).mean()
    assert 0.65 < keep < 0.75
    tw.run(op("dropout_bwd", dy=tw["dy"], mask=tw["mask"], dx=tw["dy"], p=0.3))
    exact(tw, "dy")


# --- copies and shape ops ---------------------------------------------------------------------------------
def test_copy_accumulate_flatten_channel_pad_add():
    tw = Twin()
    tw.add("x", (4, 3, 5, 6))
    tw.add("y", (4, 3, 5, 6))
    tw.add("f", (4, 1, 1, 90))
    tw.add("h", (4, 3, 5, 6), "fp16")
    tw.add("p", (4, 3, 5, 8))
    tw.add("q", (4, 3, 5, 6))
    tw.allocate()
    for name in ("x", "y", "h", "p"):
        tw.fill(name)
    tw.run(op("copy", x=tw["x"], y=tw["q"]), poison=("q",))
    exact(tw, "q")
    tw.run(op("accumulate", x=tw["x"], y=tw["y"]), op("accumulate", x=tw["x"], y=tw["h"]))
    exact(tw, "y", "h")
    tw.run(op("flatten_fwd", x=tw["x"], y=tw["f"]), poison=("f",))
    exact(tw, "f")
    tw.run(op("flatten_bwd", dy=tw["f"], dx=tw["q"]), poison=("q",))
    exact(tw, "q")
    tw.run(op("channel_pad_fwd", x=tw["x"], y=tw["p"]), poison=("p",))
    exact(tw, "p")
    tw.run(op("channel_pad_bwd", dy=tw["p"], dx=tw["q"]), poison=("q",))
    exact(tw, "q")
    tw.run(op("add_fwd", a=tw["x"], b=tw["y"], y=tw["q"], activation="relu"), poison=("q",))
    exact(tw, "q")
    tw.run(op("add_fwd", a=tw["x"], b=tw["y"], y=tw["x"]))
    exact(tw, "x")


# --- range ops ---------------------------------------------------------------------------------------------
def _ranges(sizes=((70,), (70, 1, 1, 50))):
    """Bias-like and weight tensors in PARAM, GRAD, MOMENT1, MOMENT2 regions (FP32), the weights' FP16 twins in
    AMP_COPY, and scalars."""
    tw = Twin()
    tw.add("wb", sizes[0], "fp32", Region(Role.PARAM, FC_B))
    tw.add("ww", sizes[1], "fp32", Region(Role.PARAM, FC_W))
    tw.add("aw", sizes[1], "fp16", Region(Role.AMP_COPY, FC_W))
    tw.add("gb", sizes[0], "fp32", Region(Role.GRAD, FC_B))
    tw.add("gw", sizes[1], "fp32", Region(Role.GRAD, FC_W))
    tw.add("result", (3,), "fp32", RESULT)
    tw.add("mb", sizes[0], "fp32", Region(Role.MOMENT1, FC_B))
    tw.add("mw", sizes[1], "fp32", Region(Role.MOMENT1, FC_W))
    tw.add("vb", sizes[0], "fp32", Region(Role.MOMENT2, FC_B))
    tw.add("vw", sizes[1], "fp32", Region(Role.MOMENT2, FC_W))
    tw.add("lr", (1,), "fp32", SCALAR_FP32)
    tw.add("scale", (1,), "fp32", SCALAR_FP32)
    tw.add("batch", (1,), "fp32", SCALAR_FP32)
    tw.add("table", (5,), "fp32", SCALAR_FP32)
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.add("step", (1,), "int32", SCALAR_INT32)
    tw.add("nbatch", (1,), "int32", SCALAR_INT32)
    tw.add("accum", (3,), "fp32", RESULT_SUM)
    tw.allocate()
    for name in ("wb", "ww", "gb", "gw", "mb", "mw", "result", "accum"):
        tw.fill(name)
    tw.fill("vb", 0, 1)
    tw.fill("vw", 0, 1)
    tw.write("lr", [0.05])
    tw.write("scale", [1.0])
    tw.write("batch", [96.0])
    tw.write("nbatch", [37])
    return tw


G_SPAN = Span.of(Role.GRAD)


def test_range_clear_copy_scale_ema_allreduce():
    tw = _ranges()
    tw.write("scale", [0.125])
    tw.run(op("range_scale", span=G_SPAN, factor=tw["scale"]))
    exact(tw, "gb", "gw")
    tw.run(op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.MOMENT1), decay=0.9))
    exact(tw, "mb", "mw")
    tw.write("flag", [1])  # a skipped step keeps the EMA weights
    tw.run(op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.MOMENT1), decay=0.9,
              flag=tw["flag"]))
    exact(tw, "mb", "mw")
    tw.write("flag", [0])
    tw.run(op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.MOMENT1), decay=0.9,
              flag=tw["flag"]))
    exact(tw, "mb", "mw")
    tw.write("flag", [1])  # a skipped step keeps the destination
    tw.run(op("range_copy", src=Span.of(Role.PARAM), dst=Span.of(Role.MOMENT2),
              flag=tw["flag"]))
    exact(tw, "vb", "vw")
    tw.write("flag", [0])
    tw.run(op("range_copy", src=Span.of(Role.PARAM), dst=Span.of(Role.MOMENT2),
              flag=tw["flag"]))
    exact(tw, "vb", "vw")
    tw.run(op("range_copy", src=Span.of(Role.GRAD), dst=Span.of(Role.MOMENT2)))
    exact(tw, "vb", "vw")
    tw.run(op("range_allreduce_mean", span=G_SPAN))
    exact(tw, "gb", "gw")
    tw.run(op("range_clear", span=Span.of(Role.GRAD) + Span.of(Role.RESULT)))
    exact(tw, "gb", "gw", "result")
    assert not tw.gpu.read(tw["gw"]).any()


def test_range_cast_fp32_fp16_bf16():
    tw = _ranges()
    w = tw.cpu.read(tw["ww"]).ravel()
    w[:4] = [np.inf, -np.inf, np.nan, 70000.0]
    tw.write("ww", w)
    w32, w16, g32 = Span.of(Role.PARAM, decayed=True), Span.of(Role.AMP_COPY), Span.of(Role.GRAD, decayed=True)
    tw.run(op("range_cast", src=w32, dst=w16, src_dtype="fp32", dst_dtype="fp16"), poison=("aw",))
    check(tw, 0.0, "aw")  # equal values, NaN where NaN (NaN payload bits may differ)
    tw.run(op("range_cast", src=w16, dst=g32, src_dtype="fp16", dst_dtype="fp32"))
    check(tw, 0.0, "gw")
    tw.run(op("range_cast", src=w32, dst=w16, src_dtype="fp32", dst_dtype="bf16"))
    exact(tw, "aw")


@pytest.mark.parametrize("clip", [0.0, 0.5])
@pytest.mark.parametrize("poison", [None, np.inf, np.nan])
def test_range_check_finite(clip, poison):
    tw = _ranges()
    if poison is not None:
        g = tw.cpu.read(tw["gw"]).ravel()
        g[123] = poison
        tw.write("gw", g)
    tw.write("flag", [7])
    tw.run(op("range_check_finite", span=G_SPAN, flag=tw["flag"], clip=clip))
    exact(tw, "flag", "gb")
    check(tw, 0.0, "gw")
    assert int(tw.gpu.read(tw["flag"]).ravel()[0]) == (poison is not None)


@pytest.mark.parametrize("batch", ["batch", "nbatch"])
def test_accum_metrics(batch):
    tw = _ranges()
    tw.run(op("accum_metrics", result=tw["result"], accum=tw["accum"], batch=tw[batch]))
    exact(tw, "accum")


def _opt_call(tw: Twin, rule: str, wd: float, lr_scale: float = 1.0) -> object:
    adam = rule in ("adam", "adamw")
    return op("range_optimizer", w=Span.of(Role.PARAM), g=G_SPAN,
              m=Span.of(Role.MOMENT1) if rule != "sgd" else None,
              v=Span.of(Role.MOMENT2) if adam else None, lr=tw["lr"], flag=tw["flag"],
              grad_scale=tw["scale"], step=tw["step"] if adam else None, rule=rule, beta1=0.9, beta2=0.999,
              eps=1e-8, weight_decay=wd, lr_scale=lr_scale)


@pytest.mark.parametrize("rule", OPTIMIZER_RULES)
@pytest.mark.parametrize("wd,scale,lr_scale", [(0.0, 1.0, 1.0), (5e-4, 8192.0, 1.0), (5e-4, 4.0, 0.3)])
def test_range_optimizer_rules(rule, wd, scale, lr_scale):
    tw = _ranges()
    tw.write("scale", [scale])
    tw.write("step", [3])
    gc, gg = tw.run(_opt_call(tw, rule, wd, lr_scale))  # (lr_scale: a parameter group's rate multiplier)
    for _ in range(2):
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
    if rule in ("adam", "adamw"):
        exact(tw, "mb", "mw", "vb", "vw")
        check(tw, 1e-6, "wb", "ww")
    else:
        exact(tw, "wb", "ww", "mb", "mw")


@pytest.mark.parametrize("rule", ["momentum", "adamw"])
def test_tensor_optimizer_updates_one_tensor_as_the_cpu(rule):
    """The layer-wise decay's per-tensor update: the weight tensor alone at its own rate, its neighbours untouched."""
    tw = _ranges()
    tw.write("step", [2])
    adam = rule == "adamw"
    before = tw.gpu.read(tw["wb"]).copy()
    call = op("tensor_optimizer", w=tw["ww"], g=tw["gw"], m=tw["mw"], v=tw["vw"] if adam else None, lr=tw["lr"],
              flag=tw["flag"], grad_scale=tw["scale"], step=tw["step"] if adam else None, rule=rule, beta1=0.9,
              beta2=0.999, eps=1e-8, weight_decay=1e-3, lr_scale=0.4)
    gc, gg = tw.run(call)
    tw.cpu.launch(gc)
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    if adam:
        exact(tw, "mw", "vw")
        check(tw, 1e-6, "ww")
    else:
        exact(tw, "mw", "ww")
    assert np.array_equal(tw.gpu.read(tw["wb"]), before)


def test_range_optimizer_skips_when_flag_set():
    tw = _ranges()
    tw.write("flag", [1])
    before = tw.gpu.read(tw["ww"]).copy()
    tw.run(_opt_call(tw, "adamw", 1e-4))
    assert np.array_equal(tw.gpu.read(tw["ww"]), before)
    exact(tw, "ww", "mw", "vw")


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_update(nesterov):
    tw = Twin()
    for name in ("w", "g", "m"):
        tw.add(name, (64, 3, 3, 16))
    for name in ("lr", "scale", "ratio"):
        tw.add(name, (1,))
    tw.add("flag", (1,), "int32")
    tw.allocate()
    for name in ("w", "g", "m"):
        tw.fill(name)
    tw.write("lr", [0.1])
    tw.write("scale", [4.0])
    call = op("lars_update", w=tw["w"], g=tw["g"], m=tw["m"], lr=tw["lr"], flag=tw["flag"], grad_scale=tw["scale"],
              ratio=tw["ratio"], nesterov=nesterov, momentum=0.9, weight_decay=1e-4, trust_coefficient=0.01)
    tw.run(call)
    check(tw, 1e-5, "ratio", "w", "m")


def test_lars_update_honours_trust_clip():
    tw = Twin()
    for name in ("w", "g", "m"):
        tw.add(name, (64, 3, 3, 16))
    for name in ("lr", "scale", "ratio"):
        tw.add(name, (1,))
    tw.add("flag", (1,), "int32")
    tw.allocate()
    for name in ("w", "g", "m"):
        tw.fill(name)
    tw.write("lr", [0.1])
    tw.write("scale", [1.0])
    call = op("lars_update", w=tw["w"], g=tw["g"], m=tw["m"], lr=tw["lr"], flag=tw["flag"], grad_scale=tw["scale"],
              ratio=tw["ratio"], trust_coefficient=1e3, trust_clip=2.5)
    tw.run(call)
    check(tw, 1e-5, "ratio", "w", "m")
    assert float(tw.gpu.read(tw["ratio"]).ravel()[0]) == 2.5


# --- scalars -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("step", [-1, 0, 3, 100])
def test_scalars(step):
    tw = _ranges()
    tw.write("table", [0.1, 0.2, 0.3, 0.4, 0.5])
    tw.write("step", [step])
    tw.write("scale", [3.0])
    tw.write("flag", [1 if step > 0 else 0])
    tw.run(op("lr_lookup", table=tw["table"], step=tw["step"], lr=tw["lr"]),
           op("scalar_increment", x=tw["step"]), op("loss_scale_update", flag=tw["flag"], scale=tw["scale"]),
           op("loss_scale_update", flag=tw["flag"], scale=tw["scale"]))
    exact(tw, "lr", "step", "scale")


# --- convolution, batch norm, pooling ------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,stride,padding", [(3, 2, 1), (1, 1, 0), (3, 1, 1)])
def test_conv_forward_backward(kernel, stride, padding):
    tw = Twin()
    h = 9
    p = (h + 2 * padding - kernel) // stride + 1
    tw.add("x", (3, h, h, 5))
    tw.add("w", (6, kernel, kernel, 5))
    tw.add("y", (3, p, p, 6))
    tw.add("dy", (3, p, p, 6))
    tw.add("dw", (6, kernel, kernel, 5))
    tw.add("dx", (3, h, h, 5))
    tw.allocate()
    for name in ("x", "w", "dy"):
        tw.fill(name)
    geo = {"kernel": kernel, "stride": stride, "padding": padding}
    tw.run(op("conv_fwd", x=tw["x"], w=tw["w"], y=tw["y"], **geo),
           op("conv_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], dx=tw["dx"], **geo),
           poison=("y", "dw", "dx"))
    check(tw, 1e-5, "y", "dw", "dx")


@pytest.mark.parametrize("shape", [(6, 5, 7, 12), (16, 23, 29, 40)], ids=["one-chunk", "many-chunks"])
def test_batch_norm(shape):
    """The second shape splits the rows into many chunks and the channels into a full and a partial tile."""
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, shape)
    for name in ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std",
                 "dgamma", "dbeta", "scale", "bias"):
        tw.add(name, (shape[-1],))
    tw.allocate()
    for name in ("x", "dy", "gamma", "beta", "mean_in"):
        tw.fill(name)
    tw.fill("var_in", 0.5, 2)
    tw.write("x", tw.cpu.read(tw["x"]) * 3 + 1)
    t = tw.arena.tensors
    tw.run(op("bn_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"], var_in=t["var_in"],
              mean_out=t["mean_out"], var_out=t["var_out"], y=t["y"], saved_mean=t["saved_mean"],
              saved_inv_std=t["saved_inv_std"], momentum=0.1, eps=1e-5),
           op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
              saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["x"], eps=1e-5),
           op("bn_update_eq", gamma=t["gamma"], beta=t["beta"], mean=t["mean_out"], var=t["var_out"],
              scale=t["scale"], bias=t["bias"], eps=1e-5),
           op("bn_inf", x=t["dy"], scale=t["scale"], bias=t["bias"], y=t["dx"]),
           poison=("y", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma", "dbeta", "scale", "bias"))
    check(tw, 1e-5, "y", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma", "dbeta", "x", "scale",
          "bias", "dx")
    fwd = tw.gpu.capture("fwd", [op("bn_fwd", x=t["y"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"],
                                    var_in=t["var_in"], mean_out=t["mean_out"], var_out=t["var_out"], y=t["dy"],
                                    saved_mean=t["saved_mean"], saved_inv_std=t["saved_inv_std"], momentum=0.1,
                                    eps=1e-5)])
    runs = []
    for _ in range(2):  # fixed chunking and summation order: the same bytes every time
        tw.gpu.launch(fwd)
        tw.gpu.synchronize()
        runs.append([tw.gpu.read(t[n]).tobytes() for n in ("dy", "mean_out", "var_out", "saved_inv_std")])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("kernel,stride,padding,h", [(3, 2, 1, 8), (2, 2, 0, 8), (2, 2, 0, 9), (3, 1, 1, 8)])
def test_pooling(kernel, stride, padding, h):
    """(2, 2, 0, 8): windows tile the input exactly (the one-thread-per-window kernels); 9: a row and a column
    are left out (the general kernels)."""
    tw = Twin()
    p = (h + 2 * padding - kernel) // stride + 1
    tw.add("x", (2, h, h, 7))
    tw.add("y", (2, p, p, 7))
    tw.add("dy", (2, p, p, 7))
    tw.add("dx", (2, h, h, 7))
    tw.add("mask", (2, p, p, 7), "int8")
    tw.add("g", (2, 1, 1, 7))
    tw.allocate()
    tw.fill("x", -3, 3)
    tw.write("x", np.round(tw.cpu.read(tw["x"]) * 2) / 2)  # ties: first max must win
    tw.fill("dy")
    tw.fill("g")
    geo = {"kernel": kernel, "stride": stride, "padding": padding}
    tw.run(op("maxpool_fwd", x=tw["x"], y=tw["y"], mask=tw["mask"], **geo),
           op("maxpool_bwd", dy=tw["dy"], mask=tw["mask"], dx=tw["dx"], **geo), poison=("y", "mask", "dx"))
    exact(tw, "y", "mask", "dx")
    tw.run(op("maxpool_inf", x=tw["x"], y=tw["y"], **geo), poison=("y",))
    exact(tw, "y")
    tw.run(op("avgpool_fwd", x=tw["x"], y=tw["y"], **geo), op("avgpool_bwd", dy=tw["dy"], dx=tw["dx"], **geo),
           poison=("y", "dx"))
    check(tw, 1e-6, "y", "dx")
    tw.run(op("gap_fwd", x=tw["x"], y=tw["g"]), poison=("g",))
    check(tw, 1e-6, "g")
    tw.run(op("gap_bwd", dy=tw["g"], dx=tw["dx"]), poison=("dx",))
    exact(tw, "dx")


@pytest.mark.parametrize("dt", ["fp32", "fp16"])
@pytest.mark.parametrize("n,h,c", [(4, 112, 32), (3, 7, 1152), (2, 3, 40), (5, 1, 8)])
def test_gap_matches_the_cpu(n, h, c, dt):
    """Global average pooling over EfficientNet's squeeze sizes (12,544 rows a sample at 112x112, 1,152 channels
    at 7x7), below the lane kernel's 16 rows (3x3, 1x1: the one-thread-a-channel kernel) and a partial channel
    tile; FP16 within 2e-3 (the sum is kept in float), a relaunch the same bytes."""
    tw = Twin()
    tw.add("x", (n, h, h, c), dt)
    tw.add("g", (n, 1, 1, c), dt)
    tw.allocate()
    tw.fill("x")
    _, gg = tw.run(op("gap_fwd", x=tw["x"], y=tw["g"]), poison=("g",))
    check(tw, 1e-6 if dt == "fp32" else 2e-3, "g")
    first = tw.gpu.read(tw["g"]).tobytes()
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert tw.gpu.read(tw["g"]).tobytes() == first


@pytest.mark.parametrize("engine", ["direct", "cudnn"])
@pytest.mark.parametrize("dt", ["fp32", "fp16"])
def test_conv_engines_match_the_cpu(engine, dt, monkeypatch):
    """TR_CONV picks the engine (its op info says which ran); cuDNN uses deterministic engines only, so two
    runs give the same bytes. FP16: inputs rounded to FP16 on both sides, FP32 accumulation."""
    monkeypatch.setenv("TR_CONV", engine)
    tw = Twin()
    n, h, c, k = 4, 12, 8, 16
    tw.add("x", (n, h, h, c), dt)
    tw.add("w", (k, 3, 3, c), dt)
    tw.add("y", (n, h, h, k), dt)
    tw.add("dy", (n, h, h, k), dt)
    tw.add("dw", (k, 3, 3, c), dt)
    tw.add("dx", (n, h, h, c), dt)
    tw.allocate()
    for name in ("x", "w", "dy"):
        tw.fill(name)
    geo = {"kernel": 3, "stride": 1, "padding": 1}
    calls = (op("conv_fwd", x=tw["x"], w=tw["w"], y=tw["y"], **geo),
             op("conv_bwd", x=tw["x"], w=tw["w"], dy=tw["dy"], dw=tw["dw"], dx=tw["dx"], **geo))
    _, gg = tw.run(*calls, poison=("y", "dw", "dx"))
    infos = [o.info for o in gg.ops]
    assert all(i.startswith("cudnn" if engine == "cudnn" else "direct") for i in infos), infos
    check(tw, 1e-5 if dt == "fp32" else 2e-3, "y", "dw", "dx")
    first = {name: tw.gpu.read(tw[name]).tobytes() for name in ("y", "dw", "dx")}
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert all(tw.gpu.read(tw[name]).tobytes() == b for name, b in first.items())

