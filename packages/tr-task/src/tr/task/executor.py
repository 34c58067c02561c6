"""The executor: turns a Program into a few captured step graphs and runs epochs with them.

Per training step the host does exactly this: wait for the feeder's buffer, launch the transfer graph,
write the learning rate (unless the program reads it from a device table), launch ONE captured graph
that holds the whole step (zero-grad, forward, backward, casts, NaN check, optimizer, EMA, statistics,
metrics). The graphs are concatenations of the GraphId buckets in the order below, captured once per
(variant, A/B buffer) at compile time, so the loop has no per-op Python work. The training step is captured
as branches (:func:`train_step_branches`): the deep gradient bucket's all-reduce runs beside the first
layer's backward, inside the same graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tr.backend.base import Branch, serial_calls
from tr.core.errors import BackendError
from tr.core.graph_id import GraphId
from tr.core.ops import OpCall
from tr.core.phase import StreamKind
from tr.tensor.program import Program

G = GraphId

# The training step (SEED_SYSTEM.md §3 runs it as ~15 launches; we capture it as one graph) as (stream, part,
# waits-for) branches (§11): once the deep layers' backward is done, their gradient bucket is cast and
# all-reduced on the UPDATE stream while COMP_1 runs the first layer's backward (which writes only bucket 2
# and reads neither bucket 1 nor the step result); bucket 2's all-reduce and everything after it wait for
# both. With one rank the collectives are empty and only the AMP cast moves to the side. The NaN check follows
# every collective it reads (both gradient buckets and the BN statistics, so all ranks agree on the flag), and
# the metric sums follow the check (a skipped step's loss is not summed).
def train_step_branches(buffer: int, last: bool
                        ) -> tuple[tuple[StreamKind, tuple[GraphId, ...], tuple[int, ...]], ...]:
    first_fwd = G.FIRST_LAYER_FWD_A if buffer == 0 else G.FIRST_LAYER_FWD_B
    first_bwd = G.FIRST_LAYER_BWD_A if buffer == 0 else G.FIRST_LAYER_BWD_B
    comp, update = StreamKind.COMP_1, StreamKind.UPDATE
    return (
        (comp, (G.ZERO_GRAD, first_fwd, G.DEEP_FWD_BWD), ()),
        (update, (G.CAST_DEEP_GRAD_FP16_TO_FP32, G.DEEP_COMM), (0,)),
        (comp, (first_bwd, G.CAST_FIRST_GRAD_FP16_TO_FP32), (0,)),
        (comp, (G.FIRST_COMM, G.STATS_COMM, G.NAN_CHECK_AND_GRAD_SCALING,
                G.ACCUM_METRICS_TRAIN_LAST if last else G.ACCUM_METRICS, G.UPDATE_STATS,
                G.OPTIMIZER, G.LARS_FC_OPT, G.LARS_FIRST_CONV_OPT, G.LARS_DEEP_CONV_OPT, G.EMA_UPDATE,
                G.CAST_MAIN_FP32_TO_FP16), (1, 2)),
    )


def val_step_order(buffer: int, last: bool, ema: bool = False) -> tuple[GraphId, ...]:
    """One validation step of the main model, or with ``ema`` of the EMA weights (INF_EMA_A/B)."""
    inf = (G.INF_EMA_A, G.INF_EMA_B) if ema else (G.INF_MAIN_A, G.INF_MAIN_B)
    return (inf[buffer], G.ACCUM_METRICS_VAL_LAST if last else G.ACCUM_METRICS)


def branches(program: Program, variant: str, parts) -> list[Branch]:
    """The step's branches with the program's calls; a side branch with no calls is dropped (its waiters then
    wait for nothing extra), so a one-rank FP32 step is a plain chain."""
    out: list[Branch] = []
    index: dict[int, int] = {}
    for i, (stream, part, after) in enumerate(parts):
        calls = tuple(gather(program, variant, part))
        deps = tuple(index[j] for j in after if j in index)
        if not calls and stream != parts[0][0]:
            continue
        index[i] = len(out)
        out.append(Branch(stream, calls, deps))
    return out


def gather(program: Program, variant: str, order: Sequence[GraphId]) -> list[OpCall]:
    calls: list[OpCall] = []
    for gid in order:
        calls.extend(program.calls(variant, gid))
    return calls


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


def capture_steps(backend, program: Program, has_val: bool,
                  capture: Callable[[str, list[OpCall]], object] | None = None) -> CapturedSteps:
    cap = capture or backend.capture

    def graph(name: str, variant: str, order: Sequence[GraphId]):
        return cap(name, gather(program, variant, order))

    def step(name: str, variant: str, buffer: int, last: bool):
        parts = branches(program, variant, train_step_branches(buffer, last))
        if capture is None:
            return backend.capture_branches(name, parts)
        return cap(name, serial_calls(parts))

    train = [step(f"train_step_{'AB'[b]}", "train", b, False) for b in (0, 1)]
    train_last = [step(f"train_last_step_{'AB'[b]}", "train_last", b, True) for b in (0, 1)]
    if has_val:
        val = [graph(f"val_step_{'AB'[b]}", "val", val_step_order(b, False)) for b in (0, 1)]
        val_last = [graph(f"val_last_step_{'AB'[b]}", "val_last", val_step_order(b, True)) for b in (0, 1)]
    else:
        val = val_last = []
    transfer = [graph(f"transfer_{'AB'[b]}", "train", (G.TRANSFER_A if b == 0 else G.TRANSFER_B,)) for b in (0, 1)]
    resident = has_val and bool(program.calls("val", G.RESIDENT_VAL_A))
    val_transfer = ([graph(f"val_batch_{'AB'[b]}", "val", (G.RESIDENT_VAL_A if b == 0 else G.RESIDENT_VAL_B,))
                     for b in (0, 1)] if resident else transfer)
    return CapturedSteps(
        train=train, train_last=train_last, val=val, val_last=val_last, transfer=transfer, val_transfer=val_transfer,
        clear_metrics=graph("clear_metrics", "train", (G.CLEAR_METRICS,)),
        epoch_begin=graph("epoch_begin", "train", (G.CAST_MAIN_FP32_TO_FP16,)),
        epoch_order=graph("epoch_order", "train", (G.RESIDENT_TRAIN_BEGIN,)),
        val_begin=graph("val_begin", "val", (G.RESIDENT_VAL_BEGIN,)),
        epoch_end=graph("epoch_end", "train", (G.UPDATE_BN_INF_PARAMS,)),
        val_end=graph("val_end", "val", (G.VAL_RESULT_COMM,)),
        launches_per_step=2,
    )


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
