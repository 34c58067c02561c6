"""EMA in the compiled plan: EMA regions only with EMA, mirroring the PARAM ones, and the EMA graphs (tr.graph.ema)."""

import pytest
from tr_graph_testlib import by_name, mlp_spec

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.graph_id import GraphId as G
from tr.core.memory import Region, Role, Span
from tr.graph.blueprint import bn, cbr, conv, fc, gap, seq
from tr.graph.compiler import compile_program
from tr.graph.layers.groups import BN_B, BN_W, DEEP_CONV, FC_B, FC_W, FIRST_CONV

MODEL = seq(cbr(16, 3, p=1), conv(16, 3, p=1), bn(), gap(), fc(4))
PARAM_GROUPS = [BN_B, BN_W, FC_B, FC_W, FIRST_CONV, DEEP_CONV]  # in layout order
FP16_GROUPS = [FC_W, FIRST_CONV, DEEP_CONV]  # the decayed groups with an FP16 working copy


def _roles(p, role):
    return [r for r in p.layout.regions if r.role is role]


def _plan(amp: bool, ema: float | None):
    return compile_program(MODEL, mlp_spec(input_shape=(8, 8, 3), num_classes=4, amp=amp, ema_decay=ema))


@pytest.mark.parametrize("amp", [False, True])
def test_e_regions_only_with_ema_and_mirror_w(amp):
    off = _plan(amp, None)
    assert not _roles(off, Role.EMA) and not _roles(off, Role.EMA_FP16)
    assert not any(off.calls("train", g) for g in (G.EMA_UPDATE, G.CAST_EMA_FP32_TO_FP16))
    p = _plan(amp, 0.99)
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
    (upd,) = p.calls("any", G.EMA_UPDATE)
    assert upd.op == "range_ema" and upd.attrs["decay"] == 0.99 and upd.args["flag"].name == "nan_flag"
    assert upd.args["src"] == Span.of(Role.PARAM) and upd.args["dst"] == Span.of(Role.EMA)
    assert p.layout.span(upd.args["src"]) == (w_base, p.layout.regions[Region(Role.PARAM, DEEP_CONV)][1])
    assert p.layout.span(upd.args["dst"]) == (e_base, p.layout.regions[Region(Role.EMA, DEEP_CONV)][1])
    prep = p.calls("any", G.CAST_EMA_FP32_TO_FP16)
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
    for v in ("val", "val_last"):
        for main, ema in ((G.INF_MAIN_A, G.INF_EMA_A), (G.INF_MAIN_B, G.INF_EMA_B)):
            a, b = p.calls(v, main), p.calls(v, ema)
            assert [c.op for c in a] == [c.op for c in b] and a
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
