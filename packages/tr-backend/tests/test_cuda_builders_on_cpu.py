"""The CUDA op builders' Python side, on a machine without a GPU.

Each builder runs its family's rule (tr.backend.rules) and asks the extension for a native op with what the
rule worked out. A fake backend records the request instead of making the op, so a change to a rule or a
builder is checked in CI, not first on the device. The same bad call is refused by both backends with the
same message: the check exists once."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import FC_W, SCALAR_FP32, SCALAR_INT32, RecordingBackend, SimpleArena, build_cuda, op

from tr.backend.checks import where
from tr.backend.rules.image import GEOM_COLS
from tr.core.dtype import DType
from tr.core.errors import TrError
from tr.core.memory import Region, Role, Span

_Backend = RecordingBackend
build = build_cuda


def refusal(backend: str, call) -> str:
    """The message the backend's capture gives for ``call``, without the where-prefix."""
    try:
        if backend == "cuda":
            build(call, _ARENAS[-1].layout())
        else:
            a = _ARENAS[-1]
            a.allocate().capture("g", [call])
    except TrError as e:
        return str(e).removeprefix(where("g", 0, call) + ": ")
    raise AssertionError(f"{backend} accepted {call.op}")


_ARENAS: list[SimpleArena] = []


def arena(*tensors: tuple[str, tuple, str]) -> SimpleArena:
    a = SimpleArena()
    for name, shape, dt in tensors:
        a.add(name, shape, dt)
    _ARENAS.append(a)
    return a


def test_fc_builders_pass_the_rule_s_sizes_and_every_tensor():
    a = arena(("x", (8, 2, 2, 3), "fp16"), ("w", (5, 1, 1, 12), "fp16"), ("b", (5,), "fp16"),
              ("y", (8, 1, 1, 5), "fp16"), ("dy", (8, 1, 1, 5), "fp16"), ("dw", (5, 1, 1, 12), "fp32"),
              ("db", (5,), "fp32"), ("dx", (8, 2, 2, 3), "fp16"))
    name, ptrs, ints, _ = build(op("fc_fwd", x=a["x"], w=a["w"], b=a["b"], y=a["y"], activation="relu"))
    assert name == "fc_fwd" and (ints["n"], ints["k"], ints["o"], ints["relu"]) == (8, 12, 5, 1)
    assert ptrs["b"] == _Backend.arena_ptr + a["b"].offset and ints["b_dt"] == DType.FP16.code
    name, ptrs, ints, _ = build(op("fc_bwd", x=a["x"], w=a["w"], dy=a["dy"], dw=a["dw"], db=a["db"], dx=a["dx"]))
    assert name == "fc_bwd" and set(ptrs) == {"x", "w", "dy", "dw", "db", "dx"}
    assert ints["dw_dt"] == DType.FP32.code and (ints["n"], ints["k"], ints["o"]) == (8, 12, 5)


