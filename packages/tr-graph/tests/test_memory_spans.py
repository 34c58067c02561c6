"""Every span the compiler gives a range op covers exactly the tensors of the roles and groups it means.

For each plan below, every range op argument that is a Span is resolved by the plan's layout, and the tensors
(and regions) inside the resolved byte range are compared with the tensors of an expected set of
(role, group name) pairs written out here, independently of how the compiler builds its spans. A span the test
does not expect, or an expected one the plan lacks, fails too. Parameter groups a layer kind declares itself
(a temporarily registered kind) land where their traits say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from tr_graph_testlib import mlp_spec

from tr.core.errors import CompileError
from tr.core.memory import Group, Region, Role, Span
from tr.core.shape import Shape
from tr.graph.blueprint import Layer, bn, cbr, conv, fc, gap, maxpool, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.layers import KINDS, NODE_KINDS
from tr.graph.layers.base import Decl, DeclCtx, Expansion, Init
from tr.graph.layers.fc import FCKind
from tr.graph.steps import Part as P
from tr.tensor.program import Program

Sel = frozenset[tuple[Role, str]]


def sel(role: Role, *groups: str) -> Sel:
    """(role, group) pairs; a role without groups means its one plain region (result, result_sum)."""
    return frozenset((role, g) for g in (groups or ("",)))


def span_args(p: Program) -> dict[tuple[P, int, str], Span]:
    """(part, k-th call with a span in that part, argument) -> span, over every step (which must agree: the
    working copies' cast, for one, runs in every training step and in epoch_begin)."""
    out: dict[tuple[P, int, str], Span] = {}
    for name, step in p.steps.items():
        k: dict[P, int] = {}
        for c in step.calls:
            spans = {a: v for a, v in c.args.items() if isinstance(v, Span)}
            if not spans:
                continue
            part = P(c.part)
            for a, s in spans.items():
                assert out.setdefault((part, k.get(part, 0), a), s) == s, (name, part, a)
            k[part] = k.get(part, 0) + 1
    return out


def covered(p: Program, s: Span) -> tuple[set[str], set[Region]]:
    a, b = p.layout.span(s)
    assert a < b, f"{s!r} resolves to nothing"
    names = set()
    for t in p.tensors:
        if t.allocated and a <= t.offset < b:
            assert t.end <= b, f"{t.name} sticks out of {s!r}"
            names.add(t.name)
    return names, {r for r, (x, y) in p.layout.regions.items() if a <= x and y <= b and y > x}


def expected(p: Program, want: Sel) -> tuple[set[str], set[Region]]:
    regions = {r for r in p.layout.regions if (r.role, r.group.name) in want}
    missing = want - {(r.role, r.group.name) for r in regions}
    assert not missing, f"the plan has no region for {sorted((r.value, g) for r, g in missing)}"
    return {t.name for t in p.tensors if (t.region.role, t.region.group.name) in want}, regions


def check_spans(p: Program, want: dict[tuple[P, int, str], Sel]) -> None:
    got = span_args(p)
    assert set(got) == set(want)
    for key, s in got.items():
        names, regions = covered(p, s)
        exp_names, exp_regions = expected(p, want[key])
        assert regions == exp_regions, (key, s)
        assert names == exp_names, (key, s)


def role_groups(p: Program, role: Role) -> list[str]:
    return [r.group.name for r in p.layout.regions if r.role is role]


# --- the MLP -----------------------------------------------------------------------------------------------

FC_GROUPS = ("fc_b", "fc_w")


@pytest.mark.parametrize("amp", [False, True])
def test_mlp_spans(models, amp):
    p = compile_program(models.mlp_mnist, mlp_spec(amp=amp))
    assert role_groups(p, Role.PARAM) == ["fc_b", "fc_w"]
    grads = sel(Role.GRAD, *FC_GROUPS)
    want = {
        (P.ZERO_GRAD, 0, "span"): grads | sel(Role.RESULT),  # the FC GEMMs write FP32 gradients: no FP16 ones
        (P.REDUCE_LATE, 0, "span"): grads,
        (P.REDUCE_EARLY, 0, "span"): sel(Role.RESULT),  # no group's gradients are complete early
        (P.CHECK_FINITE, 0, "span"): grads,
        (P.CLEAR_METRICS, 0, "span"): sel(Role.RESULT_SUM),
        (P.REDUCE_RESULT_SUM, 0, "span"): sel(Role.RESULT_SUM),
    }
    for k, (rule_groups, role_m) in enumerate(((("fc_w",), Role.MOMENT1), (("fc_b",), Role.MOMENT1))):
        want[(P.OPTIMIZER, k, "w")] = sel(Role.PARAM, *rule_groups)
        want[(P.OPTIMIZER, k, "g")] = sel(Role.GRAD, *rule_groups)
        want[(P.OPTIMIZER, k, "m")] = sel(role_m, *rule_groups)
    if amp:
        want[(P.CAST_WORKING, 0, "src")] = sel(Role.PARAM, *FC_GROUPS)
        want[(P.CAST_WORKING, 0, "dst")] = sel(Role.AMP_COPY, *FC_GROUPS)
    check_spans(p, want)


# --- a CNN with BN (cbr), AMP, AdamW and EMA -----------------------------------------------------------------

ALL6 = ("bn_b", "bn_w", "fc_b", "fc_w", "first_conv", "deep_conv")
DECAYED = ("fc_w", "first_conv", "deep_conv")
BIAS_LIKE = ("bn_b", "bn_w", "fc_b")
STATS = ("mean", "var")


def _cnn_spans(amp: bool, optimizer: str, ema: bool) -> dict[tuple[P, int, str], Sel]:
    grads = sel(Role.GRAD, *ALL6)
    want = {
        (P.ZERO_GRAD, 0, "span"): grads | sel(Role.RESULT) | (sel(Role.GRAD_FP16, "first_conv", "deep_conv")
                                                                 if amp else frozenset()),
        (P.REDUCE_LATE, 0, "span"): sel(Role.GRAD, "bn_b", "bn_w", "fc_b", "fc_w", "first_conv"),
        (P.REDUCE_EARLY, 0, "span"): sel(Role.GRAD, "deep_conv") | sel(Role.RESULT),
        (P.CHECK_FINITE, 0, "span"): grads,
        (P.CHECK_FINITE, 1, "span"): sel(Role.RUNNING_NEXT, *STATS),
        (P.REDUCE_RUNNING, 0, "span"): sel(Role.RUNNING_NEXT, *STATS),
        (P.UPDATE_RUNNING, 0, "src"): sel(Role.RUNNING_NEXT, *STATS),
        (P.UPDATE_RUNNING, 0, "dst"): sel(Role.RUNNING, *STATS),
        (P.CLEAR_METRICS, 0, "span"): sel(Role.RESULT_SUM),
        (P.REDUCE_RESULT_SUM, 0, "span"): sel(Role.RESULT_SUM),
    }
    lars = optimizer.startswith("lars")
    slots = {"adamw": (Role.MOMENT1, Role.MOMENT2), "lars": (Role.MOMENT1,)}[optimizer]
    for k, groups in enumerate([BIAS_LIKE] if lars else [DECAYED, BIAS_LIKE]):  # LARS: decayed ones per tensor
        want[(P.OPTIMIZER, k, "w")] = sel(Role.PARAM, *groups)
        want[(P.OPTIMIZER, k, "g")] = sel(Role.GRAD, *groups)
        for role, arg in zip(slots, "mv"):
            want[(P.OPTIMIZER, k, arg)] = sel(role, *groups)
    if amp:
        want[(P.CAST_EARLY, 0, "src")] = sel(Role.GRAD_FP16, "deep_conv")
        want[(P.CAST_EARLY, 0, "dst")] = sel(Role.GRAD, "deep_conv")
        want[(P.CAST_LATE, 0, "src")] = sel(Role.GRAD_FP16, "first_conv")
        want[(P.CAST_LATE, 0, "dst")] = sel(Role.GRAD, "first_conv")
        want[(P.CAST_WORKING, 0, "src")] = sel(Role.PARAM, "fc_b", *DECAYED)
        want[(P.CAST_WORKING, 0, "dst")] = sel(Role.AMP_COPY, "fc_b", *DECAYED)
    if ema:
        for part, src, dst in ((P.EMA_UPDATE, Role.PARAM, Role.EMA), (P.EMA_START, Role.PARAM, Role.EMA),
                               (P.SEMA_SWITCH, Role.EMA, Role.PARAM)):
            want[(part, 0, "src")], want[(part, 0, "dst")] = sel(src, *ALL6), sel(dst, *ALL6)
        if amp:
            want[(P.PREPARE_EMA, 0, "src")] = sel(Role.EMA, *DECAYED)
            want[(P.PREPARE_EMA, 0, "dst")] = sel(Role.EMA_FP16, *DECAYED)
    return want


CNN = seq(cbr(8, 3, p=1), cbr(16, 3, p=1), maxpool(2), conv(16, 3, p=1), bn(), relu(), gap(), fc(5))


def _cnn(**kw) -> Program:
    return compile_program(CNN, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4, **kw))


