"""Gradient accumulation (task.accumulate(k)): an optimizer step consumes a window of k micro-batches.

The captured training step is the micro-step; whether it closes its window is decided on the device, with no
host read and, on one rank, no second capture:

- ``accum_window`` (first in the step) advances the epoch's micro-step position ``accum_pos`` and writes
  ``accum_hold`` (this micro-step does not close its window), ``accum_first`` (it opens one) and ``accum_div`` (this
  rank's samples in the window: the loss gradient's divisor, so each sample's gradient is the one a single batch
  of the window's samples would give it). A window is k micro-steps, the epoch's last one possibly fewer; windows
  never cross epochs (epoch_order, which only the training loop launches, resets the position).
- ``range_accumulate`` (after the 16-bit gradients are widened, before the all-reduce) keeps the window's FP32 sum
  in GRAD_ACCUM on a holding micro-step and writes the window's sum into GRAD on the closing one, so every reader of
  GRAD (the all-reduce, the finite check, clipping, the optimizers) is unchanged. The sum is a left fold in
  micro-step order: A_0 = g_0, A_j = A_{j-1} + g_j in FP32.
- On a holding micro-step the finite check sets the skip flag without reading, so everything that skips a skipped
  step (the optimizers, the EMA, clip_agc, the metric sums) waits for the window's end; the skipped-step count, the
  loss scale's update and the step counter hold too: the LR table, the EMA warmup, Adam's t and checkpoints count
  optimizer steps. A non-finite micro-gradient reaches the window's sum and skips the whole window.
- ``window_result`` keeps the window's sample-weighted loss and metric sums and, at the window's end, leaves their
  mean in the step result, which the metric sums then weigh by the window's samples.
- Batch norm normalises each micro-batch by its own statistics and updates its running statistics after every
  micro-batch, as PyTorch does (their own finite check, ``stats_flag``); the window does not act as one batch there.

Data-parallel runs cannot gate a collective on the device, so with several ranks the task also captures
``train_hold_{a,b}``, the step without its collectives, and launches it where its own micro-step count says the
window holds (tr.graph.steps.build_steps); the closing step all-reduces the window's sums.
"""

from __future__ import annotations

from dataclasses import replace

from tr.core.memory import Role, Span
from tr.graph.graph import RUNNING_NEXT, ComputationGraph, SymOp
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part

HOLD, FIRST, DIV, POS, STATS_FLAG, WINDOW = ("accum_hold", "accum_first", "accum_div", "accum_pos", "stats_flag",
                                            "accum_window")
SCALARS = (POS, HOLD, FIRST, DIV, STATS_FLAG, WINDOW)  # declared by the compiler when accumulating


def accumulates(spec: CompileSpec) -> bool:
    return spec.accumulate > 1


def window_result(batch_role: str) -> list[SymOp]:
    """ACCUM_RESULT of a training variant: the micro-batch's result weighted by its own sample count."""
    return [SymOp("window_result", {"result": "result", "window": WINDOW, "batch": batch_role, "hold": HOLD,
                                    "first": FIRST}, {}, -1, "the window's mean loss and metrics")]


def add_accumulation(cg: ComputationGraph, spec: CompileSpec, has: object) -> None:
    """Rewrite the update graphs of ``cg`` (made by add_update_graphs) for spec.accumulate micro-batches a step."""
    g = cg.graphs
    assert spec.micro_steps is not None
    last = spec.last_train_batch if spec.last_train_batch is not None else spec.batch
    g[Part.ACCUM_WINDOW] = [SymOp("accum_window", {"pos": POS, "hold": HOLD, "first": FIRST, "div": DIV},
                                  {"accumulate": spec.accumulate, "steps": spec.micro_steps, "batch": spec.batch,
                                   "last_batch": last}, -1, "this micro-step's place in its window")]
    g[Part.ACCUM_RESET] = [SymOp("batch_restart", {"pos": POS}, {}, -1, "windows start with the epoch")]
    for early, part in ((True, Part.ACCUM_EARLY), (False, Part.ACCUM_LATE)):
        src = Span.of(Role.GRAD, early=early)
        if has(src):  # type: ignore[operator]
            g[part] = [SymOp("range_accumulate", {"src": src, "acc": Span.of(Role.GRAD_ACCUM, early=early),
                                                  "hold": HOLD, "first": FIRST}, {}, -1,
                             "the window's gradient sum")]
    checks = []
    for op in g.get(Part.CHECK_FINITE, []):
        if op.op == "range_check_finite" and op.args.get("span") == RUNNING_NEXT:
            # every micro-batch's running statistics are checked for their own copy (stats_flag); the window's
            # last ones also skip the window as a non-finite gradient does
            checks.append(SymOp("range_check_finite", {**op.args, "flag": STATS_FLAG}, {"clip": 0.0}, op.layer,
                                "BN running statistics of this micro-batch"))
        if op.op in ("range_check_finite", "count_flag"):
            op = replace(op, args={**op.args, "hold": HOLD})
        checks.append(op)
    g[Part.CHECK_FINITE] = checks
    g[Part.UPDATE_RUNNING] = [replace(op, args={**op.args, "flag": STATS_FLAG}) if op.op == "range_copy" else op
                              for op in g.get(Part.UPDATE_RUNNING, [])]
    for part in (Part.LOSS_SCALE, Part.OPTIMIZER, Part.OPTIMIZER_FROZEN):
        g[part] = [replace(op, args={**op.args, "hold": HOLD})
                   if op.op in ("loss_scale_update", "scalar_increment") else op for op in g.get(part, [])]
    g[Part.ACCUM_METRICS_TRAIN_LAST] = [replace(op, args={**op.args, "batch": DIV})
                                        for op in g.get(Part.ACCUM_METRICS_TRAIN_LAST, [])]
    cg.train_metrics_weight = DIV  # ACCUM_METRICS of the training variants (tr.graph.atlas)
