"""EMA in the compiled plan: EMA regions only with EMA, mirroring the PARAM ones, and the EMA parts and steps
(tr.graph.ema)."""

import pytest
from tr_graph_testlib import by_name, mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.memory import Region, Role, Span
from tr.graph.blueprint import bn, cbr, conv, fc, gap, seq
from tr.graph.compiler import compile_program
from tr.graph.layers.groups import BN_B, BN_W, DEEP_CONV, FC_B, FC_W, FIRST_CONV
from tr.graph.steps import Part as P

MODEL = seq(cbr(16, 3, p=1), conv(16, 3, p=1), bn(), gap(), fc(4))
PARAM_GROUPS = [BN_B, BN_W, FC_B, FC_W, FIRST_CONV, DEEP_CONV]  # in layout order
FP16_GROUPS = [FC_W, FIRST_CONV, DEEP_CONV]  # the decayed groups with an FP16 working copy
EMA_STEPS = {"ema_prepare", "ema_start", "sema_switch", "val_ema_a", "val_ema_b", "val_ema_last_a", "val_ema_last_b"}
TRAIN_STEPS = ("train_a", "train_b", "train_last_a", "train_last_b")


def _roles(p, role):
    return [r for r in p.layout.regions if r.role is role]


def _plan(amp: bool, ema: float | None):
    return compile_program(MODEL, mlp_spec(input_shape=(8, 8, 3), num_classes=4, amp=amp, ema_decay=ema))


@pytest.mark.parametrize("amp", [False, True])
def test_e_regions_only_with_ema_and_mirror_w(amp):
    off = _plan(amp, None)
    assert not _roles(off, Role.EMA) and not _roles(off, Role.EMA_FP16)
    assert not EMA_STEPS & set(off.steps)
    ema_parts = {x.value for x in (P.EMA_UPDATE, P.PREPARE_EMA, P.EMA_START, P.SEMA_SWITCH, P.INFER_EMA_A,
                                   P.INFER_EMA_B)}
    assert not any(c.part in ema_parts for step in off.steps.values() for c in step.calls)
    p = _plan(amp, 0.99)
    assert EMA_STEPS <= set(p.steps)
    t = by_name(p)
    assert _roles(p, Role.PARAM) == [Region(Role.PARAM, g) for g in PARAM_GROUPS]
    assert _roles(p, Role.EMA) == [Region(Role.EMA, g) for g in PARAM_GROUPS]
    w_base, e_base = p.layout.regions[Region(Role.PARAM, BN_B)][0], p.layout.regions[Region(Role.EMA, BN_B)][0]
    for w in _roles(p, Role.PARAM):
        e = Region(Role.EMA, w.group)
        assert p.layout.region_bytes(e) == p.layout.region_bytes(w) > 0
        assert p.layout.regions[e][0] - e_base == p.layout.regions[w][0] - w_base
    for name in ("L0.w", "L0.gamma", "L1.w", "L2.beta", "L4.w", "L4.b"):
        assert t[name + ".ema"].offset - e_base == t[name].offset - w_base
        assert t[name + ".ema"].shape == t[name].shape
    assert _roles(p, Role.EMA_FP16) == ([Region(Role.EMA_FP16, g) for g in FP16_GROUPS] if amp else [])
    assert all(p.layout.region_bytes(r) > 0 for r in _roles(p, Role.EMA_FP16))
    (upd,) = part_calls(p, "train_a", P.EMA_UPDATE)
    assert all(part_calls(p, name, P.EMA_UPDATE) == (upd,) for name in TRAIN_STEPS)
    # after the optimizer, in the step's last branch
    tail = p.step("train_last_b").branches[-1].calls
    assert tail.index(upd) > max(tail.index(c) for c in part_calls(p, "train_last_b", P.OPTIMIZER))
    assert upd.op == "range_ema" and upd.attrs["decay"] == 0.99 and upd.args["flag"].name == "nan_flag"
    assert upd.args["src"] == Span.of(Role.PARAM) and upd.args["dst"] == Span.of(Role.EMA)
    assert p.layout.span(upd.args["src"]) == (w_base, p.layout.regions[Region(Role.PARAM, DEEP_CONV)][1])
    assert p.layout.span(upd.args["dst"]) == (e_base, p.layout.regions[Region(Role.EMA, DEEP_CONV)][1])
    (start,) = p.step("ema_start").calls
    (switch,) = p.step("sema_switch").calls
    assert (start.op, start.part, switch.op, switch.part) == ("range_copy", "ema_start", "range_copy", "sema_switch")
    assert (start.args["src"], start.args["dst"]) == (switch.args["dst"], switch.args["src"]) == (upd.args["src"],
                                                                                                  upd.args["dst"])
    assert start.args["flag"] is None and switch.args["flag"] is None  # unconditional, unlike the update
    prep = p.step("ema_prepare").calls
    assert prep == part_calls(p, "ema_prepare", P.PREPARE_EMA)
    assert [c.op for c in prep] == ["bn_update_eq", "bn_update_eq"] + (["range_cast"] if amp else [])
    assert prep[0].args["gamma"].name == "L0.gamma.ema" and prep[0].args["mean"].name == "L0.prev_mean"
    if amp:
        cast = prep[-1]
        assert cast.attrs["dst_dtype"] == DType.FP16 and cast.args["dst"] == Span.of(Role.EMA_FP16)
        assert cast.args["src"] == Span.of(Role.EMA, decayed=True, amp_copy=True)
        assert p.layout.span(cast.args["dst"]) == (p.layout.regions[Region(Role.EMA_FP16, FC_W)][0],
                                                   p.layout.regions[Region(Role.EMA_FP16, DEEP_CONV)][1])
        assert p.layout.span(cast.args["src"]) == (p.layout.regions[Region(Role.EMA, FC_W)][0],
                                                   p.layout.regions[Region(Role.EMA, DEEP_CONV)][1])


