"""tr.graph.steps: the training step's four branches, how a step is assembled from its parts (an empty side branch
dropped, the waits re-indexed), which steps a plan has and which variant each binds, every call's part label,
and, on compiled plans, that branches which may run side by side touch no common bytes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations

import pytest
from tr_graph_testlib import mlp_spec, part_calls

from tr.core.errors import CompileError
from tr.core.memory import Span
from tr.core.phase import StreamKind as S
from tr.graph.blueprint import bn, cbr, conv, fc, gap, maxpool, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.resident import ResidentInput
from tr.graph.steps import Part as P
from tr.graph.steps import assemble, build_steps, train_recipe, val_parts
from tr.tensor.dtensor import DTensor
from tr.tensor.program import Program, Step

PLAIN_STEPS = ["train_a", "train_last_a", "train_b", "train_last_b", "val_a", "val_last_a", "transfer_a", "val_b",
               "val_last_b", "transfer_b", "clear_metrics", "epoch_begin", "epoch_order", "val_begin", "epoch_end",
               "val_end"]
EMA_STEPS = ["ema_prepare", "ema_start", "sema_switch", "val_ema_a", "val_ema_last_a", "val_ema_b", "val_ema_last_b"]
CNN = seq(cbr(8, 3, p=1), cbr(16, 3, p=1), maxpool(2), conv(16, 3, p=1), bn(), relu(), gap(), fc(5))


# --- the recipe ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ab", ["a", "b"])
@pytest.mark.parametrize("last", [False, True])
def test_the_training_step_is_four_branches(ab, last):
    r = train_recipe(ab, last)
    first_fwd, first_bwd = {"a": (P.FIRST_FWD_A, P.FIRST_BWD_A), "b": (P.FIRST_FWD_B, P.FIRST_BWD_B)}[ab]
    metrics = P.ACCUM_METRICS_TRAIN_LAST if last else P.ACCUM_METRICS
    assert [(stream, after) for stream, _, after in r] == [(S.COMP_1, ()), (S.UPDATE, (0,)), (S.COMP_1, (0,)),
                                                           (S.COMP_1, (1, 2))]
    assert [parts for _, parts, _ in r] == [
        (P.ACCUM_WINDOW, P.ZERO_GRAD, first_fwd, P.DEEP_FWD_BWD),  # (ACCUM_*: only with gradient accumulation)
        (P.CAST_EARLY, P.ACCUM_EARLY, P.ACCUM_RESULT, P.REDUCE_EARLY),  # the early bucket beside the first layer's
        (first_bwd, P.CAST_LATE, P.ACCUM_LATE),  # backward, its sum before the all-reduce
        (P.REDUCE_LATE, P.REDUCE_RUNNING, P.CHECK_FINITE, metrics, P.UPDATE_RUNNING, P.OPTIMIZER, P.LOSS_SCALE,
         P.EMA_UPDATE, P.CAST_WORKING),  # after both buckets and the backward
    ]
    held = train_recipe(ab, last, collectives=False)  # a data-parallel window's holding micro-step
    assert [parts for _, parts, _ in held] == [tuple(p for p in parts if p not in (
        P.REDUCE_EARLY, P.REDUCE_LATE, P.REDUCE_RUNNING)) for _, parts, _ in r]


@pytest.mark.parametrize("last", [False, True])
def test_the_nan_check_follows_the_statistics_and_precedes_the_metric_sums(last):
    # the flag covers the all-reduced statistics (every rank agrees), and a skipped step's loss is not summed;
    # the statistics, the weights and their EMA and working copies change only after the check
    tail = train_recipe("a", last)[3][1]
    metrics = P.ACCUM_METRICS_TRAIN_LAST if last else P.ACCUM_METRICS
    assert tail.index(P.REDUCE_LATE) < tail.index(P.REDUCE_RUNNING) < tail.index(P.CHECK_FINITE) < tail.index(metrics)
    assert (tail.index(P.CHECK_FINITE) < tail.index(P.UPDATE_RUNNING) < tail.index(P.OPTIMIZER)
            < tail.index(P.EMA_UPDATE) < tail.index(P.CAST_WORKING))
    # the loss scale changes after the optimizer divided the step's gradients by the scale they were made with
    assert tail.index(P.OPTIMIZER) < tail.index(P.LOSS_SCALE)


def test_each_recipe_names_each_part_once_and_only_its_own_buffer():
    for ab, other in (("a", "b"), ("b", "a")):
        for last in (False, True):
            parts = [x for _, ps, _ in train_recipe(ab, last) for x in ps]
            assert len(parts) == len(set(parts)) == 20  # (4 of them gradient accumulation's)
            assert not any(x.value.endswith(f"_{other}") for x in parts)
            assert P.TRANSFER_A not in parts and P.TRANSFER_B not in parts  # the transfers are steps of their own
    assert val_parts("b", False) == (P.INFER_B, P.ACCUM_METRICS)
    assert val_parts("a", True) == (P.INFER_A, P.ACCUM_METRICS_VAL_LAST)
    assert val_parts("b", True, ema=True) == (P.INFER_EMA_B, P.ACCUM_METRICS_VAL_LAST)


# --- assemble --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fake:
    """A stand-in call: which part and which variant it was asked for."""

    part: str
    variant: str = ""


ACCUM = frozenset([P.ACCUM_WINDOW, P.ACCUM_EARLY, P.ACCUM_LATE, P.ACCUM_RESULT, P.ACCUM_RESET])  # accumulation's


def _calls(empty=(), accumulate=False):
    """calls(part) -> one Fake per part, none for the parts in ``empty`` nor, unless ``accumulate``, for gradient
    accumulation's parts (a plan without it has no calls there)."""
    return lambda p: () if p in empty or (p in ACCUM and not accumulate) else (Fake(p.value),)


