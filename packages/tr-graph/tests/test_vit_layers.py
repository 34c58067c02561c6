"""The Vision Transformer's layer kinds (tr.graph.layers.tokens, tr.graph.layers.attention) in compiled plans:
token shapes [N, 1, T, C], the tokens group (class token, position embedding: bias-like, FP32 under AMP, the
embedding initializer family), the attention's saved log-sum-exp, the ops each step emits, and the errors a bad
model gets at compile, naming the layer."""

from __future__ import annotations

import pytest
from tr_graph_testlib import mlp_spec

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Role
from tr.core.shape import Shape
from tr.graph import attention, class_token, tokens
from tr.graph.blueprint import add2, conv, fc, gap, gelu, identity, layernorm, seq
from tr.graph.compiler import compile_program


def _vit(heads: int = 2, width: int = 8, cls: bool = True, pos: bool = True, pool=None):
    attend = seq(layernorm(1e-6), conv(3 * width, 1, bias=True), attention(heads), conv(width, 1, bias=True))
    mlp = seq(layernorm(1e-6), conv(2 * width, 1, bias=True), gelu(), conv(width, 1, bias=True))
    return seq(conv(width, 4, 4, bias=True), tokens(cls, pos), add2(identity(), attend), add2(identity(), mlp),
               layernorm(1e-6), pool or class_token(), fc(5))


def _compile(model, **kw):
    return compile_program(model, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4, **kw))


def _t(p, name):
    return next(t for t in p.tensors if t.name == name)


def test_tokens_attention_and_pooling_shapes_and_parameters():
    p = _compile(_vit())
    assert _t(p, "L1.cls").shape == Shape(1, 1, 1, 8) and _t(p, "L1.pos").shape == Shape(1, 1, 5, 8)  # 4 + cls
    assert _t(p, "L1.cls").region.group.name == "tokens" and not _t(p, "L1.cls").region.group.decayed
    lse = [t for t in p.tensors if t.name.endswith(".lse")]
    assert len(lse) == 1 and lse[0].shape == Shape(4, 1, 2, 5) and lse[0].dtype is DType.FP32
    ops = {c.op for s in p.steps.values() for c in s.calls}
    assert {"tokens_fwd", "tokens_bwd", "attention_fwd", "attention_bwd", "token_pick_fwd", "token_pick_bwd"} <= ops
    fwd = next(c for c in p.steps["train_a"].calls if c.op == "attention_fwd")
    assert fwd.attrs["heads"] == 2 and fwd.attrs["scale"] == pytest.approx(0.5)  # 1 / sqrt(8 / 2)
    inf = next(c for c in p.steps["val_a"].calls if c.op == "attention_fwd")
    assert inf.args.get("stats") is None  # inference saves no statistics
    pos = next(i for i in p.inits if i.tensor.name == "L1.pos")
    assert (pos.kind, pos.family, pos.fan_in) == ("weight", "embedding", 1)


def test_without_class_token_or_position_embedding_and_with_mean_pooling():
    p = _compile(_vit(cls=False, pos=False, pool=gap()))
    names = {t.name for t in p.tensors}
    assert "L1.cls" not in names and "L1.pos" not in names
    (lse,) = [t for t in p.tensors if t.name.endswith(".lse")]
    assert lse.shape == Shape(4, 1, 2, 4)  # the 4 patch tokens alone


def test_amp_keeps_the_tokens_fp32_and_the_features_16_bit():
    p = _compile(_vit(), amp=True, amp_dtype="bf16")
    assert _t(p, "L1.pos").dtype is DType.FP32
    assert not any(t.name.startswith("L1.") and t.region.role is Role.AMP_COPY for t in p.tensors)
    fwd = next(c for c in p.steps["train_a"].calls if c.op == "attention_fwd")
    assert fwd.args["qkv"].dtype is DType.BF16 and fwd.args["stats"].dtype is DType.FP32


@pytest.mark.parametrize("model, message", [
    (lambda: _vit(heads=3), r"attention with 3 heads needs a width D divisible by them, got D = 8"),
    (lambda: seq(conv(8, 4, 4), tokens(), conv(8, 1), attention(2), class_token(), fc(5)),
     r"must divide by 3"),
    (lambda: seq(conv(24, 4, 4), attention(2), gap(), fc(5)), r"attention reads tokens \[N, 1, T, 3D\]"),
    (lambda: seq(conv(8, 4, 4), class_token(), fc(5)), r"class_token pools tokens \[N, 1, T, C\]"),
    (lambda: seq(conv(8, 3, 3, bias=True), tokens(), class_token(), fc(5)),
     r"layer 1 \(tokens at model\[1\]\): its patch embedding \(conv 3x3 stride 3\) does not tile the 8x8 image: "
     r"the last 2 rows and 2 columns would be dropped"),
])
def test_bad_vit_models_are_refused_at_compile_naming_the_layer(model, message):
    with pytest.raises(CompileError, match=message):
        _compile(model())
