import pytest

from tr.core.errors import CompileError
from tr.core.shape import Shape
from tr.graph.archplan import DATA, ArchLayer, params
from tr.graph.blueprint import (
    add2,
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
    softmax_ce,
)
from tr.graph.passes import (
    append_loss,
    build_layers,
    check_flatten,
    check_params,
    expand,
    fuse,
    infer_shapes,
    mark_first,
    name_bn,
    place_flatten,
    remove_identity,
    renumber,
    wire,
)


def kinds(layers):
    return [L.kind for L in layers]


def chain(*ks, **p):
    """A wired sequential list of layers of the given kinds."""
    out = []
    for i, k in enumerate(ks):
        out.append(ArchLayer(k, params(**p.get(k, {})), f"m[{i}]", i, (i - 1 if i else DATA,)))
    return out


def test_expand_composites():
    layers = expand(seq(cbr(8, 3, p=1), repeat(seq(fc(4), relu()), 2), add2(identity(), relu())), 3)
    assert kinds(layers) == ["conv", "bn", "act", "fc", "act", "fc", "act", "add2_begin", "identity", "add2_mid",
                             "act", "add2_end"]
    assert layers[3].origin == "model[1].rep0[0]" and layers[5].origin == "model[1].rep1[0]"
    assert [L.uid for L in layers] == list(range(len(layers)))


def test_expand_blocks_choose_their_shortcut():
    ident = expand(block("basic", 8), 8)
    assert kinds(ident) == ["add2_begin", "identity", "add2_mid", "conv", "bn", "act", "conv", "bn", "add2_end", "act"]
    proj = expand(block("bottleneck", 32, mid=8, stride=2), 16)
    assert kinds(proj)[:5] == ["add2_begin", "conv", "bn", "add2_mid", "conv"]
    assert proj[1].params["s"] == 2 and proj[1].params["k"] == 1
    assert [L.params["out"] for L in proj if L.kind == "conv"] == [32, 8, 8, 32]
    assert [L.params["s"] for L in proj if L.kind == "conv"] == [2, 1, 2, 1]  # stride on the 3x3 (v1.5)
    # channel change alone also needs a projection
    assert kinds(expand(block("basic", 16), 8))[1] == "conv"


def test_expand_rejects_empty_seq_and_bad_repeat():
    with pytest.raises(CompileError, match=r"layer 1 \(seq at model\[1\]\): empty seq"):
        expand(seq(fc(3), seq()), 3)
    with pytest.raises(CompileError, match=r"layer 1 \(repeat at model\[1\]\): times must be >= 1, got 0"):
        expand(seq(fc(3), repeat(relu(), 0)), 3)


@pytest.mark.parametrize("layer, msg", [
    (fc(0), "fc out must be >= 1, got 0"),
    (conv(8, -3), "conv kernel must be >= 1, got -3"),
    (conv(8, 3, s=0), "conv stride must be >= 1, got 0"),
    (conv(8, 3, p=-1), "conv padding must be >= 0, got -1"),
    (maxpool(3, 2, 2), "maxpool padding 2 must be at most half the kernel 3"),
    (dropout(1.0), r"dropout p must be in \[0, 1\), got 1.0"),
    (dropout(-0.1), r"dropout p must be in \[0, 1\)"),
    (bn(momentum=2.0), r"bn momentum must be in \[0, 1\]"),
    (bn(eps=0), "bn eps must be > 0"),
])
def test_check_params_names_the_layer(layer, msg):
    layers = expand(seq(relu(), layer), 3)
    with pytest.raises(CompileError, match=r"layer 1 \(.*at model\[1\]\): " + msg):
        check_params(layers)


def test_wire_resolves_residuals():
    layers = wire(expand(seq(fc(4), add2(seq(fc(4)), seq(relu(), fc(4)))), 3))
    assert kinds(layers) == ["fc", "fc", "act", "fc", "add"]
    fc0, short, act, stem, add = layers
    assert fc0.inputs == (DATA,) and short.inputs == (fc0.uid,) and act.inputs == (fc0.uid,)
    assert add.inputs == (short.uid, stem.uid)


def test_remove_identity_redirects_readers():
    layers = remove_identity(wire(expand(seq(fc(4), add2(identity(), relu()), dropout(0.0), relu()), 3)))
    assert kinds(layers) == ["fc", "act", "add", "act"]
    assert layers[2].inputs == (layers[0].uid, layers[1].uid)
    assert layers[3].inputs == (layers[2].uid,)