def _order(recipe):
    return [Fake(x.value) for _, parts, _ in recipe for x in parts if x not in ACCUM]


def test_assemble_keeps_every_branch_with_calls():
    r = train_recipe("a", False)
    step = assemble("train_a", r, _calls())
    assert step.name == "train_a"
    assert [(b.stream, b.after) for b in step.branches] == [(s, a) for s, _, a in r]
    assert list(step.calls) == _order(r)  # the branches one after another, each in its parts' order
    assert step.branches[1].calls == (Fake("cast_early_grads"), Fake("reduce_early_grads"))


def test_an_empty_side_branch_is_dropped_and_the_waits_re_indexed():
    r = train_recipe("b", True)
    step = assemble("train_last_b", r, _calls({P.CAST_EARLY, P.REDUCE_EARLY}))  # nothing on UPDATE
    assert [(b.stream, b.after) for b in step.branches] == [(S.COMP_1, ()), (S.COMP_1, (0,)), (S.COMP_1, (1,))]
    assert step.branches[1].calls == (Fake("first_bwd_b"), Fake("cast_late_grads"))
    assert step.branches[2].calls[0] == Fake("reduce_late_grads")
    assert list(step.calls) == [c for c in _order(r) if c.part not in ("cast_early_grads", "reduce_early_grads")]


def test_an_empty_branch_on_the_first_stream_is_kept():
    # (the first layer's backward is empty when nothing before the second layer is trained: the branch stays,
    # so the waits of the last branch keep their meaning)
    r = train_recipe("a", False)
    step = assemble("train_a", r, _calls({P.FIRST_BWD_A, P.CAST_LATE}))
    assert [(b.stream, b.after, len(b.calls)) for b in step.branches] == [
        (S.COMP_1, (), 3), (S.UPDATE, (0,), 2), (S.COMP_1, (0,), 0), (S.COMP_1, (1, 2), 9)]
    empty = assemble("epoch_end", ((S.COMP_1, (P.FOLD_RUNNING,), ()),), _calls({P.FOLD_RUNNING}))
    assert [(b.stream, b.calls, b.after) for b in empty.branches] == [(S.COMP_1, (), ())]


def test_a_dropped_branch_in_the_middle_renumbers_the_later_ones():
    r = ((S.COMP_1, (P.ZERO_GRAD,), ()), (S.UPDATE, (P.REDUCE_EARLY,), (0,)), (S.UPDATE, (P.REDUCE_LATE,), (0,)),
         (S.COMP_1, (P.OPTIMIZER,), (1, 2)))
    step = assemble("x", r, _calls({P.REDUCE_EARLY}))
    assert [(b.stream, b.after, b.calls) for b in step.branches] == [
        (S.COMP_1, (), (Fake("zero_grad"),)), (S.UPDATE, (0,), (Fake("reduce_late_grads"),)),
        (S.COMP_1, (1,), (Fake("optimizer"),))]



def test_a_wait_on_a_dropped_branch_becomes_a_wait_on_what_it_waited_for():
    # C (a third stream) waited only for the dropped B: it must still follow A, or its stream would start from
    # nothing (check_branches refuses that); D's wait on A through C is implied and not repeated
    r = ((S.COMP_1, (P.ZERO_GRAD,), ()), (S.UPDATE, (P.REDUCE_EARLY,), (0,)), (S.COMP_2, (P.REDUCE_LATE,), (1,)),
         (S.COMP_1, (P.OPTIMIZER,), (0, 2)))
    step = assemble("x", r, _calls({P.REDUCE_EARLY}))
    assert [(b.stream, b.after) for b in step.branches] == [(S.COMP_1, ()), (S.COMP_2, (0,)), (S.COMP_1, (1,))]

