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
import numbers
from dataclasses import dataclass

from tr.core.errors import ConfigError
from tr.task.executor import AB, capture_step
from tr.tensor.program import Program


@dataclass(frozen=True)
class EmaConfig:
    decay: float
    validate: bool
    switch: bool  # SEMA: weights <- EMA weights at every epoch's end
    warmup: float = 0.0  # > 0: the decay is decay * (1 - exp(-step / warmup)) (tr.graph.ema); 0: constant

    def __post_init__(self) -> None:
        d, what = self.decay, "sema" if self.switch else "ema"
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or not 0 < d < 1:
            raise ConfigError(f"{what} decay must be a number in (0, 1), got {d!r}")
        w = self.warmup
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"{what} warmup must be a finite number >= 0 (steps; 0: none), got {w!r}")
        if not isinstance(self.validate, bool):
            raise ConfigError(f"ema validate must be True or False, got {self.validate!r}")


@dataclass
class EmaSteps:
    """The captured graphs of EMA around the training steps."""

    start: object  # E <- W (the EMA's first value)
    switch: object  # W <- E (SEMA)
    prepare: object | None  # fold EMA BN parameters, AMP cast (step ema_prepare); None: nothing to do
    val: list  # [buffer]
    val_last: list


def capture_ema(backend, program: Program, validate: bool) -> EmaSteps:
    prep = program.step("ema_prepare")
    val = val_last = []
    if validate:
        val = [capture_step(backend, program, f"val_ema_{ab}") for ab in AB]
        val_last = [capture_step(backend, program, f"val_ema_last_{ab}") for ab in AB]
    return EmaSteps(start=capture_step(backend, program, "ema_start"),
                    switch=capture_step(backend, program, "sema_switch"),
                    prepare=capture_step(backend, program, "ema_prepare") if prep.calls else None, val=val,
                    val_last=val_last)


def after_epoch(task, epoch: int, rec, validate: bool) -> None:
    """The EMA work of an epoch's end: validate the EMA model (when asked and ``validate``), then SEMA's
    switch. The main model's folded BN parameters are refolded after each (both overwrite them)."""
    cfg, st, be = task.config.task.ema, task._ema_steps, task.backend
    if cfg.validate and validate:
        if st.prepare is not None:
            be.launch(st.prepare)
        _, rec.ema_top1, rec.ema_top5 = task._validate(epoch, st.val, st.val_last, "EMA val", ema=True)
        be.launch(task._steps.epoch_end)
    if cfg.switch:
        be.launch(st.switch)
        be.launch(task._steps.epoch_end)
