"""The seed's DSL layers tr adds: channel_padding() (C -> ceil8, emitted as channel_pad_fwd, and channel_pad_bwd
where an input gradient is needed; as the first layer it has none, as the seed's first-layer backward is a
no-op), cbrp() and gap_fc()."""

import pytest
from tr_graph_testlib import mlp_spec, part_calls

from tr.core.errors import CompileError
from tr.core.shape import Shape
from tr.graph import ArchPlan, bn, channel_padding, compile_program, conv, fc, gap, relu, seq
from tr.graph.steps import Part as P


def test_shapes_and_ops_as_the_first_layer():
    m = seq(channel_padding(), conv(16, 3, 1, 1), bn(), relu(), gap(), fc(10))
    plan = ArchPlan.from_blueprint(m, (8, 8, 3), 10)
    assert [L.kind for L in plan.layers][:2] == ["channel_pad", "cbr"] and plan.shapes[0] == Shape(1, 8, 8, 8)
    for amp in (False, True):
        p = compile_program(m, mlp_spec(input_shape=(8, 8, 3), num_classes=10, batch=4, amp=amp))
        assert [c.op for c in part_calls(p, "train_a", P.FIRST_FWD_A)] == ["copy", "channel_pad_fwd"]
        assert part_calls(p, "train_a", P.FIRST_BWD_A) == ()  # nothing upstream is trained
        deep = part_calls(p, "train_a", P.DEEP_FWD_BWD)
        conv_bwd = next(c for c in deep if c.op == "conv_bwd")
        assert conv_bwd.args["dx"] is None  # wgrad only: the padding needs no gradient
        assert part_calls(p, "val_a", P.INFER_A)[0].op == "channel_pad_fwd"


def test_padding_inside_a_network_has_a_backward_and_other_multiples():
    m = seq(conv(5, 3, 1, 1), channel_padding(4), conv(6, 1), gap(), fc(3))
    plan = ArchPlan.from_blueprint(m, (6, 6, 3), 3)
    assert plan.shapes[1] == Shape(1, 6, 6, 8)
    p = compile_program(m, mlp_spec(input_shape=(6, 6, 3), num_classes=3, batch=2))
    assert "channel_pad_bwd" in [c.op for c in part_calls(p, "train_a", P.DEEP_FWD_BWD)]


@pytest.mark.parametrize("bad", [0, -8, 2.5, True])
def test_a_bad_multiple_is_named(bad):
    with pytest.raises(CompileError, match="multiple"):
        ArchPlan.from_blueprint(seq(channel_padding(bad), fc(3)), (2, 2, 3), 3)


def test_cbrp_is_one_pooling_cbr_and_gap_fc_its_two_layers():
    """The seed's cbrp(out, ck, cs, cp, pk, ps, pp) and gap_fc(out): cbrp fuses into one cbr that pools in its
    BN kernels, as cbr + maxpool does; gap_fc is gap then fc."""
    from tr.graph import cbr, cbrp, gap_fc, maxpool

    a = ArchPlan.from_blueprint(seq(cbrp(8, 3, 1, 1, 3, 2, 1), gap_fc(5)), (16, 16, 3), 5)
    b = ArchPlan.from_blueprint(seq(cbr(8, 3, 1, 1), maxpool(3, 2, 1), gap(), fc(5)), (16, 16, 3), 5)
    assert [(L.kind, dict(L.params)) for L in a.layers] == [(L.kind, dict(L.params)) for L in b.layers]
    assert [L.kind for L in a.layers] == ["cbr", "gap", "fc", "softmax_ce"] and a.layers[0].params["pool"] == (3, 2, 1)
    assert a.shapes[0] == Shape(1, 8, 8, 8)
