"""What a resume checks beyond the files and the configuration (tr.task.checkpoint.load), before it loads:

- the position: the manifest's ``epoch`` against the state's ``step`` counter. Every training step adds one
  to it, a skipped (non-finite) step too (``scalar_increment`` is not flagged), so after E epochs of S steps
  (S = this rank's steps per epoch: its shard of the data in data-parallel training, the last partial batch a
  step, drop_last's dropped samples none) it holds E * S, plus the steps trained outside completed epochs
  (a cancelled epoch's, a benchmark helper's), which the save records as ``steps_outside_epochs``. An epoch
  edited in the manifest (its checksum recomputed) no longer matches and is refused, naming both numbers.
- a longer schedule: ``total_epochs`` may grow on resume (to train a finished run longer) when the learning
  rates of the steps already trained stay what they were; the save records their SHA-256
  (``lr_history_sha256``: the device's lr_lookup reads table[min(step, len - 1)]). A schedule whose past
  depends on total_epochs (a cosine or polynomial decay over the whole run) is refused, naming why.
- the data: the manifest's fingerprints of the training and validation data (tr.task.data_fingerprint)
  against this task's; another data set is a ConfigError naming the split and both fingerprints unless the
  resume allows it (``allow_data_change``). A fingerprint that is missing on either side is a warning.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.log import get_logger
from tr.task.data_fingerprint import fingerprints

log = get_logger(__name__)

# the description's keys that follow total_epochs (compared through lr_history_sha256 when it grows)
_GROWS = (("schedule", "total_epochs"), ("schedule", "lr_table_sha256"), ("spec", "lr_table_steps"),
          ("schedule", "resolutions"), ("spec", "progressive_resolutions"))


def steps_per_epoch(task) -> int:
    """Optimizer steps an epoch (with gradient accumulation, windows of micro-steps): what the step counter counts."""
    return int(task._resolved.steps_per_epoch)


def device_step(arrays: dict[str, tuple[np.ndarray, Any]]) -> int | None:
    """The step counter in a checkpoint's tensors (None: the plan has none)."""
    got = arrays.get("step")
    return None if got is None else int(np.asarray(got[0]).reshape(-1)[0])


def lr_history_sha256(table: np.ndarray, steps: int) -> str:
    """SHA-256 of the learning rates the device read for steps 0 .. ``steps`` - 1 (FP32 bytes)."""
    table = np.asarray(table, np.float32)
    used = table[np.minimum(np.arange(max(steps, 0)), len(table) - 1)] if len(table) else table[:0]
    return hashlib.sha256(np.ascontiguousarray(used).tobytes()).hexdigest()


def position(task, epoch: int, step: int | None) -> dict[str, Any]:
    """What a save records of the training position: the steps outside completed epochs and the learning-rate
    history up to ``step``."""
    if step is None:
        return {}
    extra = step - epoch * steps_per_epoch(task)
    if extra:
        log.warning("checkpoint at epoch %d holds %d training step(s) beyond its %d epoch(s) of %d (a cancelled "
                    "epoch's or a benchmark helper's): a resume continues this task exactly, not an unbroken run",
                    epoch, extra, epoch, steps_per_epoch(task))
    return {"steps_outside_epochs": extra, "lr_history_sha256": lr_history_sha256(task._lr_table, step)}


def check_position(task, manifest: dict[str, Any], step: int | None, mpath: Path) -> int:
    """The manifest's epoch, checked against the state's step counter ``step``; DataError on a mismatch."""
    epoch = manifest.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise DataError(f"{mpath}: epoch {epoch!r} is not a count of epochs (nothing loaded)")
    extra = manifest.get("steps_outside_epochs", 0)
    if isinstance(extra, bool) or not isinstance(extra, int):
        raise DataError(f"{mpath}: steps_outside_epochs {extra!r} is not a count of steps (nothing loaded)")
    if step is None:
        return epoch
    spe = steps_per_epoch(task)
    if step != epoch * spe + extra:
        more = f" and {extra} step(s) outside them" if extra else ""
        raise DataError(f"{mpath}: the manifest's epoch {epoch} does not match the state's step counter {step}: "
                        f"{epoch} epoch(s) of {spe} steps{more} are {epoch * spe + extra} steps (the manifest was "
                        f"edited, or belongs to another state file; nothing loaded)")
    return epoch


