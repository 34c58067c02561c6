"""A compiled task's dry run: one training and one validation step on the real data, then nothing trained.

``DeepLearningTask.dry_run()`` (the seed's ``dry_run()``) launches what an epoch launches once each, the epoch's
begin, one training step (with its transfer) and the epoch's end, then one validation step between the
validation begin and end (and, with an EMA that validates, the EMA's start, preparation and one EMA validation
step), on the feeder's first batch of epoch 0 of each split; with freeze_first_layer_after, the frozen training
step too, on the same batch; with progressive resizing, each lower side's training step too, on that side's first
batch. Every captured graph was built at compile; the dry
run shows that the steps run on this data and device and what the plan costs, before hours of training.

Afterwards every tensor whose bytes outlive a step (tr.core.memory.Role.state: master weights, moments, EMA,
running statistics, folded parameters, working copies, the step, skip and loss-scale counters, the dropout
seed, the epoch sums) is written back as it was: the rest of the arena is rewritten before it is read (the
checkpoint's rule, tr.task.checkpoint.state_tensors). The data position is the epoch number (order and
augmentation are keyed by (seed, epoch, sample)) and the feeder's epochs are closed after their first batch, as
a cancelled epoch's are, so a following ``run()`` trains the bytes it trains without the dry run.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr.core.errors import PhaseError
from tr.core.phase import Phase
from tr.task import engines
from tr.task.executor import StepLauncher, scalar


@dataclass
class DryRunReport:
    """What a dry run measured and what the compiled plan holds (bytes, ops, launches, engines, host buffers)."""

    backend: str
    arena_bytes: int  # the whole arena
    bytes_by_role: dict[str, int]  # memory role name -> bytes of its regions (tr.core.memory.Role)
    ops_per_step: dict[str, int]  # step name -> op calls in it (the Program's steps)
    launches_per_step: int  # host launches per training step
    engines: dict[str, Any]  # tr.task.engines.used(task)
    host_buffers: list[dict[str, Any]]  # per staging buffer: labels and data shapes, dtypes, bytes
    train_result: tuple[float, float, float]  # the training step's (loss, top1, top5), before restoring
    val_result: tuple[float, float, float] | None  # the validation batch's (loss, top1, top5); None: no val data
    ema_val_result: tuple[float, float, float] | None = None
    seconds: float = 0.0
    ran: list[str] = field(default_factory=list)  # the steps launched, in order

    @property
    def host_buffer_bytes(self) -> int:
        return sum(b["bytes"] for b in self.host_buffers)

    def lines(self) -> list[str]:
        mib = 2 ** 20
        out = [f"dry run on {self.backend}: {self.seconds:.2f} s, ran {', '.join(self.ran)}",
               f"arena {self.arena_bytes} bytes ({self.arena_bytes / mib:.2f} MiB)"]
        out += [f"  {role:<12} {n:>14} bytes" for role, n in self.bytes_by_role.items()]
        out.append(f"launches per training step: {self.launches_per_step}")
        out.append("op calls per step: " + ", ".join(f"{k} {v}" for k, v in self.ops_per_step.items()))
        convs, att = len(self.engines.get("convolutions", [])), len(self.engines.get("attention", []))
        out.append(f"engines: {self.engines['backend']}, {convs} convolution plan(s), {att} attention op(s)")
        out.append(f"host buffers: {len(self.host_buffers)}, {self.host_buffer_bytes} bytes")
        for what, r in (("train step", self.train_result), ("validation batch", self.val_result),
                        ("EMA validation batch", self.ema_val_result)):
            if r is not None:
                out.append(f"{what}: loss {r[0]:.6f} top1 {r[1]:.4f} top5 {r[2]:.4f}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def plan_report(task: Any) -> dict[str, Any]:
    """The compiled plan's numbers a dry run reports (bytes by role, op calls per step, launches, engines,
    host buffers), from the Program and the backend, without launching anything."""
    prog = task.program
    by_role: Counter[str] = Counter()
    for region, (start, end) in prog.layout.regions.items():
        by_role[region.role.name] += end - start
    bufs = [{"labels": list(lab.shape), "labels_dtype": str(lab.dtype), "data": list(x.shape),
             "data_dtype": str(x.dtype), "bytes": int(lab.nbytes + x.nbytes)} for lab, x in task._feeder.buffers()]
    return {"backend": task.backend.name, "arena_bytes": int(prog.layout.total_bytes),
            "bytes_by_role": {r: int(n) for r, n in by_role.items() if n},
            "ops_per_step": {name: len(step.calls) for name, step in prog.steps.items()},
            "launches_per_step": int(task._steps.launches_per_step), "engines": engines.used(task),
            "host_buffers": bufs}


def dry_run(task: Any) -> DryRunReport:
    """One training and one validation step of ``task`` (compiled, between epochs) on its data, then its state
    restored (see the module docstring)."""
    if task._phase is not Phase.COMPILED:
        raise PhaseError(f"dry_run() needs a compiled task; the task is in {task._phase.name}: call compile() first")
    task._epoch_state.check("dry_run()", cancelled_too=False)
    be, prog = task.backend, task.program
    kept = [(t, be.read(t).copy()) for t in prog.tensors if t.allocated and t.region.role.state]
    t0 = time.perf_counter()
    try:
        ran, train, val, ema_val = _steps(task)
    finally:  # the arena's state as it was, after an error too
        be.synchronize()
        for t, a in kept:
            be.write(t, a)
        be.synchronize()
    return DryRunReport(**plan_report(task), train_result=train, val_result=val, ema_val_result=ema_val,
                        seconds=time.perf_counter() - t0, ran=ran)


def _result(be, prog, divide_by: float) -> tuple[float, float, float]:
    r = scalar(be, prog, "accum").astype(np.float64)[:3] / divide_by if divide_by > 0 else [math.nan] * 3
    return float(r[0]), float(r[1]), float(r[2])


def _steps(task: Any) -> tuple[list[str], tuple, tuple | None, tuple | None]:
    feeder, be, prog, st = task._feeder, task.backend, task.program, task._steps
    launch = StepLauncher(be)
    ran: list[str] = []

    def go(name: str, graph) -> None:
        be.launch(graph)
        ran.append(name)

    go("clear_metrics", st.clear_metrics)
    go("epoch_begin", st.epoch_begin)
    launch.prepare(st.epoch_order)
    ran.append("epoch_order")
    if task._ema_steps is not None:
        go("ema_start", task._ema_steps.start)
    last = feeder.steps(True) == 1
    sides = task._resolved.train_sides  # progressive resizing: the final side, then each lower side's steps
    for side in (None, *st.sides) if sides else (None,):
        if sides:
            feeder.train_side(sides[-1] if side is None else side)
        at = "" if side is None else f"@{side}"
        transfer, (train, train_last, _) = st.transfer_at(side), st.training(False, side)
        frozen = st.training(True, side) if st.frozen is not None else None
        with closing(feeder.epoch(0, True)) as batches:  # closed after one batch: its zones released
            for k, buf, _n in batches:
                name = f"{'train_last' if last else 'train'}_{'ab'[buf]}"
                launch(transfer[buf], (train_last if last else train)[buf], buf)
                ran.append(name + at)
                if frozen is not None:  # freeze_first_layer_after's twin, on the same batch
                    launch(transfer[buf], frozen[1 if last else 0][buf], buf)
                    ran.append(f"{name}_frozen{at}")
                feeder.release(k)
                break
    go("epoch_end", st.epoch_end)
    launch.synchronize()
    train = _result(be, prog, float(scalar(be, prog, "accum_samples")[0]))
    if feeder.num_samples(False) == 0:
        return ran, train, None, None
    val = _validate_one(task, launch, st.val, st.val_last, ran, "val")
    ema_val = None
    ema = task._ema_steps
    if ema is not None and ema.val:
        if ema.prepare is not None:
            go("ema_prepare", ema.prepare)
        ema_val = _validate_one(task, launch, ema.val, ema.val_last, ran, "val_ema")
    return ran, train, val, ema_val


def _validate_one(task: Any, launch: StepLauncher, val: list, val_last: list, ran: list[str],
                  name: str) -> tuple[float, float, float]:
    feeder, be, prog, st = task._feeder, task.backend, task.program, task._steps
    be.launch(st.clear_metrics)
    launch.prepare(st.val_begin)
    last = feeder.steps(False) == 1
    n = 0
    with closing(feeder.epoch(0, False)) as batches:
        for k, buf, size in batches:
            launch(st.val_transfer[buf], (val_last if last else val)[buf], buf)
            feeder.release(k)
            ran.append(f"{name}{'_last' if last else ''}_{'ab'[buf]}")
            n = size
            break
    be.launch(st.val_end)
    launch.synchronize()
    # sums over this rank's batch (data-parallel: val_end averages them over the ranks)
    return _result(be, prog, float(n))