# --- build_steps -----------------------------------------------------------------------------------------------

def _variant_of(name: str) -> str:
    """The variant a step binds, by its name (tr.graph.steps)."""
    if name.startswith("train_last_"):
        return "train_last"
    if name.startswith(("val_last_", "val_ema_last_")):
        return "val_last"
    if name.startswith(("val_", "ema_prepare")):
        return "val"
    return "train"


@pytest.mark.parametrize("ema, resident", [(False, False), (True, False), (False, True), (True, True)])
def test_build_steps_binds_each_step_to_its_variant(ema, resident):
    asked: list[tuple[str, P]] = []

    def bound(variant: str, part: P):
        if part in ACCUM:  # (no gradient accumulation: nothing there)
            return ()
        asked.append((variant, part))
        return (Fake(part.value, variant),)

    steps = build_steps(bound, has_ema=ema, has_input_val=resident)
    extra = ["val_transfer_a", "val_transfer_b"] if resident else []
    assert sorted(steps) == sorted(PLAIN_STEPS + extra + (EMA_STEPS if ema else []))
    assert all(name == s.name for name, s in steps.items())
    for name, s in steps.items():
        assert {c.variant for c in s.calls} == {_variant_of(name)}, name
    # every part a step holds was asked for under that step's variant; every request landed in some step
    assert sorted({(c.variant, c.part) for s in steps.values() for c in s.calls}) == sorted(
        {(v, x.value) for v, x in asked})
    if ema:
        assert [c.part for c in steps["val_ema_last_b"].calls] == ["infer_ema_b", "accum_metrics_val_last"]
        assert [c.part for c in steps["sema_switch"].calls] == ["sema_switch"]
    if resident:
        assert [c.part for c in steps["val_transfer_b"].calls] == ["input_val_b"]
    assert [c.part for c in steps["epoch_begin"].calls] == ["cast_working_copies"]
    assert [c.part for c in steps["epoch_end"].calls] == ["fold_running_stats"]
    assert [c.part for c in steps["val_end"].calls] == ["reduce_result_sum"]


def test_accumulation_on_several_ranks_adds_the_steps_without_collectives():
    def bound(variant: str, part: P):
        return (Fake(part.value, variant),)

    steps = build_steps(bound, has_ema=False, has_input_val=False, hold_steps=True)
    assert sorted(steps) == sorted(PLAIN_STEPS + ["train_hold_a", "train_hold_b"])
    held = [c.part for c in steps["train_hold_b"].calls]
    assert held == [c.part for c in steps["train_b"].calls
                    if c.part not in ("reduce_early_grads", "reduce_late_grads", "reduce_running_stats")]
    assert held[:2] == ["accum_window", "zero_grad"] and {c.variant for c in steps["train_hold_b"].calls} == {"train"}
    assert [c.part for c in steps["epoch_order"].calls] == ["input_train_begin", "accum_reset"]
    assert [c.part for c in steps["epoch_begin"].calls] == ["cast_working_copies"]  # (predict launches it too)


def _resident() -> ResidentInput:
    return ResidentInput(600, 100, (28, 28, 1), (("crop_slot", 2),), (("mean", (0.1307,)), ("std", (0.3081,))))


PLANS = {
    "plain": lambda m: compile_program(m.mlp_mnist, mlp_spec()),
    "ema": lambda m: compile_program(CNN, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4, amp=True,
                                                   ema_decay=0.9, last_train_batch=3)),
    "resident": lambda m: compile_program(seq(fc(32), relu(), fc(10)), mlp_spec(batch=50, input=_resident())),
}


@pytest.mark.parametrize("kind", list(PLANS))
def test_a_compiled_plan_has_its_steps(models, kind):
    p = PLANS[kind](models)
    want = PLAIN_STEPS + {"plain": [], "ema": EMA_STEPS, "resident": ["val_transfer_a", "val_transfer_b"]}[kind]
    assert sorted(p.steps) == sorted(want)
    calls = [c for s in p.steps.values() for c in s.calls]
    assert 0 < p.num_ops == len({id(c) for c in calls}) <= len(calls)
    # one branch for everything but training
    assert {name for name, s in p.steps.items() if len(s.branches) > 1} == {"train_a", "train_b", "train_last_a",
                                                                              "train_last_b"}


