"""EMA and SEMA of a DeepLearningTask (the plan's side is tr.graph.ema).

EMA_t = decay*EMA_{t-1} + (1-decay)*W_t runs on the device inside every captured training step, after the
optimizer, and is skipped with the step when the NaN flag is set. The EMA weights start as a copy of the
weights when training starts (epoch 0, so weights loaded by load_torch() are the start too). With
validation the EMA model is validated after the main one with the main model's BN running statistics (its
own gamma/beta folded with them; the main model's fold is restored afterwards). SEMA (the seed's
use_sema/sema_decay) is EMA plus a switch: at the end of every epoch the weights become the EMA weights
(momentum buffers are kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tr.core.errors import ConfigError
from tr.core.graph_id import GraphId
from tr.core.memory import Role, Span
from tr.core.ops import OpCall
from tr.task.executor import gather, val_step_order
from tr.tensor.program import Program

MASTER_WEIGHTS, EMA_WEIGHTS = Span.of(Role.PARAM), Span.of(Role.EMA)  # group for group, byte for byte


@dataclass(frozen=True)
class EmaConfig:
    decay: float
    validate: bool
    switch: bool  # SEMA: weights <- EMA weights at every epoch's end

    def __post_init__(self) -> None:
        d = self.decay
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or not 0 < d < 1:
            raise ConfigError(f"{'sema' if self.switch else 'ema'} decay must be a number in (0, 1), got {d!r}")
        if not isinstance(self.validate, bool):
            raise ConfigError(f"ema validate must be True or False, got {self.validate!r}")


@dataclass
class EmaSteps:
    """The captured graphs of EMA around the training steps."""

    start: object  # E <- W (the EMA's first value)
    switch: object  # W <- E (SEMA)
    prepare: object | None  # fold EMA BN parameters, AMP cast (CAST_EMA_FP32_TO_FP16); None: nothing to do
    val: list  # [buffer]
    val_last: list


def _copy(src: Span, dst: Span, label: str) -> OpCall:
    return OpCall.make("range_copy", {"src": src, "dst": dst}, {}, -1, label)


def capture_ema(backend, program: Program, validate: bool) -> EmaSteps:
    prep = gather(program, "val", (GraphId.CAST_EMA_FP32_TO_FP16,))
    val = val_last = []
    if validate:
        val = [backend.capture(f"ema_val_step_{'AB'[b]}", gather(program, "val", val_step_order(b, False, True)))
               for b in (0, 1)]
        val_last = [backend.capture(f"ema_val_last_step_{'AB'[b]}",
                                    gather(program, "val_last", val_step_order(b, True, True))) for b in (0, 1)]
    return EmaSteps(
        start=backend.capture("ema_start", [_copy(MASTER_WEIGHTS, EMA_WEIGHTS, "EMA weights start as the weights")]),
        switch=backend.capture("sema_switch", [_copy(EMA_WEIGHTS, MASTER_WEIGHTS, "SEMA: weights <- EMA")]),
        prepare=backend.capture("ema_prepare", prep) if prep else None, val=val, val_last=val_last)


def after_epoch(task, epoch: int, rec, validate: bool) -> None:
    """The EMA work of an epoch's end: validate the EMA model (when asked and ``validate``), then SEMA's
    switch. The main model's folded BN parameters are refolded after each (both overwrite them)."""
    cfg, st, be = task._ema, task._ema_steps, task.backend
    if cfg.validate and validate:
        if st.prepare is not None:
            be.launch(st.prepare)
        _, rec.ema_top1, rec.ema_top5 = task._validate(epoch, st.val, st.val_last, "EMA val")
        be.launch(task._steps.epoch_end)
    if cfg.switch:
        be.launch(st.switch)
        be.launch(task._steps.epoch_end)