def test_cnn_amp_adamw_ema_spans():
    p = _cnn(amp=True, optimizer="adamw", ema_decay=0.99)
    assert role_groups(p, Role.PARAM) == ["bn_b", "bn_w", "fc_b", "fc_w", "first_conv", "deep_conv"]
    assert role_groups(p, Role.GRAD_FP16) == ["first_conv", "deep_conv"]
    assert role_groups(p, Role.RUNNING) == role_groups(p, Role.RUNNING_NEXT) == ["mean", "var"]
    assert role_groups(p, Role.FOLDED) == ["bias", "scale"]
    check_spans(p, _cnn_spans(amp=True, optimizer="adamw", ema=True))


@pytest.mark.parametrize("amp", [False, True])
def test_lars_spans_and_trust_ratios(amp):
    p = _cnn(amp=amp, optimizer="lars", weight_decay=1e-4)
    check_spans(p, _cnn_spans(amp=amp, optimizer="lars", ema=False))
    assert role_groups(p, Role.TRUST_RATIO) == list(DECAYED)  # bias-like groups have no trust ratio
    lars = [c for c in p.step("train_a").calls_of(P.OPTIMIZER.value) if c.op == "lars_update"]
    decayed = {t.name for t in p.tensors if t.region.role is Role.PARAM and t.region.group.decayed}
    assert {c.args["w"].name for c in lars} == decayed and len(lars) == len(decayed) == 4
    for c in lars:
        group = c.args["w"].region.group
        assert c.args["ratio"].region == Region(Role.TRUST_RATIO, group)
        assert c.args["g"].region == Region(Role.GRAD, group) and c.args["m"].region == Region(Role.MOMENT1, group)


