"""ReduceLROnPlateau in a task (tr.algo.plateau): the rule observed after every epoch that has its metric, and when
it reduces the LR, the device's LR table rewritten from the next step on (one host write between epochs; the
captured steps read the table as always). Its state goes into a checkpoint (``record``) and comes back on resume
(``restored``), so a resumed run reduces where the unbroken one did."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tr.algo.plateau import PlateauState, ReduceLROnPlateau
from tr.core.errors import ConfigError, DataError
from tr.core.log import get_logger
from tr.task.executor import scalar

log = get_logger(__name__)


def rule(task: Any) -> ReduceLROnPlateau | None:
    sched = getattr(task, "_sched", None)
    return sched if isinstance(sched, ReduceLROnPlateau) else None


def start(task: Any) -> PlateauState | None:
    r = rule(task)
    return r.start() if r is not None else None


def after_epoch(task: Any, rec: Any) -> None:
    """Observe the epoch's metric (an epoch that did not validate has no validation metric: nothing happens)."""
    r, state = rule(task), task._plateau
    if r is None or state is None:
        return
    value = getattr(rec, r.metric)
    if value is None:
        return
    new = r.observe(state, float(value))
    if new.lr != state.lr:
        step = int(scalar(task.backend, task.program, "step")[0])  # the next step is the first at the new LR
        new = replace(new, changes=(*new.changes, (step, new.lr)))
        task._lr_table = r.table_with(new.changes)
        task.backend.write(task.program.tensor("lr_table"), task._lr_table)
        log.info("epoch %d: %s did not improve for %d epoch(s): learning rate %g -> %g", rec.epoch, r.metric,
                 r.patience_epochs + 1, state.lr, new.lr)
    task._plateau = new


def record(task: Any) -> dict[str, Any]:
    """What a save adds to the manifest: the rule's state, when the task has one."""
    return {"plateau": task._plateau.as_dict()} if rule(task) is not None and task._plateau is not None else {}


def restored(task: Any, manifest: dict[str, Any], mpath: Path) -> tuple[PlateauState | None, np.ndarray]:
    """(the rule's state, the LR table with its reductions) a checkpoint holds, for a task with the rule (else
    (None, the task's table)); DataError when the manifest lacks or garbles it. Changes nothing."""
    r = rule(task)
    if r is None:
        return None, task._lr_table
    if "plateau" not in manifest:
        raise DataError(f"{mpath}: the run uses ReduceLROnPlateau but the checkpoint does not record its state "
                        "(nothing loaded)")
    try:
        state = PlateauState.from_dict(manifest["plateau"])
    except ConfigError as e:
        raise DataError(f"{mpath}: {e} (nothing loaded)") from None
    if any(s > r.total_steps for s, _ in state.changes):
        raise DataError(f"{mpath}: the plateau state reduces the LR at step {state.changes[-1][0]}, past the "
                        f"run's {r.total_steps} steps (nothing loaded)")
    return state, r.table_with(state.changes)