def test_check_flatten_rejects_spatial_after_flatten():
    layers = remove_identity(wire(expand(seq(conv(4, 3), flatten(), relu(), conv(4, 1)), 3)))
    with pytest.raises(CompileError, match=r"layer 3 \(conv 4 k1 s1 p0 at model\[3\]\): conv after flatten "
                                           r"\(layer 1\)"):
        check_flatten(layers)
    check_flatten(remove_identity(wire(expand(seq(conv(4, 3), flatten(), fc(3), bn()), 3))))


def test_name_bn():
    layers = name_bn(wire(expand(seq(conv(4, 3), bn(), relu(), gap(), bn(), fc(3), relu(), dropout(0.1), bn()), 3)))
    assert [L.kind for L in layers if L.kind.startswith("bn")] == ["bn2d", "bn1d", "bn1d"]


def test_append_loss():
    layers = append_loss(chain("fc", "act", fc={"out": 7}, act={"kind": "relu"}), 7)
    assert kinds(layers) == ["fc", "act", "softmax_ce"]
    assert layers[-1].params["classes"] == 7 and layers[-1].inputs == (1,)
    explicit = wire(expand(seq(fc(3), softmax_ce()), 2))
    assert kinds(append_loss(explicit, 3)) == ["fc", "softmax_ce"]
    with pytest.raises(CompileError, match="softmax_ce can only end the model"):
        append_loss(wire(expand(seq(softmax_ce(), fc(3)), 2)), 3)


def test_infer_shapes_and_kernel_errors():
    layers = chain("conv", "maxpool", "flatten", conv={"out": 8, "k": 3, "s": 1, "p": 1},
                   maxpool={"k": 2, "s": 2, "p": 0})
    shapes = infer_shapes(layers, Shape(2, 6, 6, 3))
    assert shapes[0] == Shape(2, 6, 6, 8) and shapes[1] == Shape(2, 3, 3, 8) and shapes[2] == Shape(2, 1, 1, 72)
    big = chain("conv", conv={"out": 8, "k": 5, "s": 1, "p": 0})
    with pytest.raises(CompileError, match=r"layer 0 \(conv 8 k5 s1 p0 .*\): conv kernel 5x5 is larger than its "
                                           r"input 3x3 \(padding 0\) in variant x"):
        infer_shapes(big, Shape(1, 3, 3, 1), " in variant x")


def test_infer_shapes_add_channel_mismatch():
    layers = wire(expand(seq(conv(8, 1), add2(identity(), conv(16, 1))), 3))
    layers = remove_identity(layers)
    with pytest.raises(CompileError, match=r"layer 2 \(add .*\): add2 channel mismatch: the shortcut gives 8 "
                                           r"channels but the stem gives 16"):
        infer_shapes(layers, Shape(1, 4, 4, 3))


def test_place_flatten():
    layers = remove_identity(wire(expand(seq(conv(3, 1), flatten(), fc(4), flatten(), fc(2)), 3)))
    shapes = infer_shapes(layers, Shape(1, 4, 4, 3))
    assert kinds(place_flatten(layers, shapes, amp=False)) == ["conv", "fc", "fc"]
    # AMP pads features to 8 channels: an FC reading 4x4x3 needs dense rows
    amp = place_flatten(layers, shapes, amp=True)
    assert kinds(amp) == ["conv", "flatten", "fc", "fc"] and amp[2].inputs == (amp[1].uid,)
    # the input is padded to 4: 28x28x1 data needs a flatten under AMP only
    mlp = remove_identity(wire(expand(seq(flatten(), fc(8)), 1)))
    s = infer_shapes(mlp, Shape(1, 28, 28, 1))
    assert kinds(place_flatten(mlp, s, amp=False)) == ["fc"]
    assert kinds(place_flatten(mlp, s, amp=True)) == ["flatten", "fc"]
    # a flatten feeding a BN is kept (BN1d over H*W*C features differs from BN2d over C)
    keep = name_bn(remove_identity(wire(expand(seq(conv(3, 1), flatten(), bn(), fc(2)), 3))))
    assert kinds(place_flatten(keep, infer_shapes(keep, Shape(1, 4, 4, 3)), amp=False)) == ["conv", "flatten",
                                                                                           "bn1d", "fc"]


