"""The residual join fused into the layer norm after it (tr.graph.passes.fuse_add_norm) and the skip path's gradient
fused into the layer norm's backward (LayerKind.adds_input_gradient), in compiled plans.

In a pre-norm Vision Transformer every join's sum is read by the next block's layernorm and by the next join's skip
path: the fused plan computes the sum in the layernorm's ln_fwd (no add_fwd) and adds the skip path's gradient in
ln_bwd (no accumulate), so a ViT of depth d has 4d fewer ops in each training step (2d joins, 2d accumulates) and 2d
fewer in each validation step than the plan without the fusion, which these tests build by switching both off. A
plan without the pattern is the same plan.
"""

from __future__ import annotations

import pytest
from tr_graph_testlib import load_models, mlp_spec

import tr.graph.passes as passes
from tr.core.ops import OpCall
from tr.graph.blueprint import add2, conv, fc, identity, layernorm, relu, seq
from tr.graph.compiler import arch_plan, compile_program
from tr.graph.layers.layernorm import LayerNormKind
from tr.tensor.program import Program

DEPTH = 3
TRAIN_STEPS = ("train_a", "train_b", "train_last_a", "train_last_b")
VAL_STEPS = ("val_a", "val_b", "val_last_a", "val_last_b")
SPEC = {"input_shape": (28, 28, 1), "num_classes": 10, "batch": 4}


def _vit(depth: int = DEPTH, **kw):
    return load_models().vit_net(7, depth, 16, 2, mlp_ratio=2, num_classes=10, **kw)


@pytest.fixture
def unfused(monkeypatch):
    """A function compiling the plan without either fusion (what the compiler emitted before them)."""
    def build(model, **kw) -> Program:
        with monkeypatch.context() as m:
            m.setattr(passes, "fuse_add_norm", lambda layers: list(layers))
            m.setattr(LayerNormKind, "adds_input_gradient", lambda self, layer: False)
            return compile_program(model, mlp_spec(**SPEC, **kw))
    return build


def _ops(p: Program, step: str) -> list[str]:
    return [c.op for c in p.steps[step].calls]


def _calls(p: Program, step: str, name: str) -> list[OpCall]:
    return [c for c in p.steps[step].calls if c.op == name]


def test_every_join_before_a_layernorm_is_fused_into_it():
    layers = arch_plan(_vit(), mlp_spec(**SPEC)).layers
    adds = [i for i, L in enumerate(layers) if L.kind == "add"]
    assert len(adds) == 2 * DEPTH
    for i in adds:
        join, norm = layers[i], layers[i + 1]
        assert join.params["norm"] and join.describe() == "add (in next layernorm)"
        assert norm.kind == "layernorm" and norm.inputs == (i,) and norm.params["residual"]
        assert norm.describe() == "layernorm+add eps=1e-06"
        # every join's sum is also read by the next join (the skip path), but the last one's: the final layernorm's
        assert norm.params["shared"] == (i != adds[-1])
    first = next(L for L in layers if L.kind == "layernorm")  # after the tokens: no join to fuse
    assert not first.params["residual"] and first.describe() == "layernorm eps=1e-06"


@pytest.mark.parametrize("amp", [None, "fp16", "bf16"])
def test_a_vit_plan_has_4d_fewer_ops_per_training_step_and_2d_per_validation_step(amp, unfused):
    kw = {"amp": True, "amp_dtype": amp} if amp else {}
    fused, before = compile_program(_vit(), mlp_spec(**SPEC, **kw)), unfused(_vit(), **kw)
    assert fused.steps.keys() == before.steps.keys()
    for step in fused.steps:
        drop = 4 * DEPTH if step in TRAIN_STEPS else 2 * DEPTH if step in VAL_STEPS else 0
        assert len(_ops(fused, step)) == len(_ops(before, step)) - drop, step
    for step in ("train_a", "train_last_b", "val_a", "val_last_b"):
        assert "add_fwd" not in _ops(fused, step) and "accumulate" not in _ops(fused, step)
        assert _ops(before, step).count("add_fwd") == 2 * DEPTH
    assert _ops(before, "train_a").count("accumulate") == 2 * DEPTH
    assert fused.num_ops < before.num_ops  # (the plan's distinct calls: a call shared by steps counts once)
    assert fused.layout.total_bytes <= before.layout.total_bytes


