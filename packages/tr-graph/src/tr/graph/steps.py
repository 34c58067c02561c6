"""The named steps of a compiled program: what the task captures and launches, as parallel branches of op calls.

The compiler emits op calls into parts (:class:`Part`: the training chain's pieces, the casts, the collectives,
the optimizer, ...), binds them to each variant's tensors (tr.graph.atlas) and assembles the steps here; a part
survives only as each call's ``part`` label, for profiles and the plan printout.

The training step (the seed runs it as ~15 launches; tr captures it as one graph) is four branches: once the
deep layers' backward is done, the early gradient bucket is cast and all-reduced on the UPDATE stream while
COMP_1 runs the first layer's backward (which writes only the late bucket and reads neither the early one nor
the step result); the late bucket's all-reduce and everything after it wait for both. With one rank the
collectives record no work (a one-rank all-reduce captures nothing) and only the AMP cast runs on the side.
The NaN check follows every collective it reads (both gradient buckets and the running statistics, so all
ranks agree on the flag), and the metric sums follow the check (a skipped step's loss is not summed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.tensor.program import Branch, Step, at_side


class Part(Enum):
    """Where the compiler files an op call; the value is the call's ``part`` label."""

    TRANSFER_A = "transfer_a"
    TRANSFER_B = "transfer_b"
    FIRST_FWD_A = "first_fwd_a"  # the first layer's forward reading buffer a (and the resident gather)
    FIRST_FWD_B = "first_fwd_b"
    DEEP_FWD_BWD = "deep_fwd_bwd"  # forward of layers 1..L with the loss, and their backward
    ZERO_GRAD = "zero_grad"
    FIRST_BWD_A = "first_bwd_a"  # the first layer's backward (no input gradient)
    FIRST_BWD_B = "first_bwd_b"
    REDUCE_LATE = "reduce_late_grads"  # the late gradient bucket, after the first layer's backward
    REDUCE_EARLY = "reduce_early_grads"  # the early bucket and the step result, beside the first layer's backward
    CAST_EARLY = "cast_early_grads"  # FP16 -> FP32 gradients of the early groups
    CAST_LATE = "cast_late_grads"
    CHECK_FINITE = "check_finite"  # the NaN/Inf check and the skipped-step count
    REDUCE_RUNNING = "reduce_running_stats"
    UPDATE_RUNNING = "update_running_stats"
    OPTIMIZER = "optimizer"
    OPTIMIZER_FROZEN = "optimizer_frozen"  # one update a trained tensor but the first trained layer's
    LOSS_SCALE = "loss_scale"  # AMP's scale update, after the optimizer divided by the step's own scale
    EMA_UPDATE = "ema_update"
    INFER_A = "infer_a"
    INFER_B = "infer_b"
    INFER_EMA_A = "infer_ema_a"
    INFER_EMA_B = "infer_ema_b"
    CAST_WORKING = "cast_working_copies"  # FP32 masters -> FP16 working copies
    PREPARE_EMA = "prepare_ema"  # fold the EMA parameters, cast the EMA working copies
    EMA_START = "ema_start"  # EMA <- masters (the EMA's first value)
    SEMA_SWITCH = "sema_switch"  # masters <- EMA (SEMA, at an epoch's end)
    ACCUM_METRICS = "accum_metrics"  # per variant: weighted by the variant's batch size
    ACCUM_METRICS_TRAIN_LAST = "accum_metrics_train_last"
    ACCUM_METRICS_VAL_LAST = "accum_metrics_val_last"
    REDUCE_RESULT_SUM = "reduce_result_sum"
    CLEAR_METRICS = "clear_metrics"
    FOLD_RUNNING = "fold_running_stats"  # inference scale and bias from the running statistics
    # an input's own parts (tr.graph.input_plan's epoch_parts; a resident data set's, tr.graph.resident):
    INPUT_TRAIN_BEGIN = "input_train_begin"  # before the epoch's training batches (a resident set's order)
    INPUT_VAL_BEGIN = "input_val_begin"  # before its validation batches
    INPUT_VAL_A = "input_val_a"  # a validation batch's own transfer (a resident set's next batch), buffer a
    INPUT_VAL_B = "input_val_b"
    ACCUM_WINDOW = "accum_window"  # gradient accumulation (tr.graph.accumulate): the micro-step's place in its window
    ACCUM_EARLY = "accum_early_grads"  # the window's gradient sum, early groups
    ACCUM_LATE = "accum_late_grads"
    ACCUM_RESULT = "accum_result"  # per training variant: the window's mean loss and metrics
    ACCUM_RESET = "accum_reset"  # windows start with the epoch