def test_conv_add_and_softmax_builders():
    a = arena(("x", (2, 6, 6, 4), "fp16"), ("w", (8, 3, 3, 4), "fp16"), ("y", (2, 3, 3, 8), "fp16"),
              ("dy", (2, 3, 3, 8), "fp16"), ("dw", (8, 3, 3, 4), "fp16"), ("dx", (2, 6, 6, 4), "fp16"))
    _, _, ints, _ = build(op("conv_fwd", x=a["x"], w=a["w"], y=a["y"], stride=2, padding=1))
    assert (ints["k"], ints["kh"], ints["sh"], ints["ph"], ints["p"], ints["q"]) == (8, 3, 2, 1, 3, 3)
    _, ptrs, ints, _ = build(op("conv_bwd", x=a["x"], w=a["w"], dy=a["dy"], dw=a["dw"], dx=a["dx"], stride=2,
                                padding=1))
    assert "dx" in ptrs and ints["c"] == 4 and "db" not in ptrs
    c = arena(("x", (2, 6, 6, 4), "fp16"), ("w", (8, 3, 3, 4), "fp16"), ("b", (1, 1, 1, 8), "fp16"),
              ("y", (2, 6, 6, 8), "fp16"), ("dy", (2, 6, 6, 8), "fp16"), ("dw", (8, 3, 3, 4), "fp16"),
              ("db", (1, 1, 1, 8), "fp32"))
    _, ptrs, ints, _ = build(op("conv_fwd", x=c["x"], w=c["w"], b=c["b"], y=c["y"], padding=1))
    assert ptrs["b"] == _Backend.arena_ptr + c["b"].offset and ints["b_dt"] == DType.FP16.code
    _, ptrs, ints, _ = build(op("conv_bwd", x=c["x"], w=c["w"], dy=c["dy"], dw=c["dw"], db=c["db"], padding=1))
    assert ptrs["db"] == _Backend.arena_ptr + c["db"].offset and "dx" not in ptrs
    b = arena(("a", (4, 2, 2, 3), "fp16"), ("c", (4, 2, 2, 3), "fp16"), ("logits", (4, 1, 1, 10), "fp32"),
              ("probs", (4, 1, 1, 10), "fp32"), ("dl", (4, 1, 1, 10), "fp16"), ("labels", (4,), "int32"),
              ("result", (3,), "fp32"), ("scale", (1,), "fp32"), ("pred", (4,), "int32"))
    _, _, ints, _ = build(op("add_fwd", a=b["a"], b=b["c"], y=b["a"], activation="relu"))
    assert ints == {"n": 48, "relu": 1, "a_dt": 1, "b_dt": 1, "y_dt": 1}
    _, _, ints, floats = build(op("softmax_ce_fwd", logits=b["logits"], labels=b["labels"], probs=b["probs"],
                                  result=b["result"], label_smoothing=0.1))
    assert (ints["n"], ints["k"]) == (4, 10) and floats == {"label_smoothing": pytest.approx(0.1)}
    _, ptrs, _, _ = build(op("softmax_ce_inf", logits=b["logits"], labels=b["labels"], result=b["result"],
                             pred=b["pred"]))
    assert "pred" in ptrs
    name, ptrs, ints, floats = build(op("onehot_loss_bwd", logits=b["logits"], labels=b["labels"], scale=b["scale"],
                                        dlogits=b["logits"], loss="mse", label_smoothing=0.1))
    assert name == "onehot_loss_bwd" and ptrs["dlogits"] == ptrs["logits"]
    assert (ints["n"], ints["k"], ints["loss"]) == (4, 10, 1) and floats == {"label_smoothing": pytest.approx(0.1)}
    name, ptrs, ints, _ = build(op("onehot_loss_inf", logits=b["logits"], labels=b["labels"], result=b["result"],
                                   pred=b["pred"], loss="bce_logits"))
    assert name == "onehot_loss_inf" and "pred" in ptrs and ints["loss"] == 0
    _, _, ints, _ = build(op("softmax_ce_bwd", probs=b["probs"], labels=b["labels"], scale=b["scale"],
                             dlogits=b["dl"]))
    assert (ints["n"], ints["k"], ints["dlogits_dt"]) == (4, 10, 1)


def test_mixup_builder_and_the_loss_s_lam():
    a = arena(("x", (6, 5, 7, 4), "bf16"), ("seed", (2,), "int32"), ("lam", (1,), "fp32"),
              ("logits", (6, 1, 1, 10), "fp32"), ("probs", (6, 1, 1, 10), "fp32"), ("labels", (6,), "int32"),
              ("result", (3,), "fp32"), ("scale", (1,), "fp32"))
    name, ptrs, ints, floats = build(op("mixup", x=a["x"], seed=a["seed"], lam=a["lam"], mixup_alpha=0.8,
                                        cutmix_alpha=1.0, prob=0.9, switch_prob=0.25))
    assert name == "mixup" and {"x", "seed", "lam"} <= set(ptrs)
    assert (ints["n"], ints["h"], ints["w"], ints["c"], ints["x_dt"]) == (6, 5, 7, 4, DType.BF16.code)
    assert floats == {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "prob": 0.9, "switch_prob": 0.25}
    _, ptrs, _, _ = build(op("softmax_ce_fwd", logits=a["logits"], labels=a["labels"], probs=a["probs"],
                             result=a["result"], lam=a["lam"], label_smoothing=0.1))
    assert ptrs["lam"] == _Backend.arena_ptr + a["lam"].offset
    _, ptrs, _, _ = build(op("softmax_ce_bwd", probs=a["probs"], labels=a["labels"], scale=a["scale"],
                             dlogits=a["probs"], lam=a["lam"]))
    assert "lam" in ptrs
    bad = op("mixup", x=a["x"], seed=a["seed"], lam=a["lam"], mixup_alpha=0.0, cutmix_alpha=0.0, prob=1.0,
             switch_prob=0.5)
    assert refusal("cuda", bad) == refusal("cpu", bad) and "both are 0" in refusal("cuda", bad)