@pytest.mark.parametrize("amp", [False, True])
def test_ema_inference_reads_the_twins(amp):
    p = _plan(amp, 0.9)
    for last in ("", "last_"):
        for ab, main, ema in (("a", P.INFER_A, P.INFER_EMA_A), ("b", P.INFER_B, P.INFER_EMA_B)):
            a, b = part_calls(p, f"val_{last}{ab}", main), part_calls(p, f"val_ema_{last}{ab}", ema)
            assert [c.op for c in a] == [c.op for c in b] and a
            # the same metric sum after it (the last batch's weighted by its own size)
            metrics = (P.ACCUM_METRICS_VAL_LAST if last else P.ACCUM_METRICS).value
            assert [c.part for c in p.step(f"val_ema_{last}{ab}").calls] == [ema.value] * len(b) + [metrics]
            assert p.step(f"val_ema_{last}{ab}").calls[-1] == p.step(f"val_{last}{ab}").calls[-1]
            for ca, cb in zip(a, b):
                for k, x in ca.args.items():
                    y = cb.args[k]
                    if x is None or x.region.role not in (Role.PARAM, Role.AMP_COPY):  # folded BN too
                        assert y == x
                    elif x.region == Region(Role.AMP_COPY, FC_B):  # FP16 biases have no EMA twin: the FP32 one
                        assert y.name == x.name.removesuffix(".fp16") + ".ema" and y.region == Region(Role.EMA, FC_B)
                    elif x.region.role is Role.AMP_COPY:
                        assert y.name == x.name.removesuffix(".fp16") + ".ema16"
                        assert y.region == Region(Role.EMA_FP16, x.region.group) and x.region.group in FP16_GROUPS
                    else:
                        assert y.name == x.name + ".ema" and y.region == Region(Role.EMA, x.region.group)


@pytest.mark.parametrize("decay", [0, 1, 1.5, -0.1, True, "0.9"])
def test_bad_decay(decay):
    with pytest.raises(ConfigError, match="ema decay must be a number in"):
        mlp_spec(ema_decay=decay)