def _drop(d: dict[str, Any], keys) -> dict[str, Any]:
    d = copy.deepcopy(d)
    for group, key in keys:
        if isinstance(d.get(group), dict):
            d[group].pop(key, None)
    return d


def growth(saved: dict[str, Any], here: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(saved, here) to compare, and whether total_epochs grows (then without the keys that follow it)."""
    if not isinstance(saved, dict):  # a damaged manifest's description: compared as it is (and refused)
        return saved, here, False
    a, b = (sched.get("total_epochs") if isinstance(sched, dict) else None  # a damaged manifest: no growth
            for sched in (saved.get("schedule"), here.get("schedule")))
    if isinstance(a, int) and isinstance(b, int) and b > a:
        return _drop(saved, _GROWS), _drop(here, _GROWS), True
    return saved, here, False


def check_growth(task, manifest: dict[str, Any], saved: dict[str, Any], step: int | None, mpath: Path,
                 table: np.ndarray) -> None:
    """With a larger total_epochs: ConfigError unless the learning rates of the steps trained are unchanged
    (``table``: the resumed run's LR table)."""
    a, b = saved["schedule"]["total_epochs"], task.config.task.epochs
    check_sides_growth(task, manifest, saved, mpath)
    want = manifest.get("lr_history_sha256")
    if step is None or want is None:
        raise ConfigError(f"{mpath}: total_epochs grows from {a} to {b}, but the checkpoint does not record the "
                          f"learning rates it trained with (written by an older tr): resume with total_epochs {a} "
                          f"(nothing loaded)")
    if lr_history_sha256(table, step) != want:
        sched = str(saved["schedule"].get("scheduler")).split("(")[0]
        raise ConfigError(f"{mpath}: total_epochs grows from {a} to {b}, but with {b} epochs the schedule {sched} "
                          f"gives other learning rates for the {step} steps already trained (its curve depends on "
                          f"total_epochs, e.g. a decay over the whole run): "
                          f"resume with total_epochs {a}, or with a schedule whose past does not change (nothing "
                          f"loaded)")
    log.info("%s: total_epochs grows from %d to %d: the learning rates of the %d steps trained are unchanged",
             mpath, a, b, step)


def check_sides_growth(task, manifest: dict[str, Any], saved: dict[str, Any], mpath: Path) -> None:
    """With a larger total_epochs and progressive resizing: ConfigError unless the epochs trained had the sides
    the longer run gives them (a ramp over the whole run, train_resolution(b, e), stretches with it)."""
    was, now = saved["schedule"].get("resolutions", []), list(task._resolved.train_sides)
    done = manifest.get("epoch", 0)
    if list(was[:done]) != now[:done]:
        first = next(e for e in range(done) if e >= len(was) or e >= len(now) or was[e] != now[e])
        raise ConfigError(f"{mpath}: total_epochs grows from {saved['schedule']['total_epochs']} to "
                          f"{task.config.task.epochs}, but the resolution schedule then trains epoch {first} (from 0) "
                          f"at {now[first] if first < len(now) else None}, where the checkpoint trained it at "
                          f"{was[first] if first < len(was) else None} (a ramp over the whole run stretches with "
                          f"it): resume with total_epochs {saved['schedule']['total_epochs']}, or give "
                          f"progressive_resizing() an end_ramp (nothing loaded)")


def check_data(task, manifest: dict[str, Any], mpath: Path, allow_data_change: bool) -> None:
    """ConfigError when the manifest's data fingerprints differ from this task's (unless allowed)."""
    saved = manifest.get("data_fingerprint")
    if not isinstance(saved, dict):
        log.warning("%s records no data fingerprint (written by an older tr): the data cannot be checked", mpath)
        return
    here = fingerprints(task.feeder)
    for split in ("train", "val"):
        if split not in saved and split not in here:  # no validation data on either side
            continue
        a, b = saved.get(split), here.get(split)
        if a is None or b is None:
            log.warning("%s: the %s data cannot be checked (fingerprint %s in the checkpoint, %s here)",
                        mpath, split, a, b)
            continue
        if a == b:
            continue
        if allow_data_change:
            log.warning("%s: the %s data differs from the checkpoint's (%s, now %s): resuming on it, as "
                        "allow_data_change=True asks", mpath, split, a, b)
            continue
        raise ConfigError(f"{mpath}: the {split} data differs from the checkpoint's: fingerprint {a} in the "
                          f"checkpoint, {b} in this task; resume(path, allow_data_change=True) trains on the new "
                          f"data on purpose (nothing loaded)")