# --- parameter groups a layer kind declares itself ------------------------------------------------------------

EMB = Group("emb", decayed=True, amp_copy=True)  # decayed with a working copy, like fc_w: sorts by name before it
LN_W = Group("ln_w")  # bias-like without a working copy, like the BN groups: sorts after them


@dataclass(frozen=True, repr=False)
class Embed(Layer):
    """A BluePrint leaf for the test kind below (an fc whose parameters are in their own groups)."""

    out: int

    def _positional(self) -> tuple[str, ...]:
        return ("out",)


class EmbedKind(FCKind):
    """An fc declaring its weight in ``weight_group`` and its bias in ``bias_group``. It exists for the memory
    plan only: under AMP its forward reads the FP32 bias (a group without a working copy), which no backend runs."""

    kinds = ("embed_fc",)
    nodes = (Embed,)
    first_ok = False

    def __init__(self, weight_group: Group, bias_group: Group) -> None:
        self.weight_group, self.bias_group = weight_group, bias_group

    def expand(self, node: Embed, channels: int | None) -> Expansion:
        return Expansion("embed_fc", {"out": node.out, "bias": True}, node.out)

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        fan_in, k = ins[0].per_sample(), layer.params["out"]
        decls = cx.param("w", self.weight_group, Shape(k, 1, 1, fan_in), Init("weight", fan_in, k, family="fc"))
        decls += cx.param("b", self.bias_group, Shape(1, 1, 1, k), Init("bias", fan_in, k))
        if layer.params["activation"]:
            decls.append(cx.grad("act_dx", out))
        return decls