def test_augment_builder_passes_the_spec():
    a = arena(("src", (16, 28, 28, 1), "uint8"), ("index", (4,), "int32"), ("key", (2,), "int32"),
              ("y", (4, 28, 28, 4), "fp16"))
    _, _, ints, floats = build(op("augment_affine", src=a["src"], index=a["index"], key=a["key"], y=a["y"], pad=2,
                                  degrees=15.0, rotation_slot=3, crop_slot=2, mean=(0.5,), std=(0.25,)))
    assert (ints["n"], ints["batch"], ints["c"], ints["c_out"], ints["pad"]) == (16, 4, 1, 4, 2)
    assert floats["degrees"] == 15.0 and floats["mean"] == [0.5] and floats["std"] == [0.25]


def test_image_builder_passes_the_coefficients():
    a = arena(("src", (4096,), "uint8"), ("geom", (4, 1, 1, GEOM_COLS), "int32"), ("y", (4, 32, 24, 4), "fp16"))
    name, ptrs, ints, floats = build(op("image_resample", src=a["src"], geom=a["geom"], y=a["y"], mean=(0.5,),
                                        std=(0.25, 0.5, 1.0), erase_value=(1.5,)))
    assert name == "image_resample" and set(ptrs) == {"src", "geom", "y"}
    assert (ints["batch"], ints["h"], ints["w"], ints["c_out"]) == (4, 32, 24, 4)
    assert floats["norm_a"][0] == np.float32(1 / (255 * 0.25)) and floats["norm_b"][2] == np.float32(-0.5)
    assert floats["erase"] == [1.5, 1.5, 1.5]
    assert refusal("cuda", op("image_resample", src=a["src"], geom=a["geom"], y=a["y"], std=(-1.0,))) == \
        refusal("cpu", op("image_resample", src=a["src"], geom=a["geom"], y=a["y"], std=(-1.0,)))
    j = arena(("x", (4, 32, 24, 3), "uint8"), ("geom", (4, 1, 1, GEOM_COLS), "int32"), ("y", (4, 32, 24, 4), "fp16"),
              ("u8", (4, 32, 24, 4), "uint8"))
    name, ptrs, ints, _ = build(op("image_jitter", x=j["x"], geom=j["geom"], y=j["y"]))
    assert name == "image_jitter" and set(ptrs) == {"x", "geom", "y"} and ints["c_out"] == 4
    assert "UINT8 y" in refusal("cuda", op("image_resample", src=j["x"], geom=j["geom"], y=j["u8"]))