P = Part
AB = ("a", "b")
TRAIN_PARTS = frozenset([P.FIRST_FWD_A, P.FIRST_FWD_B, P.DEEP_FWD_BWD, P.FIRST_BWD_A, P.FIRST_BWD_B])
INFER_PARTS = frozenset([P.INFER_A, P.INFER_B, P.INFER_EMA_A, P.INFER_EMA_B])
TRAIN_CHAIN = {"a": (P.FIRST_FWD_A, P.DEEP_FWD_BWD, P.FIRST_BWD_A), "b": (P.FIRST_FWD_B, P.DEEP_FWD_BWD, P.FIRST_BWD_B)}
INFER_CHAIN = {"a": (P.INFER_A,), "b": (P.INFER_B,)}
TRANSFER = {"a": P.TRANSFER_A, "b": P.TRANSFER_B}

# one part list per branch: (stream, parts, the branches it waits for)
Recipe = tuple[tuple[StreamKind, tuple[Part, ...], tuple[int, ...]], ...]


COLLECTIVES = frozenset([P.REDUCE_EARLY, P.REDUCE_LATE, P.REDUCE_RUNNING])


def train_recipe(ab: str, last: bool, collectives: bool = True) -> Recipe:
    """The training step; without ``collectives``, the one a data-parallel run launches where its window holds
    (gradient accumulation: the ranks' sums are all-reduced at the window's end)."""
    first_fwd, deep, first_bwd = TRAIN_CHAIN[ab]
    comp, update = StreamKind.COMP_1, StreamKind.UPDATE
    recipe = (
        (comp, (P.ACCUM_WINDOW, P.ZERO_GRAD, first_fwd, deep), ()),
        (update, (P.CAST_EARLY, P.ACCUM_EARLY, P.ACCUM_RESULT, P.REDUCE_EARLY), (0,)),
        (comp, (first_bwd, P.CAST_LATE, P.ACCUM_LATE), (0,)),
        (comp, (P.REDUCE_LATE, P.REDUCE_RUNNING, P.CHECK_FINITE,
                P.ACCUM_METRICS_TRAIN_LAST if last else P.ACCUM_METRICS, P.UPDATE_RUNNING, P.OPTIMIZER,
                P.LOSS_SCALE, P.EMA_UPDATE, P.CAST_WORKING), (1, 2)),
    )
    if collectives:
        return recipe
    return tuple((s, tuple(p for p in parts if p not in COLLECTIVES), after) for s, parts, after in recipe)


def frozen_recipe(recipe: Recipe) -> Recipe:
    """A training recipe with the first trained layer frozen: its backward dropped (FIRST_BWD: no gradient of it is
    needed, the zeroed gradients stay zero) and the optimizer part that leaves its tensors alone."""
    first_bwd = {P.FIRST_BWD_A, P.FIRST_BWD_B}
    return tuple((s, tuple(P.OPTIMIZER_FROZEN if p is P.OPTIMIZER else p for p in parts if p not in first_bwd), after)
                 for s, parts, after in recipe)


def without_backward_of(calls: Sequence[OpCall], layer: int) -> tuple[OpCall, ...]:
    """The deep chain's calls without layer ``layer``'s backward: its calls after the first call of a later layer
    (the chain runs the forward of layers in order, then the backward in reverse). Only for the first trained
    layer, whose input gradient nothing reads."""
    out, later = [], False
    for c in calls:
        later = later or c.layer > layer
        if not (later and c.layer == layer):
            out.append(c)
    return tuple(out)


def val_parts(ab: str, last: bool, ema: bool = False) -> tuple[Part, ...]:
    """One validation step of the main model, or with ``ema`` of the EMA weights."""
    infer = {"a": P.INFER_EMA_A, "b": P.INFER_EMA_B}[ab] if ema else INFER_CHAIN[ab][0]
    return (infer, P.ACCUM_METRICS_VAL_LAST if last else P.ACCUM_METRICS)


def assemble(name: str, recipe: Recipe, calls: Callable[[Part], Sequence[OpCall]]) -> Step:
    """The step's branches with their calls; a side branch with no calls is dropped, and whoever waited for it
    waits for what it waited for instead."""
    out: list[Branch] = []
    resolved: dict[int, tuple[int, ...]] = {}  # recipe branch -> the kept branches a wait for it stands for
    before: list[set[int]] = []  # kept branch -> every kept branch it follows, directly or not
    for i, (stream, parts, after) in enumerate(recipe):
        got = tuple(c for p in parts for c in calls(p))
        deps = set(d for j in after for d in resolved[j])
        deps -= {a for d in deps for a in before[d]}  # a wait another wait already implies
        if not got and stream != recipe[0][0]:
            resolved[i] = tuple(sorted(deps))
            continue
        resolved[i] = (len(out),)
        before.append(deps | {a for d in deps for a in before[d]})
        out.append(Branch(stream, got, tuple(sorted(deps))))
    return Step(name, tuple(out))


