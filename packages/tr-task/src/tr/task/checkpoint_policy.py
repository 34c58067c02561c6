"""checkpoint_every(): periodic checkpoints of a DeepLearningTask, the newest k kept and the best by a metric.

After every ``every``-th epoch the policy saves ``directory``/epoch-NNNN; with ``keep_best`` also
``directory``/best whenever the epoch's metric beats the best so far (the best survives a resume: it is read
back from best/manifest.json). What it removes is only ever its own: the pruning counts and deletes
``epoch-NNNN`` directories that are tr checkpoints (tr.task.checkpoint_files.is_checkpoint), so a user's
folder of that name survives, and a save refuses to replace anything that is not a tr checkpoint
(checkpoint_files.check_target), which ``begin`` checks for every target of the run before its first epoch.

keep_best "top1", "top5" and "val_loss" need validation data: a feeder without it is a ConfigError at
checkpoint_every() when the feeder is known then, else when run() starts. "train_loss" needs none.

In data-parallel training every rank runs the policy: every rank takes part in each save (rank 0 writes, see
tr.task.checkpoint.save_to), and rank 0 alone decides whether an epoch is the best (the best so far may come
from best/ on its disk) and shares the decision, so every rank makes the same saves.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from tr.core.errors import ConfigError
from tr.task import checkpoint, checkpoint_files

# keep_best metric -> whether larger is better
METRICS = {"top1": True, "top5": True, "val_loss": False, "train_loss": False}
_NEEDS_VALIDATION = ("top1", "top5", "val_loss")
_EPOCH_DIR = re.compile(r"epoch-(\d{4,})")


class CheckpointPolicy:
    """checkpoint_every(): after every ``every``-th epoch save ``directory``/epoch-NNNN, keep the newest
    ``keep_last`` of them, and with ``keep_best`` also ``directory``/best, the best epoch by that metric."""

    def __init__(self, every: int, directory: str | Path, keep_last: int = 1, keep_best: str | None = None,
                 feeder: Any = None) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"checkpoint_every epochs must be an integer >= 1, got {every!r}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ConfigError(f"checkpoint_every keep_last must be an integer >= 1, got {keep_last!r}")
        if keep_best is not None and keep_best not in METRICS:
            raise ConfigError(f"checkpoint_every keep_best must be one of {sorted(METRICS)} or None, got {keep_best!r}")
        self.every, self.directory, self.keep_last, self.keep_best = every, Path(directory), keep_last, keep_best
        self._best: float | None = None
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"checkpoint directory {self.directory} is a file")
        if feeder is not None:
            self.check_metric(feeder)

    def check_metric(self, feeder: Any) -> None:
        """ConfigError when keep_best's metric needs validation data and ``feeder`` has none."""
        if self.keep_best in _NEEDS_VALIDATION and feeder.num_samples(False) == 0:
            raise ConfigError(f"checkpoint_every keep_best={self.keep_best!r} needs validation data, and the "
                              f"feeder has none: give it a validation split, or keep_best='train_loss' or None")

    def begin(self, task: Any, last_epoch: int) -> None:
        """Before run()'s first epoch (every rank): the metric against the data, and on rank 0 every directory
        the run up to ``last_epoch`` (1-based) would save to, so a refused target fails now, not hours in."""
        self.check_metric(task._feeder)

        def targets() -> None:
            if task.group is None or task.group.is_main:  # (the others follow rank 0's outcome)
                for epoch in range(task._epochs_done + 1, last_epoch + 1):
                    if epoch % self.every == 0:
                        checkpoint_files.check_target(self._epoch_dir(epoch))
                if self.keep_best is not None:
                    checkpoint_files.check_target(self.directory / "best")

        checkpoint.together(task, targets)

    def _epoch_dir(self, epoch: int) -> Path:
        return self.directory / f"epoch-{epoch:04d}"

    def after_epoch(self, task: Any, rec: Any) -> None:
        """Every rank, after each completed epoch: the saves that epoch asks for."""
        main = task.group is None or task.group.is_main
        paths = [self._epoch_dir(rec.epoch)] if rec.epoch % self.every == 0 else []
        if self.keep_best is not None and self._decide(task, getattr(rec, self.keep_best), main):
            paths.append(self.directory / "best")
        if paths:
            checkpoint.save_to(task, paths, rec, after=self._prune if main else None)

    def _decide(self, task: Any, value: float | None, main: bool) -> bool:
        """Whether this epoch is the best so far: rank 0's decision, shared with every rank."""
        better = main and value is not None and math.isfinite(value) and self._better(value)
        if task.group is None or task.group.world_size == 1:
            return better
        got = json.loads(task.group.share("checkpoint_every's best epoch",
                                          json.dumps([better, self._best]).encode() if main else None))
        self._best = got[1]
        return bool(got[0])

    def _prune(self) -> None:
        """Remove the checkpoints epoch-NNNN beyond the newest keep_last (tr checkpoints only)."""
        found = sorted((int(m.group(1)), p) for p in self.directory.iterdir()
                       if (m := _EPOCH_DIR.fullmatch(p.name)) and checkpoint_files.is_checkpoint(p))
        for _, old in found[:-self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    def _better(self, value: float) -> bool:
        if self._best is None:  # once per run: the best so far survives a resume in best/manifest.json
            try:
                m = json.loads((self.directory / "best" / checkpoint_files.MANIFEST).read_bytes())
                self._best = float((m.get("metrics") or {})[self.keep_best])
            except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none yet, or unreadable
                self._best = -math.inf if METRICS[self.keep_best] else math.inf
        if value > self._best if METRICS[self.keep_best] else value < self._best:
            self._best = value
            return True
        return False