def test_range_builders_size_their_spans_from_the_layout():
    a = SimpleArena()
    for name, role, dt in (("w", Role.PARAM, "fp32"), ("e", Role.EMA, "fp32"), ("h", Role.AMP_COPY, "fp16"),
                           ("g", Role.GRAD, "fp32"), ("m", Role.MOMENT1, "fp32"), ("v", Role.MOMENT2, "fp32")):
        a.add(name, (300,), dt, Region(role, FC_W))
    for name, n, dt, region in (("lr", 1, "fp32", SCALAR_FP32), ("scale", 1, "fp32", SCALAR_FP32),
                                ("divisor", 1, "fp32", SCALAR_FP32), ("norm", 1, "fp32", SCALAR_FP32),
                                ("flag", 1, "int32", SCALAR_INT32), ("step", 1, "int32", SCALAR_INT32)):
        a.add(name, (n,), dt, region)
    lay = a.layout()
    w, n = Span.of(Role.PARAM), lay.region_bytes(Region(Role.PARAM, FC_W)) // 4
    opt = op("range_optimizer", w=w, g=Span.of(Role.GRAD), m=Span.of(Role.MOMENT1), v=Span.of(Role.MOMENT2),
             lr=a["lr"], flag=a["flag"], grad_scale=a["scale"], step=a["step"], rule="adamw", weight_decay=0.01)
    name, ptrs, ints, floats = build(opt, lay)
    assert name == "range_optimizer" and set(ptrs) == {"w", "g", "m", "v", "lr", "flag", "grad_scale", "step"}
    assert ints["n"] == n and floats["weight_decay"] == pytest.approx(0.01)
    _, _, ints, _ = build(op("range_cast", src=w, dst=Span.of(Role.AMP_COPY), src_dtype=DType.FP32,
                             dst_dtype=DType.FP16), lay)
    assert ints["n"] == n
    _, _, ints, floats = build(op("range_ema", src=w, dst=Span.of(Role.EMA), flag=a["flag"], decay=0.9), lay)
    assert ints["n"] == n and floats["decay"] == pytest.approx(0.9)
    _, _, ints, _ = build(op("range_copy", src=w, dst=Span.of(Role.EMA)), lay)
    assert ints["nbytes"] == 4 * n
    clip = op("clip_grad_norm", g=Span.of(Role.GRAD), scale=a["scale"], flag=a["flag"], divisor=a["divisor"],
              norm=a["norm"], max_norm=2.5)
    name, ptrs, ints, floats = build(clip, lay)
    assert name == "clip_grad_norm" and set(ptrs) == {"g", "scale", "flag", "divisor", "norm"}
    assert ints["n"] == n and floats["max_norm"] == 2.5
    _ARENAS.append(a)
    zero = op("clip_grad_norm", **{**clip.args, "max_norm": 0.0})
    assert refusal("cuda", zero) == refusal("cpu", zero) == "attribute 'max_norm' = 0.0 must be a finite number > 0"
    bad = op("range_optimizer", w=w, g=Span.of(Role.GRAD), lr=a["lr"], flag=a["flag"],
             grad_scale=a["scale"], rule="momentum")
    assert refusal("cuda", bad) == refusal("cpu", bad) == "rule 'momentum' needs argument 'm'"
    short = op("range_ema", src=w, dst=Span.of(Role.AMP_COPY), decay=0.5)
    assert refusal("cuda", short) == refusal("cpu", short)


def test_copy_dropout_and_scalar_builders():
    a = arena(("x", (4, 2, 2, 3), "fp16"), ("f", (4, 1, 1, 12), "fp16"), ("wide", (4, 2, 2, 4), "fp16"),
              ("mask", (48,), "int8"), ("seed", (2,), "int32"), ("acc", (4, 2, 2, 3), "fp32"),
              ("step", (1,), "int32"), ("table", (10,), "fp32"), ("lr", (1,), "fp32"), ("flag", (1,), "int32"),
              ("count", (1,), "int32"), ("scale", (1,), "fp32"), ("tracker", (1,), "int32"))
    assert build(op("copy", x=a["x"], y=a["x"]))[2] == {"nbytes": 96}
    assert build(op("accumulate", x=a["x"], y=a["acc"]))[2]["n"] == 48
    assert build(op("flatten_fwd", x=a["x"], y=a["f"]))[2] == {"nbytes": 96}
    assert build(op("flatten_bwd", dy=a["f"], dx=a["x"]))[2] == {"nbytes": 96}
    ints = build(op("channel_pad_fwd", x=a["x"], y=a["wide"]))[2]
    assert (ints["rows"], ints["src_cols"], ints["dst_cols"], ints["cols"], ints["esize"]) == (16, 3, 4, 3, 2)
    assert build(op("dropout_fwd", x=a["x"], y=a["x"], mask=a["mask"], seed=a["seed"], p=0.25))[3] == {"p": 0.25}
    assert build(op("dropout_bwd", dy=a["x"], mask=a["mask"], dx=a["x"], p=0.25))[2]["n"] == 48
    assert build(op("scalar_increment", x=a["step"]))[2]["n"] == 1
    assert build(op("lr_lookup", table=a["table"], step=a["step"], lr=a["lr"]))[2]["len"] == 10
    assert build(op("count_flag", flag=a["flag"], count=a["count"]))[0] == "count_flag"
    ints = build(op("loss_scale_update", flag=a["flag"], scale=a["scale"], tracker=a["tracker"], rule="dynamic",
                    growth_interval=7))[2]
    assert (ints["dynamic"], ints["growth_interval"]) == (1, 7)
    assert build(op("loss_scale_update", flag=a["flag"], scale=a["scale"], rule="static"))[2]["dynamic"] == 0