def chain(name: str, parts: Sequence[Part], calls: Callable[[Part], Sequence[OpCall]]) -> Step:
    """A step of one branch on COMP_1: the parts' calls in order."""
    return assemble(name, ((StreamKind.COMP_1, tuple(parts), ()),), calls)


def build_steps(bound: Callable[[str, Part], Sequence[OpCall]], has_ema: bool, has_input_val: bool,
                hold_steps: bool = False, frozen_layer: int | None = None,
                sides: Sequence[int] = ()) -> dict[str, Step]:
    """Every step a task captures, by name. ``bound(variant, part)``: the part's calls bound to that variant.
    ``hold_steps``: also train_hold_{a,b}, the training step without collectives (gradient accumulation on
    several ranks); the epoch's last micro-step always closes its window, so there is no train_last twin.
    ``frozen_layer``: also a ``*_frozen`` twin of each training step, that layer (the first trained one) neither
    differentiated nor updated (frozen_recipe, without_backward_of). ``sides``: the lower training sides of
    progressive resizing; each gets every training step and the transfers again, as ``train_a@160`` (bound to
    the variants ``train@160``, ``train_last@160``), the steps without a side being the final side's."""
    steps: list[Step] = []
    twins = [("", lambda r: r, bound)]
    if frozen_layer is not None:
        def frozen_bound(v: str, p: Part) -> Sequence[OpCall]:
            calls = bound(v, p)
            return without_backward_of(calls, frozen_layer) if p is P.DEEP_FWD_BWD else calls

        twins.append(("_frozen", frozen_recipe, frozen_bound))
    for side in (None, *sides):
        def named(step: str, side: int | None = side) -> str:
            return step if side is None else at_side(step, side)

        train, last = named("train"), named("train_last")  # the side's variants
        for suffix, shape, b in twins:
            for ab in AB:
                steps.append(assemble(named(f"train_{ab}{suffix}"), shape(train_recipe(ab, False)),
                                      lambda p, b=b, v=train: b(v, p)))
                steps.append(assemble(named(f"train_last_{ab}{suffix}"), shape(train_recipe(ab, True)),
                                      lambda p, b=b, v=last: b(v, p)))
                if hold_steps:
                    steps.append(assemble(named(f"train_hold_{ab}{suffix}"),
                                          shape(train_recipe(ab, False, collectives=False)),
                                          lambda p, b=b, v=train: b(v, p)))
        if side is not None:
            for ab in AB:
                steps.append(chain(named(f"transfer_{ab}"), (TRANSFER[ab],), lambda p, v=train: bound(v, p)))
    for ab in AB:
        steps.append(chain(f"val_{ab}", val_parts(ab, False), lambda p: bound("val", p)))
        steps.append(chain(f"val_last_{ab}", val_parts(ab, True), lambda p: bound("val_last", p)))
        steps.append(chain(f"transfer_{ab}", (TRANSFER[ab],), lambda p: bound("train", p)))
        if has_input_val:
            own = {"a": P.INPUT_VAL_A, "b": P.INPUT_VAL_B}[ab]
            steps.append(chain(f"val_transfer_{ab}", (own,), lambda p: bound("val", p)))
    for name, parts, variant in (("clear_metrics", (P.CLEAR_METRICS,), "train"),
                                 ("epoch_begin", (P.CAST_WORKING,), "train"),
                                 # (only the training loop launches epoch_order: predict and load_torch launch
                                 # epoch_begin in the middle of an epoch, where an accumulation window may be open)
                                 ("epoch_order", (P.INPUT_TRAIN_BEGIN, P.ACCUM_RESET), "train"),
                                 ("val_begin", (P.INPUT_VAL_BEGIN,), "val"),
                                 ("epoch_end", (P.FOLD_RUNNING,), "train"),
                                 ("val_end", (P.REDUCE_RESULT_SUM,), "val")):
        steps.append(chain(name, parts, lambda p, v=variant: bound(v, p)))
    if has_ema:
        steps.append(chain("ema_prepare", (P.PREPARE_EMA,), lambda p: bound("val", p)))
        steps.append(chain("ema_start", (P.EMA_START,), lambda p: bound("train", p)))
        steps.append(chain("sema_switch", (P.SEMA_SWITCH,), lambda p: bound("train", p)))
        for ab in AB:
            steps.append(chain(f"val_ema_{ab}", val_parts(ab, False, True), lambda p: bound("val", p)))
            steps.append(chain(f"val_ema_last_{ab}", val_parts(ab, True, True), lambda p: bound("val_last", p)))
    return {s.name: s for s in steps}