@pytest.fixture
def embed_kind(monkeypatch):
    """Registers EmbedKind(EMB, LN_W) for the test; monkeypatch restores KINDS and NODE_KINDS after it."""
    def register(weight_group: Group = EMB, bias_group: Group = LN_W) -> None:
        kind = EmbedKind(weight_group, bias_group)
        monkeypatch.setitem(KINDS, "embed_fc", kind)
        monkeypatch.setitem(NODE_KINDS, Embed, kind)

    return register


EMBED_MODEL = seq(cbr(8, 3, p=1), gap(), Embed(6), relu(), fc(3))


def _embed_plan(**kw) -> Program:
    return compile_program(EMBED_MODEL, mlp_spec(input_shape=(6, 6, 3), num_classes=3, batch=4, **kw))


@pytest.mark.parametrize("amp", [False, True])
def test_user_groups_land_where_their_traits_say(embed_kind, amp):
    embed_kind()
    p = _embed_plan(amp=amp, optimizer="adamw", ema_decay=0.9)
    t = {x.name: x for x in p.tensors}
    assert t["L2.w"].region == Region(Role.PARAM, EMB) and t["L2.b"].region == Region(Role.PARAM, LN_W)
    assert t["L2.w.grad"].region == Region(Role.GRAD, EMB) and t["L2.b.m"].region == Region(Role.MOMENT1, LN_W)
    # bias-like without a copy (bn_b, bn_w, ln_w), with one (fc_b), decayed with one (emb, fc_w, first_conv)
    assert role_groups(p, Role.PARAM) == ["bn_b", "bn_w", "ln_w", "fc_b", "emb", "fc_w", "first_conv"]
    assert role_groups(p, Role.EMA) == role_groups(p, Role.PARAM)
    assert role_groups(p, Role.AMP_COPY) == (["fc_b", "emb", "fc_w", "first_conv"] if amp else [])
    assert ("L2.w.fp16" in t) == amp and "L2.b.fp16" not in t
    decayed, bias_like = ("emb", "fc_w", "first_conv"), ("bn_b", "bn_w", "ln_w", "fc_b")
    params = decayed + bias_like
    grads = sel(Role.GRAD, *params)
    want = {
        (P.ZERO_GRAD, 0, "span"): grads | sel(Role.RESULT) | (sel(Role.GRAD_FP16, "first_conv")
                                                                 if amp else frozenset()),
        (P.REDUCE_LATE, 0, "span"): grads,  # no early group: one bucket after the first layer's backward
        (P.REDUCE_EARLY, 0, "span"): sel(Role.RESULT),
        (P.CHECK_FINITE, 0, "span"): grads,
        (P.CHECK_FINITE, 1, "span"): sel(Role.RUNNING_NEXT, *STATS),
        (P.REDUCE_RUNNING, 0, "span"): sel(Role.RUNNING_NEXT, *STATS),
        (P.UPDATE_RUNNING, 0, "src"): sel(Role.RUNNING_NEXT, *STATS),
        (P.UPDATE_RUNNING, 0, "dst"): sel(Role.RUNNING, *STATS),
        (P.CLEAR_METRICS, 0, "span"): sel(Role.RESULT_SUM),
        (P.REDUCE_RESULT_SUM, 0, "span"): sel(Role.RESULT_SUM),
        (P.EMA_UPDATE, 0, "src"): sel(Role.PARAM, *params),
        (P.EMA_UPDATE, 0, "dst"): sel(Role.EMA, *params),
        (P.EMA_START, 0, "src"): sel(Role.PARAM, *params),  # EMA <- weights when the EMA starts
        (P.EMA_START, 0, "dst"): sel(Role.EMA, *params),
        (P.SEMA_SWITCH, 0, "src"): sel(Role.EMA, *params),  # weights <- EMA (SEMA)
        (P.SEMA_SWITCH, 0, "dst"): sel(Role.PARAM, *params),
    }
    for k, groups in enumerate((decayed, bias_like)):
        for arg, role in (("w", Role.PARAM), ("g", Role.GRAD), ("m", Role.MOMENT1), ("v", Role.MOMENT2)):
            want[(P.OPTIMIZER, k, arg)] = sel(role, *groups)
    if amp:
        want[(P.CAST_LATE, 0, "src")] = sel(Role.GRAD_FP16, "first_conv")
        want[(P.CAST_LATE, 0, "dst")] = sel(Role.GRAD, "first_conv")
        want[(P.CAST_WORKING, 0, "src")] = sel(Role.PARAM, "fc_b", *decayed)
        want[(P.CAST_WORKING, 0, "dst")] = sel(Role.AMP_COPY, "fc_b", *decayed)
        want[(P.PREPARE_EMA, 0, "src")] = sel(Role.EMA, *decayed)
        want[(P.PREPARE_EMA, 0, "dst")] = sel(Role.EMA_FP16, *decayed)
    check_spans(p, want)


