"""Stochastic depth (drop_path(p)) and attention dropout (attention(heads, dropout=p)) in compiled plans: the ops
and tensors each emits in training (both draw from the dropout_seed stream), none at inference, p = 0 compiling to
exactly the plan without them, and bad probabilities refused at compile naming the layer."""

from __future__ import annotations

import pytest
from tr_graph_testlib import mlp_spec

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Role
from tr.core.shape import Shape
from tr.graph import attention, class_token, drop_path, tokens
from tr.graph.blueprint import add2, conv, fc, gelu, identity, layernorm, seq
from tr.graph.compiler import compile_program


def _vit(rate: float = 0.0, attn_p: float = 0.0, width: int = 8, blocks: int = 1):
    tail = (drop_path(rate),) if rate else ()
    attend = seq(layernorm(1e-6), conv(3 * width, 1, bias=True), attention(2, attn_p), conv(width, 1, bias=True),
                 *tail)
    mlp = seq(layernorm(1e-6), conv(2 * width, 1, bias=True), gelu(), conv(width, 1, bias=True), *tail)
    encoder = [seq(add2(identity(), attend), add2(identity(), mlp)) for _ in range(blocks)]
    return seq(conv(width, 4, 4, bias=True), tokens(), *encoder, layernorm(1e-6), class_token(), fc(5))


def _compile(model, **kw):
    return compile_program(model, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4, last_train_batch=3, **kw))


def _calls(p, step: str, name: str):
    return [c for c in p.steps[step].calls if c.op == name]


def _plan(p) -> tuple:
    """A plan by what it computes: its tensors and every step's calls (ops, attributes, arguments by name)."""
    tensors = tuple((t.name, t.offset, t.slot_bytes, t.shape, t.dtype) for t in p.tensors)
    steps = tuple((s, tuple((c.op, c.layer, tuple(sorted(c.attrs.items())),
                             tuple((k, None if v is None else getattr(v, "name", repr(v))) for k, v in c.args.items()))
                            for c in p.steps[s].calls)) for s in sorted(p.steps))
    return tensors, steps


def test_drop_path_draws_one_decision_a_sample_in_training_and_is_absent_at_inference():
    p = _compile(_vit(rate=0.1))
    masks = [t for t in p.tensors if t.name.endswith(".mask")]
    assert len(masks) == 2 and all(m.shape == Shape(4, 1, 1, 1) and m.dtype is DType.INT8 for m in masks)
    assert all(m.region.role is Role.MASK for m in masks)
    fwd, bwd = _calls(p, "train_a", "drop_path_fwd"), _calls(p, "train_a", "drop_path_bwd")
    assert len(fwd) == len(bwd) == 2
    assert all(c.args["seed"].name == "dropout_seed" and c.attrs == {"p": 0.1} for c in fwd)
    last = _calls(p, "train_last_a", "drop_path_fwd")[0]
    assert last.args["x"].shape.n == 3 and last.args["mask"].shape == Shape(3, 1, 1, 1)  # the short batch's samples
    for step in ("val_a", "val_last_b"):
        assert not [c for c in p.steps[step].calls if c.op.startswith("drop_path")]


def test_attention_dropout_saves_a_draw_key_for_the_backward_and_none_at_inference():
    p = _compile(_vit(attn_p=0.25, blocks=2))
    keys = [t for t in p.tensors if t.name.endswith(".key")]
    assert len(keys) == 2 and all(k.shape == Shape(1, 1, 1, 2) and k.dtype is DType.INT32 for k in keys)
    assert all(k.region.role is Role.MASK for k in keys)
    fwd, bwd = _calls(p, "train_a", "attention_fwd"), _calls(p, "train_a", "attention_bwd")
    assert [c.args["key"].name for c in fwd] == [c.args["key"].name for c in reversed(bwd)] == [k.name for k in keys]
    assert all(c.args["seed"].name == "dropout_seed" and c.attrs["dropout"] == 0.25 for c in fwd)
    assert all("seed" not in c.args and c.attrs["dropout"] == 0.25 for c in bwd)  # the backward reads the key
    assert len({(k.offset, k.slot_bytes) for k in keys}) == 2  # both live through the forward: two slots
    (inf, _) = _calls(p, "val_a", "attention_fwd")
    assert "dropout" not in inf.attrs and inf.args["seed"] is None and inf.args["key"] is None


def test_zero_probabilities_compile_to_the_plan_without_them():
    plain = _plan(_compile(_vit()))
    assert _plan(_compile(_vit(attn_p=0.0))) == plain
    with_zero = seq(conv(8, 4, 4, bias=True), tokens(), drop_path(0.0), layernorm(1e-6), class_token(), fc(5))
    without = seq(conv(8, 4, 4, bias=True), tokens(), layernorm(1e-6), class_token(), fc(5))
    assert _plan(_compile(with_zero)) == _plan(_compile(without))


def test_amp_keeps_the_mask_and_key_and_reads_16_bit_features():
    p = _compile(_vit(rate=0.2, attn_p=0.1), amp=True, amp_dtype="bf16")
    (fwd, *_) = _calls(p, "train_a", "drop_path_fwd")
    assert fwd.args["x"].dtype is DType.BF16 and fwd.args["mask"].dtype is DType.INT8
    (att,) = _calls(p, "train_a", "attention_fwd")
    assert att.args["qkv"].dtype is DType.BF16 and att.args["key"].dtype is DType.INT32


@pytest.mark.parametrize("model, message", [
    (lambda: _vit(rate=1.0), r"layer \d+ \(drop_path 1.0 at .*\): drop_path p must be in \[0, 1\), got 1.0"),
    (lambda: _vit(rate=-0.1), r"drop_path p must be in \[0, 1\), got -0.1"),
    (lambda: _vit(attn_p=1.0), r"layer \d+ \(attention heads=2 dropout=1.0 at .*\): attention dropout must be in "
                               r"\[0, 1\), got 1.0"),
    (lambda: _vit(attn_p=float("nan")), r"attention dropout must be in \[0, 1\), got nan"),
    (lambda: drop_path("0.1"), r"drop_path p must be a number, got '0.1'"),
    (lambda: attention(2, dropout=True), r"attention dropout must be a number, got True"),
])
def test_bad_probabilities_are_refused_naming_the_layer(model, message):
    with pytest.raises(CompileError, match=message):
        _compile(model())
