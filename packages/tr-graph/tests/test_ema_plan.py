"""EMA in the compiled plan: E_* regions only with EMA, mirroring W_*, and the EMA graphs (tr.graph.ema)."""

import pytest
from tr_graph_testlib import by_name, mlp_spec

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.graph_id import GraphId as G
from tr.core.region import Region as R
from tr.core.region import region_range
from tr.graph.blueprint import bn, cbr, conv, fc, gap, seq
from tr.graph.compiler import compile_program

MODEL = seq(cbr(16, 3, p=1), conv(16, 3, p=1), bn(), gap(), fc(4))
E_FP32 = region_range(R.E_BN_BIAS, R.E_DEEP_CONV)
E_FP16 = region_range(R.E_FC_WEIGHT_FP16, R.E_DEEP_CONV_FP16)


def _plan(amp: bool, ema: float | None):
    return compile_program(MODEL, mlp_spec(input_shape=(8, 8, 3), num_classes=4, amp=amp, ema_decay=ema))


@pytest.mark.parametrize("amp", [False, True])
def test_e_regions_only_with_ema_and_mirror_w(amp):
    off = _plan(amp, None)
    assert all(off.layout.region_bytes(r) == 0 for r in E_FP32 + E_FP16)
    assert not any(off.calls("train", g) for g in (G.EMA_UPDATE, G.CAST_EMA_FP32_TO_FP16))
    p = _plan(amp, 0.99)
    t = by_name(p)
    w_base, e_base = p.layout.regions[R.W_BN_BIAS][0], p.layout.regions[R.E_BN_BIAS][0]
    for w in region_range(R.W_BN_BIAS, R.W_DEEP_CONV):
        e = R(w + 6)
        assert p.layout.region_bytes(e) == p.layout.region_bytes(w) > 0
        assert p.layout.regions[e][0] - e_base == p.layout.regions[w][0] - w_base
    for name in ("L0.w", "L0.gamma", "L1.w", "L2.beta", "L4.w", "L4.b"):
        assert t[name + ".ema"].offset - e_base == t[name].offset - w_base
        assert t[name + ".ema"].shape == t[name].shape
    assert all((p.layout.region_bytes(r) > 0) == amp for r in E_FP16)
    (upd,) = p.calls("any", G.EMA_UPDATE)
    assert upd.op == "range_ema" and upd.attrs["decay"] == 0.99 and upd.args["flag"].name == "nan_flag"
    assert (upd.args["src"].first, upd.args["src"].last) == (R.W_BN_BIAS, R.W_DEEP_CONV)
    assert (upd.args["dst"].first, upd.args["dst"].last) == (R.E_BN_BIAS, R.E_DEEP_CONV)
    prep = p.calls("any", G.CAST_EMA_FP32_TO_FP16)
    assert [c.op for c in prep] == ["bn_update_eq", "bn_update_eq"] + (["range_cast"] if amp else [])
    assert prep[0].args["gamma"].name == "L0.gamma.ema" and prep[0].args["mean"].name == "L0.prev_mean"
    if amp:
        assert prep[-1].attrs["dst_dtype"] == DType.FP16 and prep[-1].args["dst"].first == R.E_FC_WEIGHT_FP16


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
                    if x is None or x.region.group not in "WA" or x.region in (R.W_EQ_BIAS, R.W_EQ_SCALE):
                        assert y == x
                    elif x.region is R.A_FC_BIAS:  # FP16 biases have no EMA twin: the FP32 EMA bias
                        assert y.name == x.name.removesuffix(".fp16") + ".ema" and y.region is R.E_FC_BIAS
                    elif x.region.group == "A":
                        assert y.name == x.name.removesuffix(".fp16") + ".ema16" and y.region in E_FP16
                    else:
                        assert y.name == x.name + ".ema" and y.region in E_FP32


@pytest.mark.parametrize("decay", [0, 1, 1.5, -0.1, True, "0.9"])
def test_bad_decay(decay):
    with pytest.raises(ConfigError, match="ema decay must be a number in"):
        mlp_spec(ema_decay=decay)