def test_drop_path_and_attention_dropout_builders():
    """Stochastic depth passes its samples and their size; attention passes its dropout with the stream and the
    layer's key, and without dropout neither (dropout 0 in BF16: cuDNN's SDPA op)."""
    a = arena(("x", (4, 1, 5, 8), "fp16"), ("y", (4, 1, 5, 8), "fp16"), ("mask", (4, 1, 1, 1), "int8"),
              ("seed", (2,), "int32"), ("key", (2,), "int32"), ("qkv", (4, 1, 5, 24), "bf16"),
              ("o", (4, 1, 5, 8), "bf16"), ("do", (4, 1, 5, 8), "bf16"), ("stats", (4, 1, 2, 5), "fp32"),
              ("dqkv", (4, 1, 5, 24), "bf16"))
    name, ptrs, ints, floats = build(op("drop_path_fwd", x=a["x"], y=a["y"], mask=a["mask"], seed=a["seed"], p=0.2))
    assert name == "drop_path_fwd" and set(ptrs) == {"x", "y", "mask", "seed"}
    assert (ints["n"], ints["per_sample"], ints["mask_dt"], floats) == (4, 40, DType.INT8.code, {"p": 0.2})
    name, ptrs, ints, _ = build(op("drop_path_bwd", dy=a["y"], mask=a["mask"], dx=a["y"], p=0.2))
    assert name == "drop_path_bwd" and ptrs["dx"] == ptrs["dy"] and ints["per_sample"] == 40
    t = {k: a[k] for k in ("qkv", "stats", "seed", "key")}
    _, ptrs, ints, floats = build(op("attention_fwd", y=a["o"], heads=2, scale=0.5, dropout=0.1, **t))
    assert set(ptrs) == {"qkv", "y", "stats", "seed", "key"} and floats == {"scale": 0.5, "dropout": 0.1}
    name, ptrs, _, floats = build(op("attention_fwd", qkv=a["qkv"], y=a["o"], stats=a["stats"], heads=2, scale=0.5))
    # BF16 without dropout: cuDNN's SDPA op, which has no dropout (tr's masks are tr's Philox bits)
    assert name == "attention_sdpa_fwd" and set(ptrs) == {"qkv", "y", "stats"} and "dropout" not in floats
    _, ptrs, ints, floats = build(op("attention_bwd", qkv=a["qkv"], y=a["o"], dy=a["do"], stats=a["stats"],
                                     dqkv=a["dqkv"], key=a["key"], heads=2, scale=0.5, dropout=0.1))
    assert "key" in ptrs and "seed" not in ptrs and ints["key_dt"] == DType.INT32.code and floats["dropout"] == 0.1


