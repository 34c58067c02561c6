import dataclasses

import pytest

from tr.core.errors import CompileError
from tr.graph.blueprint import (
    BluePrint,
    add2,
    avgpool,
    basic_block,
    block,
    bn,
    bottleneck,
    cbr,
    conv,
    dropout,
    elu,
    fc,
    flatten,
    gap,
    gelu,
    hardswish,
    identity,
    leaky_relu,
    maxpool,
    pretty,
    relu,
    relu6,
    repeat,
    seq,
    sigmoid,
    silu,
    tanh,
)


def test_repr_reads_like_the_code():
    m = seq(conv(64, 3, p=1), bn(), relu(), maxpool(2), fc(10, bias=False), dropout(0.25))
    assert repr(m) == "seq(conv(64, 3, p=1), bn(), relu(), maxpool(2, 2), fc(10, bias=False), dropout(0.25))"
    assert repr(cbr(64, 7, s=2, p=3)) == "cbr(64, 7, s=2, p=3)"
    assert repr(add2(identity(), seq(conv(8, 3, p=1), bn()))) == "add2(identity(), seq(conv(8, 3, p=1), bn()))"
    assert repr(repeat(block("basic", 64, stride=2), 2)) == "repeat(block('basic', 64, stride=2), 2)"
    assert repr(bn(momentum=0.01)) == "bn(momentum=0.01)"
    assert [repr(f()) for f in (tanh, silu, sigmoid, relu6, leaky_relu, hardswish, elu, gelu, gap, flatten)] == [
        "tanh()", "silu()", "sigmoid()", "relu6()", "leaky_relu()", "hardswish()", "elu()", "gelu()", "gap()",
        "flatten()"]


def test_layers_are_immutable_values():
    a, b = conv(64, 3, p=1), conv(64, 3, p=1)
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.out = 3
    assert seq(a, relu()) == seq([b, relu()])


def test_blocks_and_aliases():
    assert basic_block(64, 2) == block("basic", 64, stride=2)
    assert bottleneck(64, 256, 2) == block("bottleneck", 256, mid=64, stride=2)
    assert maxpool(3, 2, 1).s == 2 and avgpool(2).s == 2


def test_factories_reject_non_values():
    with pytest.raises(CompileError, match="seq item 1"):
        seq(relu(), 3)
    with pytest.raises(CompileError, match="out must be an integer"):
        fc(10.5)
    with pytest.raises(CompileError, match="unknown block kind"):
        block("dense", 64)
    with pytest.raises(CompileError, match="bias"):
        fc(10, bias=1)
    with pytest.raises(CompileError, match="basic"):
        block("basic", 64, mid=16)


def test_bad_values_are_kept_for_compile():
    # values are checked at compile time, where the error can name the layer index
    assert fc(0).out == 0 and dropout(1.5).p == 1.5 and seq().layers == ()


def test_blueprint_wraps_a_root():
    bp = BluePrint(seq(fc(10)), name="tiny", input_shape=(1, 1, 4), num_classes=10)
    assert repr(bp) == "BluePrint(seq(fc(10)), name='tiny', input_shape=(1, 1, 4), num_classes=10)"
    with pytest.raises(CompileError):
        BluePrint(3)
    assert pretty(seq(relu(), add2(identity(), relu()))).splitlines()[0] == "seq("