def test_the_compiled_mlp_step_runs_its_parts_in_recipe_order(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    parts = [c.part for c in p.step("train_a").calls]
    assert parts == (["zero_grad"] + ["first_fwd_a"] * 2 + ["deep_fwd_bwd"] * 10 + ["reduce_early_grads"]
                     + ["first_bwd_a"] * 2 + ["reduce_late_grads"] + ["check_finite"] * 2 + ["accum_metrics"]
                     + ["optimizer"] * 4)  # lr_lookup, two range_optimizer, scalar_increment
    assert [c.part for c in p.step("val_last_b").calls] == ["infer_b"] * 5 + ["accum_metrics_val_last"]
    assert [[c.part for c in b.calls] for b in p.step("train_b").branches][1:3] == [["reduce_early_grads"],
                                                                                   ["first_bwd_b"] * 2]


@pytest.mark.parametrize("kind", list(PLANS))
def test_every_call_of_every_step_carries_its_part(models, kind):
    p = PLANS[kind](models)
    labels = {x.value for x in P}
    for name, step in p.steps.items():
        for c in step.calls:
            assert c.part in labels, (name, c)
    # a step holds only its own buffer's and its own variant's parts
    for ab, other in (("a", "b"), ("b", "a")):
        for name in (f"train_{ab}", f"train_last_{ab}", f"val_{ab}", f"val_last_{ab}"):
            assert not any(c.part.endswith(f"_{other}") for c in p.step(name).calls), name
    val = [s for name, s in p.steps.items() if re.fullmatch(r"val_(ema_)?(last_)?[ab]", name)]
    assert len(val) == (8 if kind == "ema" else 4)
    assert all(c.part.startswith(("infer_", "accum_metrics")) for s in val for c in s.calls)


def test_program_step_names_the_steps_when_one_is_missing(models):
    p = PLANS["plain"](models)
    assert p.step("val_end") is p.steps["val_end"] and isinstance(p.step("val_end"), Step)
    with pytest.raises(CompileError, match=r"^the program has no step 'val_ema_a'; it has \['clear_metrics', "
                                           r"'epoch_begin', 'epoch_end', 'epoch_order', 'train_a', .*'val_last_b'\]$"):
        p.step("val_ema_a")  # a plan without EMA has no EMA steps


# --- branches that may run side by side ------------------------------------------------------------------------

def _ranges(p: Program, step: Step, i: int) -> list[tuple[int, int, str]]:
    """The byte ranges branch ``i`` of the step reads or writes, each with the call and argument."""
    out = []
    for c in step.branches[i].calls:
        for a, v in c.args.items():
            if isinstance(v, DTensor) and v.allocated:
                out.append((v.offset, v.end, f"{c.part}: {c.op} {a}={v.name}"))
            elif isinstance(v, Span):
                lo, hi = p.layout.span(v)
                if hi > lo:
                    out.append((lo, hi, f"{c.part}: {c.op} {a}={v!r}"))
    return out


def _concurrent(step: Step) -> list[tuple[int, int]]:
    """Pairs of branches with no order between them: different streams, neither waiting (through others) for the
    other."""
    before: list[set[int]] = []
    for i, b in enumerate(step.branches):
        assert all(0 <= j < i for j in b.after), (step.name, i, b.after)
        if b.stream != step.branches[0].stream:
            assert b.after, f"{step.name}: branch {i} starts a stream without waiting for any branch"
        deps = {j for j in b.after} | {k for j in b.after for k in before[j]}
        deps |= {j for j in range(i) if step.branches[j].stream == b.stream}  # one stream runs in order
        before.append(deps | {k for j in list(deps) for k in before[j]})
    n = len(step.branches)
    return [(i, j) for i, j in combinations(range(n), 2) if i not in before[j]]


@pytest.mark.parametrize("spec", [
    dict(amp=True), dict(amp=False), dict(amp=True, ema_decay=0.9, optimizer="adamw"),
    dict(amp=True, optimizer="lars", weight_decay=1e-4)], ids=["amp", "fp32", "amp-ema-adamw", "amp-lars"])
def test_side_by_side_branches_touch_no_common_bytes(spec):
    p = compile_program(CNN, mlp_spec(input_shape=(8, 8, 3), num_classes=5, batch=4, last_train_batch=3, **spec))
    for name in ("train_a", "train_b", "train_last_a", "train_last_b"):
        step = p.step(name)
        pairs = _concurrent(step)
        # the early bucket's cast and all-reduce (UPDATE) run beside the first layer's backward (COMP_1)
        assert pairs == [(1, 2)], name
        assert step.branches[1].stream is S.UPDATE and part_calls(p, name, P.REDUCE_EARLY)
        for i, j in pairs:
            for a0, a1, what_a in _ranges(p, step, i):
                for b0, b1, what_b in _ranges(p, step, j):
                    assert a1 <= b0 or b1 <= a0, f"{name}: {what_a} and {what_b} share bytes"
    assert all(_concurrent(s) == [] for name, s in p.steps.items() if not name.startswith("train_"))