def test_the_fused_calls_read_the_joins_inputs_and_write_its_sum():
    p = compile_program(_vit(), mlp_spec(**SPEC))
    layers = arch_plan(_vit(), mlp_spec(**SPEC)).layers
    fwd = [c for c in _calls(p, "train_a", "ln_fwd") if c.args.get("z") is not None]
    assert len(fwd) == 2 * DEPTH
    for c in fwd:
        norm = layers[c.layer]
        join = layers[norm.inputs[0]]
        shortcut, stem = (f"L{u}.y" for u in join.inputs)
        assert (c.args["x"].name, c.args["z"].name, c.args["sum"].name) == (shortcut, stem, f"L{norm.inputs[0]}.y")
        assert c.args["saved_mean"] is not None
    inf = [c for c in _calls(p, "val_a", "ln_fwd") if c.args.get("z") is not None]
    assert len(inf) == 2 * DEPTH
    assert [c.args.get("sum") is not None for c in inf] == [True] * (2 * DEPTH - 1) + [False]  # the last: unread
    # the backward reads the sum the forward wrote
    bwd = {c.layer: c for c in _calls(p, "train_a", "ln_bwd")}
    for c in fwd:
        assert bwd[c.layer].args["x"] == c.args["sum"]


def test_each_layernorm_whose_input_is_a_branch_point_adds_the_skip_gradient_itself():
    """The first layernorm reads the tokens and the last none the skip path reads: 2d of the 2d + 1 backward calls
    take dx2, the gradient the next join's skip path gave their input (that join's output gradient); most of them
    write dx over dx2's bytes (the catalogue's in-place pair), which the unfused accumulate could not."""
    p = compile_program(_vit(), mlp_spec(**SPEC))
    layers = arch_plan(_vit(), mlp_spec(**SPEC)).layers
    bwd = _calls(p, "train_a", "ln_bwd")
    assert len(bwd) == 2 * DEPTH + 1
    fused = [c for c in bwd if c.args.get("dx2") is not None]
    assert len(fused) == 2 * DEPTH and bwd[0].args.get("dx2") is None  # (the backward runs the final one first)
    for c in fused:
        u = layers[c.layer].inputs[0]
        skip = next(j for j, L in enumerate(layers) if L.kind == "add" and L.inputs[0] == u)  # reads u unchanged
        assert c.args["dx2"].name == f"L{skip + 1}.dx"  # that join's output gradient: the layernorm after it's dx
    assert sum(c.args["dx"].offset == c.args["dx2"].offset for c in fused) >= DEPTH


def test_a_plan_without_the_pattern_is_the_same_plan(unfused):
    for model in (seq(fc(32), layernorm(), relu(), fc(10)),  # a layernorm that is no branch point
                  # a join with its relu fused in: the layernorm after it reads the relu's output, not the sum
                  seq(conv(8, 3, p=1), add2(identity(), seq(conv(8, 3, p=1))), relu(), layernorm(), fc(10))):
        fused, before = compile_program(model, mlp_spec(**SPEC)), unfused(model)
        assert fused.layout.total_bytes == before.layout.total_bytes
        for step in fused.steps:
            assert fused.steps[step].calls == before.steps[step].calls, step


def test_stochastic_depth_keeps_the_fusion():
    """drop_path ends each branch: the join still reads it, and the layernorm after the join still fuses it."""
    p = compile_program(_vit(drop_path=0.1, attention_dropout=0.1), mlp_spec(**SPEC))
    assert "add_fwd" not in _ops(p, "train_a") and "accumulate" not in _ops(p, "train_a")
    assert sum(c.args.get("z") is not None for c in _calls(p, "train_a", "ln_fwd")) == 2 * DEPTH
