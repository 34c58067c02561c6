"""Training results and the seed's epoch table (the progress bar is tr.task.progress)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class EpochRecord:
    epoch: int  # 1-based
    train_loss: float
    lr: float
    seconds: float
    val_loss: float | None = None
    top1: float | None = None  # fractions in [0, 1]
    top5: float | None = None
    skipped_steps: int = 0
    ema_top1: float | None = None  # the EMA model's (when EMA validation is on)
    ema_top5: float | None = None
    # tr.data's native pipeline only (tr.data.EpochTimes of the training pass): seconds the trainer waited for
    # batches (the pipeline was the limit), and the share of the pass its workers were busy
    data_wait_s: float | None = None
    pipeline_busy: float | None = None
    # JPEGs decoded on the device (device_decode) only: the training pass's images the device decoder did not take
    # (progressive or arithmetic-coded files on a hardware JPEG engine), decoded on the CPU instead
    cpu_decoded: int | None = None


@dataclass
class TrainingResult:
    """What run() did. The bests are over the epochs it validated: None when it validated none (no validation
    data, or validate_every skipped them all), never a score of 0."""

    best_top1: float | None = None
    best_top5: float | None = None
    best_epoch: int | None = None  # 1-based
    epochs: int = 0
    seconds: float = 0.0
    history: list[EpochRecord] = field(default_factory=list)
    skipped_steps: int = 0
    early_stopped: bool = False
    best_ema_top1: float | None = None  # the EMA model's best top-1 (and its top-5) over the validated epochs
    best_ema_top5: float | None = None

    def as_dict(self) -> dict:
        """The summary; the best_* keys only when an epoch was validated."""
        out = {"epochs": self.epochs, "seconds": round(self.seconds, 3), "skipped_steps": self.skipped_steps}
        if self.best_epoch is not None:
            out = {"best_top1": self.best_top1, "best_top5": self.best_top5, "best_epoch": self.best_epoch, **out}
        if self.best_ema_top1 is not None:
            out.update(best_ema_top1=self.best_ema_top1, best_ema_top5=self.best_ema_top5)
        return out

    def add(self, rec: EpochRecord) -> None:
        """Count a validated epoch's accuracies into the bests."""
        if rec.top1 is not None and (self.best_top1 is None or rec.top1 > self.best_top1):
            self.best_top1, self.best_top5, self.best_epoch = rec.top1, rec.top5, rec.epoch
        if rec.ema_top1 is not None and (self.best_ema_top1 is None or rec.ema_top1 > self.best_ema_top1):
            self.best_ema_top1, self.best_ema_top5 = rec.ema_top1, rec.ema_top5


class EpochTable:
    """The seed's log: a '=' framed header, then one row per epoch (widths 6/10/10/9/9/12/7; with ``ema``
    the EMA model's "EMA Top1%" and "EMA Top5%", 9 each, after Top5%)."""

    def __init__(self, out: TextIO | None = None, validate: bool = True, ema: bool = False) -> None:
        self.out = out or sys.stdout
        self.validate = validate
        self.ema = validate and ema
        cols = ["Epoch", "Train Loss"]
        if validate:
            cols += ["  Val Loss", "    Top1%", "    Top5%"]
        if self.ema:
            cols += ["EMA Top1%", "EMA Top5%"]
        cols += ["          LR", "Time(s)"]
        self.header = f"{cols[0]:>6} | " + " | ".join(cols[1:])
        self.rule = "=" * len(self.header)
        self._started = False

    def row(self, r: EpochRecord) -> None:
        if not self._started:
            print(self.rule, self.header, self.rule, sep="\n", file=self.out)
            self._started = True
        parts = [f"{r.epoch:>6}", f"{r.train_loss:>10.6f}"]
        if self.validate:
            if r.top1 is None:
                parts += [f"{'-':>10}", f"{'-':>8} ", f"{'-':>8} "]
            else:
                parts += [f"{r.val_loss:>10.6f}", f"{r.top1 * 100:>8.2f}%", f"{(r.top5 or 0) * 100:>8.2f}%"]
        if self.ema:
            if r.ema_top1 is None:
                parts += [f"{'-':>8} ", f"{'-':>8} "]
            else:
                parts += [f"{r.ema_top1 * 100:>8.2f}%", f"{(r.ema_top5 or 0) * 100:>8.2f}%"]
        parts += [f"{r.lr:>12.6f}", f"{r.seconds:>6.1f}s"]
        line = " | ".join(parts)
        if r.skipped_steps:
            line += f"   ({r.skipped_steps} non-finite step(s) skipped)"
        if r.cpu_decoded:
            line += f"   ({r.cpu_decoded} images decoded on the CPU: the device decoder refused them)"
        print(line, file=self.out, flush=True)

    def close(self) -> None:
        if self._started:
            print(self.rule, file=self.out, flush=True)
