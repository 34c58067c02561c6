"""The layernorm layer kind (tr.graph.layers.layernorm) in compiled plans: its own parameter groups ln_w and
ln_b land where their traits say (bias-like, no working copy), the gradient clear, the optimizer's bias-like
range and the EMA cover them through the spans the compiler already asks for, and its ops read FP32 gamma and
beta under AMP. Adding it changed nothing in tr-core's memory vocabulary or the compiler's step vocabulary."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from tr_graph_testlib import mlp_spec

import tr.core.memory as memory_mod
import tr.graph.steps as steps_mod
from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, Span
from tr.core.shape import Shape
from tr.graph import layernorm as exported_layernorm
from tr.graph.blueprint import LayerNorm, conv, fc, flatten, gap, layernorm, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.layers import FIRST_KINDS, KINDS, NODE_KINDS
from tr.graph.layers.layernorm import LN_B, LN_W
from tr.graph.steps import Part as P
from tr.tensor.program import Program

MLP = seq(fc(32), layernorm(), relu(), fc(16), layernorm(1e-6), fc(10))
CNN = seq(conv(8, 3, p=1), layernorm(), relu(), conv(8, 3, p=1), layernorm(), relu(), gap(), fc(5))


def _mlp(**kw) -> Program:
    return compile_program(MLP, mlp_spec(input_shape=(1, 1, 12), num_classes=10, batch=8, **kw))


def _cnn(**kw) -> Program:
    return compile_program(CNN, mlp_spec(input_shape=(6, 6, 3), num_classes=5, batch=4, **kw))


def _groups(p: Program, role: Role) -> list[str]:
    return [r.group.name for r in p.layout.regions if r.role is role]


def _covered(p: Program, span: Span) -> set[str]:
    """Names of the groups whose regions lie inside the bytes the layout gives ``span``."""
    lo, hi = p.layout.span(span)
    return {r.group.name for r, (a, b) in p.layout.regions.items() if lo <= a and b <= hi and b > a}


def _calls(p: Program, step: str, op: str) -> list:
    return [c for c in p.step(step).calls if c.op == op]


# --- the kind and the DSL ---------------------------------------------------------------------------------------

def test_the_leaf_expands_through_its_kind_and_is_exported():
    assert NODE_KINDS[LayerNorm] is KINDS["layernorm"]
    assert exported_layernorm is layernorm and repr(layernorm()) == "layernorm()"
    assert repr(layernorm(1e-6)) == "layernorm(eps=1e-06)"
    kind = KINDS["layernorm"]
    assert not kind.elementwise and not kind.spatial and not kind.bn_stats and not kind.flat_output
    assert "layernorm" not in FIRST_KINDS  # a model starts with its embedding (conv or fc)
    assert (LN_W.decayed, LN_W.amp_copy, LN_W.fp16_grad, LN_W.early) == (False, False, False, False)
    assert LN_W.traits() == LN_B.traits()


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan")])
def test_a_bad_eps_is_refused_at_compile(eps):
    with pytest.raises(CompileError, match=r"layer 1 .*layernorm eps must be a finite number > 0"):
        compile_program(seq(fc(8), layernorm(eps), fc(3)), mlp_spec(input_shape=(1, 1, 4), num_classes=3, batch=2))


def test_a_model_cannot_start_with_it():
    with pytest.raises(CompileError, match="the first layer reads the input batch and must be one of"):
        compile_program(seq(layernorm(), fc(3)), mlp_spec(input_shape=(1, 1, 4), num_classes=3, batch=2))


# --- the memory plan and the range ops --------------------------------------------------------------------------

@pytest.mark.parametrize("amp", [False, True])
@pytest.mark.parametrize("optimizer", ["momentum", "adamw", "sgd"])
def test_mlp_plan_has_the_ln_regions_and_every_span_covers_them_as_bias_like(amp, optimizer):
    p = _mlp(amp=amp, optimizer=optimizer, weight_decay=0.05, ema_decay=0.99)
    assert _groups(p, Role.PARAM) == ["ln_b", "ln_w", "fc_b", "fc_w"]
    assert _groups(p, Role.GRAD) == _groups(p, Role.EMA) == ["ln_b", "ln_w", "fc_b", "fc_w"]
    m = optimizer != "sgd"
    assert _groups(p, Role.MOMENT1) == (["ln_b", "ln_w", "fc_b", "fc_w"] if m else [])
    assert _groups(p, Role.MOMENT2) == (["ln_b", "ln_w", "fc_b", "fc_w"] if optimizer == "adamw" else [])
    # no FP16 working copy nor FP16 gradient: the kernels read FP32 gamma and beta, write FP32 gradients
    assert _groups(p, Role.AMP_COPY) == (["fc_b", "fc_w"] if amp else [])
    assert _groups(p, Role.GRAD_FP16) == [] and _groups(p, Role.EMA_FP16) == (["fc_w"] if amp else [])
    t = {x.name: x for x in p.tensors}
    for layer in (1, 4):
        assert t[f"L{layer}.gamma"].region == Region(Role.PARAM, LN_W)
        assert t[f"L{layer}.beta"].region == Region(Role.PARAM, LN_B)
        assert t[f"L{layer}.gamma.grad"].region == Region(Role.GRAD, LN_W)
        assert t[f"L{layer}.beta.ema"].region == Region(Role.EMA, LN_B)
        assert t[f"L{layer}.gamma"].shape == Shape(1, 1, 1, 32 if layer == 1 else 16)
        assert f"L{layer}.gamma.fp16" not in t and f"L{layer}.gamma.grad16" not in t
    opt = _calls(p, "train_a", "range_optimizer")
    assert [c.attrs["weight_decay"] for c in opt] == [0.05, 0.0]
    decayed, bias_like = opt
    assert _covered(p, decayed.args["w"]) == _covered(p, decayed.args["g"]) == {"fc_w"}
    assert _covered(p, bias_like.args["w"]) == _covered(p, bias_like.args["g"]) == {"ln_b", "ln_w", "fc_b"}
    if m:
        assert _covered(p, bias_like.args["m"]) == {"ln_b", "ln_w", "fc_b"}
    (zero,) = _calls(p, "train_a", "range_clear")
    assert {"ln_b", "ln_w"} <= _covered(p, zero.args["span"])
    (ema,) = [c for c in p.step("train_a").calls if c.part == P.EMA_UPDATE.value]
    assert _covered(p, ema.args["src"]) == _covered(p, ema.args["dst"]) == {"ln_b", "ln_w", "fc_b", "fc_w"}
    inits = {i.tensor.name: i.kind for i in p.inits}
    assert (inits["L1.gamma"], inits["L1.beta"]) == ("ones", "zeros")


@pytest.mark.parametrize("amp", [False, True])
def test_mlp_ops_read_fp32_parameters_and_save_row_statistics(amp):
    p = _mlp(amp=amp, optimizer="momentum")
    feature = DType.FP16 if amp else DType.FP32
    fwd = _calls(p, "train_a", "ln_fwd")
    bwd = _calls(p, "train_a", "ln_bwd")
    assert [c.layer for c in fwd] == [1, 4] and [c.layer for c in bwd] == [4, 1]
    assert [c.attrs["eps"] for c in fwd] == [1e-5, 1e-6]
    for c in fwd + bwd:
        assert c.args["x"].dtype is feature and c.args["gamma"].dtype is DType.FP32
        assert c.args["gamma"].name == f"L{c.layer}.gamma"  # the master: no working copy under AMP
        assert c.args["saved_mean"].shape == Shape(8, 1, 1, 1) and c.args["saved_rstd"].region.role is Role.TEMP
    for c in bwd:
        assert c.args["dgamma"].name == f"L{c.layer}.gamma.grad" and c.args["dgamma"].dtype is DType.FP32
        assert c.args["dbeta"].name == f"L{c.layer}.beta.grad" and c.args["dx"] is not None
    inf = _calls(p, "val_a", "ln_fwd")
    assert [c.layer for c in inf] == [1, 4]
    assert all(c.args["saved_mean"] is None and c.args["saved_rstd"] is None for c in inf)


def test_ema_inference_reads_the_ema_twins():
    p = _mlp(optimizer="adamw", ema_decay=0.9)
    ema_steps = [s for s in p.steps if "ema" in s and s.startswith("val")]
    assert ema_steps, sorted(p.steps)
    inf = _calls(p, ema_steps[0], "ln_fwd")
    assert [(c.args["gamma"].name, c.args["beta"].name) for c in inf] == [
        ("L1.gamma.ema", "L1.beta.ema"), ("L4.gamma.ema", "L4.beta.ema")]


@pytest.mark.parametrize("amp", [False, True])
def test_conv_model_normalises_each_position_over_its_channels(amp):
    p = _cnn(amp=amp, optimizer="momentum", weight_decay=1e-4)
    assert _groups(p, Role.PARAM) == ["ln_b", "ln_w", "fc_b", "fc_w", "first_conv", "deep_conv"]
    fwd = _calls(p, "train_a", "ln_fwd")
    assert [c.layer for c in fwd] == [1, 4]
    for c in fwd:
        assert c.args["x"].shape == Shape(4, 6, 6, 8) and c.args["gamma"].shape == Shape(1, 1, 1, 8)
        assert c.args["saved_mean"].shape == Shape(4, 6, 6, 1)  # one statistic per N*H*W position
    (_, bias_like) = _calls(p, "train_a", "range_optimizer")
    assert _covered(p, bias_like.args["w"]) == {"ln_b", "ln_w", "fc_b"} and bias_like.attrs["weight_decay"] == 0.0
    # conv -> layernorm is no cbr: the fuse pass folds only batch norms into convolutions
    assert not _calls(p, "train_a", "bn_fwd")


def test_after_a_flatten_it_normalises_the_whole_row():
    p = compile_program(seq(conv(4, 3, p=1), flatten(), layernorm(), fc(3)),
                        mlp_spec(input_shape=(5, 5, 2), num_classes=3, batch=2))
    (c,) = _calls(p, "train_a", "ln_fwd")
    assert c.args["x"].shape == Shape(2, 1, 1, 100) and c.args["gamma"].shape == Shape(1, 1, 1, 100)


# --- nothing in tr-core's memory vocabulary or the compiler's step vocabulary names it ----------------------------

def _outside_the_fusion(src: str) -> str:
    """passes.py without its docstring and fuse_add_norm: a fusion pattern names its participants (as conv -> bn2d
    -> act is a cbr), and the residual join -> layernorm one is the only place the passes may."""
    tree = ast.parse(src)
    lines = src.splitlines()
    drop = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "fuse_add_norm"]
    drop += [tree.body[0]]  # the module docstring (it lists every pass)
    assert len(drop) == 2 and isinstance(drop[1], ast.Expr)
    for node in sorted(drop, key=lambda n: -n.lineno):
        del lines[node.lineno - 1:node.end_lineno]
    return "\n".join(lines)


def test_tr_core_and_the_step_vocabulary_do_not_name_the_kind():
    for mod in (memory_mod, steps_mod):
        src = Path(mod.__file__).read_text()
        assert re.search("ln", src, re.IGNORECASE) is None, mod.__name__
    graph_dir = Path(steps_mod.__file__).parent
    for name in ("compiler.py", "graph.py", "memory_plan.py", "steps.py", "ema.py", "passes.py"):
        src = (graph_dir / name).read_text()
        if name == "passes.py":
            src = _outside_the_fusion(src)
        assert re.search(r"layer_?norm|\bln_|LN_[WB]", src, re.IGNORECASE) is None, name