def test_pool_and_activation_builders():
    a = arena(("x", (2, 6, 6, 4), "fp16"), ("y", (2, 3, 3, 4), "fp16"), ("mask", (2, 3, 3, 4), "int8"),
              ("g", (2, 1, 1, 4), "fp16"), ("amask", (2, 6, 6, 4), "int8"), ("x2", (2, 6, 6, 4), "fp16"))
    ints = build(op("maxpool_fwd", x=a["x"], y=a["y"], mask=a["mask"], kernel=3, stride=2, padding=1))[2]
    assert (ints["kh"], ints["sh"], ints["ph"], ints["p"], ints["mask_dt"]) == (3, 2, 1, 3, DType.INT8.code)
    assert build(op("maxpool_bwd", dy=a["y"], mask=a["mask"], dx=a["x"], kernel=3, stride=2, padding=1))[2]["q"] == 3
    assert build(op("avgpool_fwd", x=a["x"], y=a["y"], kernel=2, stride=2))[2]["kw"] == 2
    assert build(op("gap_fwd", x=a["x"], y=a["g"]))[2] == {"n": 2, "hw": 36, "c": 4, "x_dt": 1, "y_dt": 1}
    name, ptrs, ints, _ = build(op("act_fwd", x=a["x"], y=a["x2"], mask=a["amask"], kind="relu"))
    assert "mask" in ptrs and ints["n"] == 288
    _, ptrs, ints, _ = build(op("act_bwd", x=a["x"], dy=a["x2"], dx=a["x2"], kind="gelu"))
    assert "mask" not in ptrs and ints["kind"] > 0


BAD = [
    ("fc: w's inputs", lambda: (lambda a: op("fc_fwd", x=a["x"], w=a["w"], y=a["y"]))(
        arena(("x", (4, 1, 1, 6), "fp32"), ("w", (3, 1, 1, 5), "fp32"), ("y", (4, 1, 1, 3), "fp32")))),
    ("fc: one input dtype", lambda: (lambda a: op("fc_fwd", x=a["x"], w=a["w"], y=a["y"]))(
        arena(("x", (4, 1, 1, 6), "fp32"), ("w", (3, 1, 1, 6), "fp16"), ("y", (4, 1, 1, 3), "fp32")))),
    ("fc_bwd: dx's shape", lambda: (lambda a: op("fc_bwd", x=a["x"], w=a["w"], dy=a["dy"], dw=a["dw"], dx=a["dx"]))(
        arena(("x", (4, 1, 1, 6), "fp32"), ("w", (3, 1, 1, 6), "fp32"), ("dy", (4, 1, 1, 3), "fp32"),
              ("dw", (3, 1, 1, 6), "fp32"), ("dx", (4, 1, 1, 5), "fp32")))),
    ("add: shapes", lambda: (lambda a: op("add_fwd", a=a["a"], b=a["b"], y=a["a"]))(
        arena(("a", (4, 2, 2, 3), "fp32"), ("b", (4, 2, 2, 2), "fp32")))),
    ("conv: weight channels", lambda: (lambda a: op("conv_fwd", x=a["x"], w=a["w"], y=a["y"]))(
        arena(("x", (2, 5, 5, 4), "fp32"), ("w", (8, 3, 3, 3), "fp32"), ("y", (2, 3, 3, 8), "fp32")))),
    ("conv: groups", lambda: (lambda a: op("conv_fwd", x=a["x"], w=a["w"], y=a["y"], groups=3))(
        arena(("x", (2, 5, 5, 4), "fp32"), ("w", (6, 3, 3, 2), "fp32"), ("y", (2, 3, 3, 6), "fp32")))),
    ("scale: factors", lambda: (lambda a: op("scale_fwd", x=a["x"], s=a["s"], y=a["y"]))(
        arena(("x", (2, 4, 4, 3), "fp32"), ("s", (2, 4, 4, 3), "fp32"), ("y", (2, 4, 4, 3), "fp32")))),
    ("softmax: labels", lambda: (lambda a: op("softmax_ce_fwd", logits=a["z"], labels=a["l"], probs=a["p"],
                                              result=a["r"]))(
        arena(("z", (4, 1, 1, 10), "fp32"), ("p", (4, 1, 1, 10), "fp32"), ("l", (3,), "int32"),
              ("r", (3,), "fp32")))),
    ("dropout: p", lambda: (lambda a: op("dropout_bwd", dy=a["d"], mask=a["m"], dx=a["d"], p=1.0))(
        arena(("d", (8,), "fp32"), ("m", (8,), "int8")))),
    ("drop_path: p", lambda: (lambda a: op("drop_path_bwd", dy=a["d"], mask=a["m"], dx=a["d"], p=1.0))(
        arena(("d", (2, 1, 1, 4), "fp32"), ("m", (2, 1, 1, 1), "int8")))),
    ("drop_path: a byte a sample", lambda: (lambda a: op("drop_path_bwd", dy=a["d"], mask=a["m"], dx=a["d"], p=0.1))(
        arena(("d", (2, 1, 1, 4), "fp32"), ("m", (2, 1, 1, 4), "int8")))),
    ("attention: dropout's key", lambda: (lambda a: op("attention_bwd", qkv=a["q"], y=a["y"], dy=a["y"],
                                                       stats=a["s"], dqkv=a["g"], heads=2, scale=0.5, dropout=0.2))(
        arena(("q", (2, 1, 5, 24), "fp32"), ("y", (2, 1, 5, 8), "fp32"), ("s", (2, 1, 2, 5), "fp32"),
              ("g", (2, 1, 5, 24), "fp32")))),
    ("copy: no cast", lambda: (lambda a: op("copy", x=a["x"], y=a["y"]))(
        arena(("x", (8,), "fp32"), ("y", (8,), "fp16")))),
    ("loss scale: tracker", lambda: (lambda a: op("loss_scale_update", flag=a["f"], scale=a["s"], rule="dynamic"))(
        arena(("f", (1,), "int32"), ("s", (1,), "fp32")))),
    ("pool: channels", lambda: (lambda a: op("avgpool_fwd", x=a["x"], y=a["y"], kernel=2, stride=2))(
        arena(("x", (2, 4, 4, 3), "fp32"), ("y", (2, 2, 2, 4), "fp32")))),
    ("activation: kind", lambda: (lambda a: op("act_fwd", x=a["x"], y=a["y"], kind="swish2"))(
        arena(("x", (8,), "fp32"), ("y", (8,), "fp32")))),
]


