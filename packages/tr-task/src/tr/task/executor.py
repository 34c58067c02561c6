"""The executor: captures a Program's named steps (tr.graph.steps) and runs epochs with them.

Per training step the host does exactly this: wait for the feeder's buffer, launch the transfer graph,
launch ONE captured graph (the learning rate comes from the plan's device table)
that holds the whole step (zero-grad, forward, backward, casts, NaN check, optimizer, EMA, statistics,
metrics). The compiler assembles each step from its parts and its branches (the early gradient bucket's
all-reduce beside the first layer's backward, inside the same graph); every step is captured once at compile
time, so the loop has no per-op Python work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tr.core.errors import BackendError
from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.graph.steps import AB
from tr.tensor.program import Program, at_side, base_variant


@dataclass
class CapturedSteps:
    """Every captured graph the loop launches, looked up by plain attributes (no dict work per step)."""

    train: list  # [buffer] for full batches
    train_last: list  # [buffer] for the last (smaller) batch
    val: list
    val_last: list
    transfer: list  # [buffer]
    val_transfer: list  # [buffer]: transfer, or a resident data set's validation batch selection
    clear_metrics: object
    epoch_begin: object  # AMP: refresh FP16 working weights
    epoch_order: object  # a resident data set: the epoch's order (on the device)
    val_begin: object  # a resident data set: validation from its first batch
    epoch_end: object  # fold BN statistics into inference scale/bias
    val_end: object
    launches_per_step: int
    train_hold: list | None = None  # [buffer]: a data-parallel window's holding micro-step (no collectives)
    # (train, train_last, train_hold) with the first trained layer frozen (task.freeze_first_layer_after)
    frozen: tuple[list, list, list | None] | None = None
    # progressive resizing: a lower training side -> its own steps (train*, frozen twins, transfers)
    sides: dict[int, CapturedSteps] = field(default_factory=dict)

    def training(self, frozen: bool, side: int | None = None) -> tuple[list, list, list | None]:
        """The graphs an epoch's training steps launch: (train, train_last, train_hold), or with ``frozen`` their
        twins that neither differentiate nor update the first trained layer; ``side``: a lower progressive side's
        (None or the final side: the steps compiled at the final side)."""
        at = self.sides.get(side, self) if side is not None else self
        return at.frozen if frozen else (at.train, at.train_last, at.train_hold)

    def transfer_at(self, side: int | None) -> list:
        """The training transfers ([buffer]) of a progressive side (None or the final side: ``transfer``)."""
        return (self.sides.get(side, self) if side is not None else self).transfer


def capture_step(backend, program: Program, name: str,
                 capture: Callable[[str, list[OpCall]], object] | None = None):
    """Capture one named step: its branches as one graph, or (``capture`` given) its calls one after another."""
    step = program.step(name)
    if capture is not None:
        return capture(name, list(step.calls))
    return backend.capture_branches(name, step.branches)


def capture_steps(backend, program: Program, has_val: bool,
                  capture: Callable[[str, list[OpCall]], object] | None = None) -> CapturedSteps:
    def cap(name: str):
        return capture_step(backend, program, name, capture)

    if has_val:
        val, val_last = [cap(f"val_{ab}") for ab in AB], [cap(f"val_last_{ab}") for ab in AB]
    else:
        val = val_last = []
    transfer = [cap(f"transfer_{ab}") for ab in AB]
    resident = has_val and "val_transfer_a" in program.steps
    lower = sorted({int(name.split("@", 1)[1]) for name in program.steps if base_variant(name) != name})
    return CapturedSteps(
        sides={side: _side_steps(program, side, cap) for side in lower},
        train=[cap(f"train_{ab}") for ab in AB], train_last=[cap(f"train_last_{ab}") for ab in AB], val=val,
        val_last=val_last, transfer=transfer,
        val_transfer=[cap(f"val_transfer_{ab}") for ab in AB] if resident else transfer,
        clear_metrics=cap("clear_metrics"), epoch_begin=cap("epoch_begin"), epoch_order=cap("epoch_order"),
        val_begin=cap("val_begin"), epoch_end=cap("epoch_end"), val_end=cap("val_end"), launches_per_step=2,
        train_hold=[cap(f"train_hold_{ab}") for ab in AB] if "train_hold_a" in program.steps else None,
        frozen=(([cap(f"train_{ab}_frozen") for ab in AB], [cap(f"train_last_{ab}_frozen") for ab in AB],
                 [cap(f"train_hold_{ab}_frozen") for ab in AB] if "train_hold_a_frozen" in program.steps else None)
                if "train_a_frozen" in program.steps else None),
    )


def _side_steps(program: Program, side: int, cap: Callable[[str], object]) -> CapturedSteps:
    """A lower progressive side's training steps and transfers (the rest is the final side's: not captured)."""
    def at(name: str) -> str:
        return at_side(name, side)

    frozen = at("train_a_frozen") in program.steps
    return CapturedSteps(
        train=[cap(at(f"train_{ab}")) for ab in AB], train_last=[cap(at(f"train_last_{ab}")) for ab in AB],
        val=[], val_last=[], transfer=[cap(at(f"transfer_{ab}")) for ab in AB], val_transfer=[], clear_metrics=None,
        epoch_begin=None, epoch_order=None, val_begin=None, epoch_end=None, val_end=None, launches_per_step=2,
        train_hold=[cap(at(f"train_hold_{ab}")) for ab in AB] if at("train_hold_a") in program.steps else None,
        frozen=(([cap(at(f"train_{ab}_frozen")) for ab in AB], [cap(at(f"train_last_{ab}_frozen")) for ab in AB],
                 [cap(at(f"train_hold_{ab}_frozen")) for ab in AB] if at("train_hold_a_frozen") in program.steps
                 else None) if frozen else None))


class StepLauncher:
    """Launches one step: the copy of its batch, then its graph, and says when the host zone is free.

    CPU backend: everything is synchronous. CUDA backend: the transfer runs on the TRANS stream and the
    step on COMP_1, ordered by events: the step waits for its copy; a copy into device buffer A/B waits
    for the last step that read that buffer. The host waits only for the copy (so the feeder may refill
    the zone), never for the step: the device works on step k while the host queues step k+1, and the
    copy of batch k+1 overlaps the compute of batch k.
    """

    def __init__(self, backend, watchdog=None) -> None:
        self.be = backend
        self.watchdog = watchdog  # an armed NcclWatchdog: refuse to launch once it aborted the communicator
        self.streams = bool(backend.streams)
        if self.streams:
            self.copied = [backend.event(), backend.event()]
            self.used = [backend.event(), backend.event()]
            self.trans, self.comp = int(StreamKind.TRANS), int(StreamKind.COMP_1)

    def __call__(self, transfer, step, buffer: int, wait: bool = True) -> None:
        be = self.be
        if not self.streams:
            be.launch(transfer)
            be.launch(step)
            return
        wd = self.watchdog
        if wd is not None:
            wd.check()
        copied, used = self.copied[buffer], self.used[buffer]
        used.wait(self.trans)  # the device buffer is free once the step that read it is done
        be.launch(transfer, self.trans)
        copied.record(self.trans)
        copied.wait(self.comp)  # the step reads its batch only after the copy
        be.launch(step, self.comp)
        used.record(self.comp)
        if wait:
            self._waiting(copied.synchronize)  # host: the staging zone has been copied and may be refilled
            if wd is not None:
                wd.beat()

    def prepare(self, graph) -> None:
        """A graph the coming transfers depend on (a resident data set's epoch order or validation restart): on
        the transfer stream ahead of them, so every later step, which waits for its transfer, also follows it."""
        if self.streams:
            self.be.launch(graph, self.trans)
        else:
            self.be.launch(graph)

    def wait(self, buffer: int) -> None:
        if self.streams:
            self.copied[buffer].synchronize()

    def synchronize(self) -> None:
        """Wait for the device; raise the watchdog's reason if it aborted the communicator meanwhile."""
        self._waiting(self.be.synchronize)
        if self.watchdog is not None:
            self.watchdog.check()

    def _waiting(self, wait) -> None:
        """Run a blocking wait; when it fails after the watchdog aborted the communicator, the watchdog's
        reason (a dead peer) is the error to report, the device error it caused only its consequence."""
        try:
            wait()
        except Exception as e:
            if self.watchdog is not None and self.watchdog.failure is not None:
                raise BackendError(self.watchdog.failure) from e
            raise


def scalar(backend, program: Program, role: str) -> np.ndarray:
    return backend.read(program.tensor(role)).reshape(-1)


def train_mean_loss(backend, program: Program) -> float:
    """The epoch's mean training loss over the steps that were applied (skipped ones add neither loss nor
    samples); NaN when every step was skipped."""
    samples = float(scalar(backend, program, "accum_samples")[0])
    return float(scalar(backend, program, "accum")[0]) / samples if samples > 0 else math.nan