def test_a_group_name_declared_with_other_traits_is_refused(embed_kind):
    embed_kind(weight_group=Group("fc_w", decayed=True))  # the fc's group name, without its working copy
    with pytest.raises(CompileError, match=r"group 'fc_w' is declared twice, differently: .*amp_copy=True.* "
                                           r"\(region param/fc_w\) and .*amp_copy=False"):
        _embed_plan()


def test_a_group_whose_traits_break_a_span_is_refused(embed_kind):
    # an early bias-like group sorts after every late group, decayed ones included: the bias-like optimizer
    # range would run over the decayed parameters between them
    embed_kind(bias_group=Group("late_bias", early=True))
    with pytest.raises(CompileError, match=r"span <param\[not decayed\]> is not contiguous: region param/emb "
                                           r"\[\d+, \d+\) lies between param/bn_b and param/late_bias"):
        _embed_plan()


def test_a_first_layer_in_an_early_group_is_refused(embed_kind, monkeypatch):
    # the early all-reduce runs beside the first layer's backward: a first layer writing an early gradient would
    # race it, so the compiler refuses the declaration and names the layer and the group
    embed_kind(weight_group=Group("emb", decayed=True, amp_copy=True, early=True))
    monkeypatch.setattr(EmbedKind, "first_ok", True)
    with pytest.raises(CompileError, match=r"layer 0 \(fc 6\+relu\): the first layer's parameter w is in group "
                                           r"'emb', which says early"):
        compile_program(seq(Embed(6), relu(), fc(3)), mlp_spec(input_shape=(6, 6, 3), num_classes=3, batch=4))


def test_a_weight_without_an_initializer_family_is_refused(embed_kind, monkeypatch):
    def declare(self, layer, ins, out, cx):
        fan_in, k = ins[0].per_sample(), layer.params["out"]
        return cx.param("w", EMB, Shape(k, 1, 1, fan_in), Init("weight", fan_in, k))  # no family

    embed_kind()
    monkeypatch.setattr(EmbedKind, "declare", declare)
    with pytest.raises(CompileError, match=r"layer 2 \(fc 6\+relu\): weight w has no initializer family"):
        _embed_plan()