@pytest.mark.parametrize("what, make", BAD, ids=[b[0] for b in BAD])
def test_both_backends_refuse_a_bad_call_with_one_message(what, make):
    call = make()
    cuda, cpu = refusal("cuda", call), refusal("cpu", call)
    assert cuda == cpu, (cuda, cpu)


def test_a_grouped_conv_reaches_the_cuda_builder_with_its_groups():
    """groups > 1 goes to the native conv with the group count (cuDNN or the direct kernels take it); the CPU
    backend takes the same call."""
    a = arena(("x", (2, 5, 5, 4), "fp32"), ("w", (4, 3, 3, 1), "fp32"), ("y", (2, 3, 3, 4), "fp32"))
    call = op("conv_fwd", x=a["x"], w=a["w"], y=a["y"], groups=4)
    name, _, ints, _ = build(call)
    assert name == "conv_fwd" and ints["groups"] == 4 and ints["c"] == 4 and ints["k"] == 4
    _ARENAS[-1].allocate().capture("g", [call])  # the CPU backend takes it
    b = arena(("x", (2, 5, 5, 4), "fp32"), ("w", (6, 3, 3, 4), "fp32"), ("y", (2, 3, 3, 6), "fp32"))
    assert build(op("conv_fwd", x=b["x"], w=b["w"], y=b["y"]))[2]["groups"] == 1


def test_scale_builders_pass_the_geometry_and_dx_only_when_given():
    """squeeze-excitation's join: (N, H*W, C) from the shared rule, every tensor with its dtype code."""
    a = arena(("x", (2, 4, 5, 3), "fp16"), ("s", (2, 1, 1, 3), "fp32"), ("y", (2, 4, 5, 3), "fp16"),
              ("ds", (2, 1, 1, 3), "fp32"), ("dx", (2, 4, 5, 3), "fp16"))
    name, ptrs, ints, _ = build(op("scale_fwd", x=a["x"], s=a["s"], y=a["y"]))
    assert name == "scale_fwd" and set(ptrs) == {"x", "s", "y"}
    assert ints == {"n": 2, "hw": 20, "c": 3, "x_dt": 1, "s_dt": 0, "y_dt": 1}
    name, ptrs, ints, _ = build(op("scale_bwd", x=a["x"], s=a["s"], dy=a["y"], ds=a["ds"], dx=a["dx"]))
    assert name == "scale_bwd" and set(ptrs) == {"x", "s", "dy", "ds", "dx"} and (ints["hw"], ints["ds_dt"]) == (20, 0)
    _, ptrs, _, _ = build(op("scale_bwd", x=a["x"], s=a["s"], dy=a["y"], ds=a["ds"]))
    assert "dx" not in ptrs


