"""Whether a task's arena holds the state of whole epochs: what a checkpoint may be saved from.

A checkpoint records completed epochs: the data pipeline's position is the epoch number (order and
augmentation are keyed by (seed, epoch, sample)), so a resume starts the next epoch from its first batch.
Weights that took only part of an epoch's steps cannot be resumed exactly (a step-granular position would
need every feeder, the native pipeline's workers, SDMP, the resident and JPEG device paths, to restart
mid-epoch), so a save is refused while they are in the arena:

- inside an epoch (a save or resume from an ``on_step`` callback);
- after an exception (Ctrl-C, a bad batch) cancelled an epoch that had applied steps: its updates stay in
  the weights, the optimizer moments and the step counter. ``run()`` then trains that epoch again from its
  first batch, from these weights (so the run differs from an unbroken one), and once an epoch completes a
  save is allowed again; its manifest counts the cancelled epoch's steps (``steps_outside_epochs``).
  Resuming the last checkpoint in a new task gives the unbroken run instead.

A cancelled epoch that had applied no step (an exception before its first step finished) leaves the arena as
the last completed epoch left it, and saving stays allowed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tr.core.errors import PhaseError
from tr.core.log import get_logger
from tr.task.executor import scalar

log = get_logger(__name__)


class EpochState:
    """Where a task's training stands: inside epoch ``running``, or after ``cancelled`` = (epoch, steps it
    applied (None: unknown), the exception's name) until an epoch completes or a checkpoint is loaded."""

    def __init__(self) -> None:
        self.running: int | None = None
        self.cancelled: tuple[int, int | None, str] | None = None

    @contextmanager
    def epoch(self, task: Any, epoch: int) -> Iterator[None]:
        """Train epoch ``epoch`` (0-based) inside: on an exception, let launched work finish (so the arena is
        quiet and the next run() can start the epoch again; the feeder's epoch generator is already closed),
        record what the epoch left in the arena, and re-raise."""
        step0 = _step(task)
        self.running = epoch
        try:
            yield
        except BaseException as exc:  # KeyboardInterrupt too: the task must stay usable
            self.running = None
            self._cancel(task, epoch, step0, exc)
            raise
        self.running = None
        self.cancelled = None

    def _cancel(self, task: Any, epoch: int, step0: int | None, exc: BaseException) -> None:
        launch = task._launch
        try:
            launch.synchronize()
        except Exception as e:  # the device error is the one to report; the original exception follows
            log.error("after the interrupted epoch %d the device reports: %s", epoch + 1, e)
        if launch.watchdog is not None:
            launch.watchdog.disarm()
        now = _step(task)
        applied = None if now is None or step0 is None else now - step0
        # none applied: the arena is still the last completed epoch's, unless gradient accumulation's open window
        # already moved batch norm's running statistics (micro-steps do, optimizer steps are at its end)
        if applied != 0 or _open_window(task):
            self.cancelled = (epoch, applied, type(exc).__name__)
        log.warning("epoch %d cancelled by %s after %s training step(s); run() starts it again from these weights",
                    epoch + 1, type(exc).__name__, "an unknown number of" if applied is None else applied)

    def loaded(self) -> None:
        """A checkpoint replaced the arena's state: whole epochs again."""
        self.cancelled = None

    def check(self, action: str, cancelled_too: bool = True) -> None:
        """PhaseError when the arena does not hold whole epochs (inside an epoch; with ``cancelled_too`` also
        after a cancelled one), saying why and what to do."""
        if self.running is not None:
            raise PhaseError(f"{action} inside epoch {self.running + 1} (from an on_step callback): the weights "
                             f"hold part of the epoch's steps and a checkpoint records whole epochs (the data "
                             f"position is the epoch number), so it could not resume exactly; save after run() "
                             f"returns, or with checkpoint_every()")
        if cancelled_too and self.cancelled is not None:
            epoch, applied, exc = self.cancelled
            steps = "an unknown number of" if applied is None else str(applied)
            what = (f"{steps} of its training steps are in the weights, optimizer state and step counter"
                    if applied != 0 else "the micro-steps of its unfinished accumulation window (task.accumulate) "
                    "moved the batch norm running statistics")
            raise PhaseError(f"{action} after epoch {epoch + 1} was cancelled ({exc}): {what}, and a checkpoint "
                             f"records whole epochs, so this state could not resume exactly. run() trains epoch "
                             f"{epoch + 1} again from these weights (not what an unbroken run does) and a save is "
                             f"possible once an epoch completes; for the unbroken run, resume the last checkpoint "
                             f"in a new task")


def _open_window(task: Any) -> bool:
    """Whether gradient accumulation stopped inside a window (its position, accum_pos, is not at a window's
    start: tr.graph.accumulate); False without accumulation or when the device cannot be read."""
    if "accum_pos" not in task.program.named:
        return False
    try:
        return int(scalar(task.backend, task.program, "accum_pos")[0]) % task._cfg.accumulate != 0
    except Exception:  # noqa: BLE001 - after a device error: the step counter's answer stands
        return False


def _step(task: Any) -> int | None:
    """The device's step counter (every training step adds one, a skipped one too), or None when it cannot be
    read (a failed device)."""
    try:
        return int(scalar(task.backend, task.program, "step")[0])
    except Exception:  # noqa: BLE001 - after a device error: unknown, and the caller says so
        return None
