"""ReduceLROnPlateau: a learning rate that drops when a monitored epoch metric stops improving.

    sched = ReduceLROnPlateau(0.1).factor(0.5).patience(2).monitor("val_loss")
    task.scheduler(sched)

The rule is torch.optim.lr_scheduler.ReduceLROnPlateau's, applied once per epoch that has the metric: a value
better than the best so far (mode "min": below best * (1 - threshold) with threshold_mode "rel", below best -
threshold with "abs"; mode "max" mirrored) becomes the best and resets the count of bad epochs; otherwise the
count grows; during a cooldown after a reduction bad epochs are not counted; when the count exceeds the patience
the LR becomes max(lr * factor, min_lr) (a change of 1e-8 or less is none, as torch's eps) and the cooldown starts.

Unlike the other schedulers its LR is not a function of the step alone: the prepared table is the warm-up (if
any) and then base_lr, and the task rewrites the rest of the device's table between epochs when the rule reduces
it (tr.task.plateau); nothing happens per step. :class:`PlateauState` is that rule's state, which a checkpoint
records so a resumed run reduces where the unbroken one did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tr.algo import _validate as v
from tr.algo.scheduler import Scheduler
from tr.core.errors import ConfigError

METRICS = ("val_loss", "top1", "top5", "train_loss")  # an epoch record's fields the rule can monitor
MODES = ("min", "max")
THRESHOLD_MODES = ("rel", "abs")
EPS = 1e-8  # torch's: a reduction by this much or less is none


@dataclass(frozen=True, kw_only=True)
class ReduceLROnPlateau(Scheduler):
    """base_lr (after a warm-up, if any) until the monitored metric plateaus; see the module docstring. Fields are
    named apart from their setters: factor() -> reduce_factor, patience() -> patience_epochs, threshold() ->
    min_delta and delta_mode, cooldown() -> cooldown_epochs, min_lr() -> floor, monitor() -> metric and mode."""

    reduce_factor: float = 0.1
    patience_epochs: int = 10
    min_delta: float = 1e-4
    delta_mode: str = "rel"
    cooldown_epochs: int = 0
    floor: float = 0.0
    metric: str = "val_loss"
    mode: str = "min"

    def _validate(self) -> None:
        f = v.real("plateau factor", self.reduce_factor)
        if not 0.0 < f < 1.0:
            raise ConfigError(f"plateau factor must be in (0, 1), got {self.reduce_factor!r}")
        object.__setattr__(self, "patience_epochs", v.integer("plateau patience", self.patience_epochs, 0))
        object.__setattr__(self, "min_delta", v.non_negative("plateau threshold", self.min_delta))
        object.__setattr__(self, "cooldown_epochs", v.integer("plateau cooldown", self.cooldown_epochs, 0))
        object.__setattr__(self, "floor", v.non_negative("plateau min_lr", self.floor))
        for name, value, allowed in (("threshold mode", self.delta_mode, THRESHOLD_MODES),
                                     ("monitored metric", self.metric, METRICS), ("plateau mode", self.mode, MODES)):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {value!r}")
        if self.metric != "val_loss" and self.metric != "train_loss" and self.mode == "min":
            raise ConfigError(f"monitor({self.metric!r}) is an accuracy: it improves upwards, use mode='max'")
        if self.metric.endswith("loss") and self.mode == "max":
            raise ConfigError(f"monitor({self.metric!r}) is a loss: it improves downwards, use mode='min'")

    # --- fluent setters ----------------------------------------------------------------------
    def factor(self, f: float) -> ReduceLROnPlateau:
        """The LR is multiplied by ``f`` (in (0, 1)) at each reduction (torch's default 0.1)."""
        return replace(self, reduce_factor=f)

    def patience(self, epochs: int) -> ReduceLROnPlateau:
        """Epochs without improvement tolerated before a reduction (torch's default 10)."""
        return replace(self, patience_epochs=epochs)

    def threshold(self, delta: float, mode: str = "rel") -> ReduceLROnPlateau:
        """What counts as an improvement: by ``delta`` relative to the best ("rel") or absolute ("abs")."""
        return replace(self, min_delta=delta, delta_mode=mode)

    def cooldown(self, epochs: int) -> ReduceLROnPlateau:
        """Epochs after a reduction in which bad epochs are not counted."""
        return replace(self, cooldown_epochs=epochs)

    def min_lr(self, lr: float) -> ReduceLROnPlateau:
        """The LR never drops below ``lr``."""
        return replace(self, floor=lr)

    def monitor(self, metric: str, mode: str | None = None) -> ReduceLROnPlateau:
        """The epoch metric watched: "val_loss" (the default; mode "min"), "train_loss", or "top1" / "top5"
        (mode "max", the default for them)."""
        if mode is None:
            mode = "min" if str(metric).endswith("loss") else "max"
        return replace(self, metric=metric, mode=mode)

    # --- the schedule ------------------------------------------------------------------------
    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        return np.full_like(d, self.base)  # the rule's reductions are written into the table as they happen

    @property
    def needs_validation(self) -> bool:
        return self.metric in ("val_loss", "top1", "top5")

    def start(self) -> PlateauState:
        return PlateauState(best=math.inf if self.mode == "min" else -math.inf, lr=self.base)

    def better(self, value: float, best: float) -> bool:
        """torch's is_better: ``value`` improves on ``best`` by more than the threshold."""
        if self.mode == "min":
            edge = best * (1.0 - self.min_delta) if self.delta_mode == "rel" else best - self.min_delta
            return value < edge
        edge = best * (1.0 + self.min_delta) if self.delta_mode == "rel" else best + self.min_delta
        return value > edge

    def observe(self, state: PlateauState, value: float) -> PlateauState:
        """The state after an epoch whose metric is ``value`` (a NaN is never better: it counts as a bad epoch).
        A reduction changes ``lr``; the caller records where it takes effect (PlateauState.changes)."""
        best, bad, cool, lr = state.best, state.bad_epochs, state.cooldown_left, state.lr
        if self.better(value, best):
            best, bad = value, 0
        else:
            bad += 1
        if cool > 0:
            cool, bad = cool - 1, 0
        if bad > self.patience_epochs:
            new = max(lr * self.reduce_factor, self.floor)
            if lr - new > EPS:
                lr = new
            cool, bad = self.cooldown_epochs, 0
        return replace(state, best=best, bad_epochs=bad, cooldown_left=cool, lr=lr)

    def table_with(self, changes: tuple[tuple[int, float], ...]) -> np.ndarray:
        """The prepared table with the reductions ``changes`` ((first step, LR), in order) written in: from each
        change's step on, base_lr becomes its LR (a warm-up still ramping is scaled by LR / base_lr)."""
        table = self.table()
        pure, k, w = table.copy(), np.arange(len(table)), self.warmup_steps
        for step, lr in changes:
            scaled = pure * np.float32(lr / self.base) if self.base > 0 else pure
            table[step:] = np.where(k[step:] < w, scaled[step:], np.float32(lr))
        return table


@dataclass(frozen=True)
class PlateauState:
    """The rule's state between epochs: the best value, the bad epochs counted, the cooldown left, the current
    LR (after the warm-up) and the reductions made, each as (the first step it applies to, its LR)."""

    best: float
    lr: float
    bad_epochs: int = 0
    cooldown_left: int = 0
    changes: tuple[tuple[int, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        # best is +-inf before the first epoch: JSON holds it as a string
        return {"best": repr(self.best), "lr": self.lr, "bad_epochs": self.bad_epochs,
                "cooldown_left": self.cooldown_left, "changes": [[s, lr] for s, lr in self.changes]}

    @classmethod
    def from_dict(cls, d: Any) -> PlateauState:
        """The state a checkpoint recorded; a ConfigError naming what is malformed."""
        try:
            changes = tuple((int(s), float(lr)) for s, lr in d["changes"])
            out = cls(best=float(d["best"]), lr=float(d["lr"]), bad_epochs=int(d["bad_epochs"]),
                      cooldown_left=int(d["cooldown_left"]), changes=changes)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"the plateau state {d!r} is malformed ({type(e).__name__}: {e})") from None
        steps = [s for s, _ in out.changes]
        if not (math.isfinite(out.lr) and out.lr >= 0 and out.bad_epochs >= 0 and out.cooldown_left >= 0
                and all(s >= 0 for s in steps) and steps == sorted(steps)
                and all(math.isfinite(lr) and lr >= 0 for _, lr in out.changes)):
            raise ConfigError(f"the plateau state {d!r} holds a value out of range")
        return out