def test_fc_relu_mask_reaches_both_native_fc_ops():
    """The relu mask (fc_fwd's output, fc_bwd's input: the DRELU fusion) passes its address and dtype."""
    a = arena(("x", (8, 1, 1, 12), "fp16"), ("w", (200, 1, 1, 12), "fp16"), ("y", (8, 1, 1, 200), "fp16"),
              ("m", (8, 1, 1, 32), "int8"), ("w2", (5, 1, 1, 200), "fp16"), ("dy", (8, 1, 1, 5), "fp16"),
              ("dw", (5, 1, 1, 200), "fp32"), ("dx", (8, 1, 1, 200), "fp16"))
    _, ptrs, ints, _ = build(op("fc_fwd", x=a["x"], w=a["w"], y=a["y"], mask=a["m"], activation="relu"))
    assert ptrs["mask"] == _Backend.arena_ptr + a["m"].offset
    assert ints["mask_dt"] == DType.INT8.code and ints["epilogues"] in (0, 1)
    _, ptrs, ints, _ = build(op("fc_bwd", x=a["y"], w=a["w2"], dy=a["dy"], dw=a["dw"], dx=a["dx"], mask=a["m"]))
    assert ptrs["mask"] == _Backend.arena_ptr + a["m"].offset and (ints["k"], ints["o"]) == (200, 5)


def test_resident_builders_pass_sizes_and_the_ranks_deal():
    a = arena(("key", (1, 1, 1, 2), "int32"), ("order", (1000, 1, 1, 1), "int32"), ("pos", (1, 1, 1, 1), "int32"),
              ("labels_all", (1000, 1, 1, 1), "int32"), ("rank", (1, 1, 1, 1), "int32"),
              ("index", (96, 1, 1, 1), "int32"), ("labels", (96,), "int32"))
    name, ptrs, ints, _ = build(op("shuffle_order", key=a["key"], order=a["order"], pos=a["pos"], shuffle=True))
    assert name == "shuffle_order" and set(ptrs) == {"key", "order", "pos"}
    assert (ints["n"], ints["shuffle"]) == (1000, 1)
    name, ptrs, ints, _ = build(op("batch_select", order=a["order"], labels_all=a["labels_all"], rank=a["rank"],
                                   pos=a["pos"], index=a["index"], labels=a["labels"], world=3, pad=False))
    assert set(ptrs) == {"order", "labels_all", "rank", "pos", "index", "labels"}
    assert (ints["n"], ints["rows"], ints["world"], ints["pad"]) == (1000, 96, 3, 0)
    _, ptrs, _, _ = build(op("batch_select", labels_all=a["labels_all"], rank=a["rank"], pos=a["pos"],
                             index=a["index"], labels=a["labels"]))
    assert "order" not in ptrs  # validation: positions, no order
    assert build(op("batch_restart", pos=a["pos"]))[0] == "batch_restart"


def test_the_fake_backend_builds_from_addresses_not_memory():
    a = arena(("x", (2, 1, 1, 4), "fp32"), ("w", (3, 1, 1, 4), "fp32"), ("y", (2, 1, 1, 3), "fp32"))
    _, ptrs, _, _ = build(op("fc_fwd", x=a["x"], w=a["w"], y=a["y"]))
    assert np.array_equal(sorted(ptrs.values()), sorted(_Backend.arena_ptr + a[k].offset for k in ("x", "w", "y")))