def test_fuse():
    layers = name_bn(remove_identity(wire(expand(
        seq(cbr(8, 3, p=1), fc(4), relu(), add2(identity(), fc(4)), relu()), 3))))
    fp32 = fuse(layers, amp=False)
    assert [L.describe() for L in fp32] == ["cbr 8 k3 s1 p1+relu", "fc 4+relu", "fc 4", "add+relu"]
    amp = fuse(layers, amp=True)
    assert [L.kind for L in amp] == ["cbr", "fc", "fc", "add"]
    assert amp[0].params["momentum"] == 0.1 and amp[0].inputs == (DATA,) and not amp[0].params["residual"]
    assert amp[3].inputs == (amp[1].uid, amp[2].uid)
    # a relu whose input has another reader stays separate
    shared = remove_identity(wire(expand(seq(fc(4), add2(identity(), relu())), 3)))
    assert kinds(fuse(shared, amp=True)) == ["fc", "act", "add"]
    # conv -> bn -> add: the shortcut side is fused when the stem is not a conv+bn; a bn with two readers is not
    side = name_bn(remove_identity(wire(expand(seq(fc(4), add2(seq(conv(4, 1), bn()), relu())), 3))))
    got = fuse(side, amp=False)
    assert kinds(got) == ["fc", "act", "cbr"] and got[2].inputs == (side[0].uid, got[1].uid)
    assert got[2].params["residual"] and got[2].params["act"] is None


def test_mark_first_and_renumber():
    layers = mark_first(chain("conv", "act", conv={"out": 2, "k": 1, "s": 1, "p": 0}, act={"kind": "relu"}))
    assert layers[0].first and not layers[1].first
    with pytest.raises(CompileError, match="the first layer reads the input batch and must be one of"):
        mark_first(chain("act", "fc", act={"kind": "relu"}, fc={"out": 2, "bias": True}))
    reads_input = wire(expand(seq(add2(identity(), fc(3))), 3))
    with pytest.raises(CompileError):
        mark_first(remove_identity(reads_input))
    shuffled = [ArchLayer("fc", params(out=2, bias=True), "", 7, (DATA,)),
                ArchLayer("act", params(kind="relu"), "", 3, (7,))]
    assert [(L.uid, L.inputs) for L in renumber(shuffled)] == [(0, (DATA,)), (1, (0,))]


def test_build_layers_end_to_end():
    layers, shapes = build_layers(seq(cbr(8, 3, p=1), maxpool(2), block("basic", 8), gap(), fc(5)),
                                  Shape(1, 8, 8, 3), 5, amp=True)
    # the block's second conv, its BN, the join and the relu: one residual cbr reading (stem, shortcut)
    # the first cbr pools; the block's second conv, its BN, the join and the relu: one residual cbr
    assert kinds(layers) == ["cbr", "cbr", "cbr", "gap", "fc", "softmax_ce"]
    assert layers[0].params["pool"] == (2, 2, 0) and layers[0].describe() == "cbr 8 k3 s1 p1+relu+maxpool k2 s2 p0"
    assert layers[2].inputs == (1, 0) and layers[2].params["act"] == "relu" and layers[2].params["residual"]
    assert layers[2].describe() == "cbr 8 k3 s1 p1+add+relu"
    assert [L.uid for L in layers] == list(range(6))
    assert shapes[0] == Shape(1, 4, 4, 8) and shapes[-1] == Shape(1, 1, 1, 5)


def test_mbconv_expands_to_the_inverted_residual_and_efficientnets_block():
    from tr.graph.blueprint import mbconv

    plain = kinds(expand(seq(conv(16, 3), mbconv(6, 16)), 3))
    assert plain == ["conv", "add2_begin", "identity", "add2_mid", "conv", "bn", "act", "conv", "bn", "act", "conv",
                     "bn", "add2_end"]  # the identity skip: stride 1, 16 -> 16 channels
    layers = expand(seq(conv(16, 3), mbconv(1, 24, stride=2, k=5, se=0.25, act="silu")), 3)
    assert kinds(layers) == ["conv", "conv", "bn", "act", "add2_begin", "identity", "add2_mid", "gap", "fc", "act",
                             "fc", "act", "add2_end", "conv", "bn"]  # no expansion (1), no skip (stride 2)
    dw = layers[1]
    assert dict(dw.params) == {"out": 16, "k": 5, "s": 2, "p": 2, "g": 16, "bias": False}
    assert layers[8].params["out"] == 4 and layers[9].params["kind"] == "silu"  # squeeze: 16 // 4, SiLU
    with pytest.raises(CompileError, match="odd kernel"):
        mbconv(6, 16, k=4)
    with pytest.raises(CompileError, match="ratio of the input channels"):
        mbconv(6, 16, se=1.5)
    with pytest.raises(CompileError, match="channel count is not known"):
        expand(seq(flatten(), mbconv(6, 16)), 3)
