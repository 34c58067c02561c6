"""Checkpoints of a DeepLearningTask: save, exact resume, and periodic checkpoints (last k, best by a metric).

A checkpoint (the directory format of tr.task.checkpoint_files) holds everything that decides the next
step, so a resumed run gives the bytes of an uninterrupted one:

- the arena's state tensors (:func:`state_tensors`): master weights (W_*), the AMP FP16 working copies
  (A_*; also rebuilt from the masters at every epoch's start), EMA weights (E_*, whenever the plan
  allocates them), BN running statistics (B_*), optimizer moments (M_*, V_*), LARS ratios (N_*) and the
  scalars: step counter (the LR table is indexed by it), skip counter, loss scale and its tracker
  (loss_scale_tracker), the dropout seed. Activations, gradients, inputs, masks and temporaries are not
  state: every step rewrites them before reading them. In data-parallel training with dropout each rank
  draws its own dropout stream: the checkpoint then also holds every rank's (``dropout_seed@ranks``, gathered
  to rank 0 at the save), and each rank resumes its own.
- ``epoch``: the completed epochs. The data pipeline's order and augmentation are keyed by (seed, epoch,
  sample), so the epoch number is the whole position of the data RNG.
- ``config``: a canonical description of what the plan was compiled from (settings, BluePrint, CompileSpec,
  loss, optimizer, schedule with a hash of its LR table, the data) and ``tensors``, the state tensors'
  (name, region, shape, dtype). Loading into a task that differs is refused naming the first difference.
- ``metrics``: the epoch's record (what keep_best compares).

``load`` reads and verifies every file and every difference before it writes one byte to the arena.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.region import Region
from tr.task import checkpoint_files
from tr.tensor.dtensor import DTensor

# regions whose bytes outlive a step; the rest (I, F, G, T, S_MASK, the step result) are rewritten first
_STATE_GROUPS = frozenset("BWEAMVNS")
_NOT_STATE = frozenset({Region.S_MASK})
# compiled from the schedule and the data (the batch sizes are a rank's own in data-parallel training):
# compared through config, not loaded
_CONFIG_TENSORS = frozenset({"lr_table", "batch_train", "batch_train_last", "batch_val", "batch_val_last"})
_SETTINGS_KEYS = ("amp_enabled", "seed", "batch_size", "input_res", "train_res_begin", "train_res_end", "val_res",
                  "tf32", "loss_scale_rule", "loss_scale_init", "loss_scale_growth_interval")
# keep_best metric -> whether larger is better
METRICS = {"top1": True, "top5": True, "val_loss": False, "train_loss": False}


def state_tensors(program) -> list[DTensor]:
    """The arena tensors a checkpoint holds, in plan order."""
    return [t for t in program.tensors
            if t.allocated and (t.region.group in _STATE_GROUPS and t.region not in _NOT_STATE
                                or t.region is Region.R_RESULT_ACCUMULATED)
            and t.name not in _CONFIG_TENSORS]


def _keys(tensors: list[DTensor]) -> list[str]:
    names = [t.name for t in tensors]
    return [t.name if names.count(t.name) == 1 else f"{t.name}#{t.id}" for t in tensors]


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=repr))  # key order kept: the first difference is the first named


def _transforms(feeder) -> list[str] | None:
    """The native pipeline's train and val chains (augmentation and normalisation), when the feeder has one."""
    s = getattr(getattr(feeder, "pre", None), "settings", None) or getattr(feeder, "pre_settings", None)
    return None if s is None or not hasattr(s, "chain") else [repr(s.chain(True)), repr(s.chain(False))]


def describe(task) -> dict[str, Any]:
    """The canonical description of what ``task``'s plan and run were built from (JSON values)."""
    s, f = task.settings, task.feeder  # (a user's own feeder, not its completed wrapper)
    table = np.ascontiguousarray(task._lr_table, dtype=np.float32)
    return _jsonable({
        "settings": {k: getattr(s, k) for k in _SETTINGS_KEYS},
        "blueprint": repr(task._blueprint),
        "loss": repr(task._loss),
        "optimizer": repr(task._optimizer),
        "schedule": {"scheduler": repr(task._scheduler), "total_epochs": task._epochs,
                     "lr_table_sha256": hashlib.sha256(table.tobytes()).hexdigest()},
        "grad_clip": task._grad_clip,
        "data": {"feeder": type(f).__name__, "seed": getattr(f, "seed", None), "batch": f.batch,
                 "sample_shape": list(f.sample_shape), "dtype": str(np.dtype(f.dtype)),
                 "train_samples": f.num_samples(True), "val_samples": f.num_samples(False),
                 "world_size": getattr(f, "world_size", 1), "transforms": _transforms(f)},
        **({"ema": dataclasses.asdict(task._ema)} if task._ema is not None else {}),
        "spec": dataclasses.asdict(task.spec),  # last: derived from the above, named only when they agree
    })


def _tensor_list(tensors: list[DTensor]) -> list[list[Any]]:
    return [[k, t.region.name, list(t.shape.dims), t.dtype.name] for k, t in zip(_keys(tensors), tensors)]


def _row(row: Any) -> str:
    try:
        name, region, shape, dtype = row
        return f"{name} {tuple(shape)} {dtype} in {region}"
    except (TypeError, ValueError):
        return repr(row)


def _flat(v: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        out: list[tuple[str, Any]] = []
        for k in v:
            out.extend(_flat(v[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, v)]


def first_difference(saved: dict[str, Any], here: dict[str, Any]) -> str | None:
    """'<key>: the checkpoint has A, this task has B' for the first differing key, or None."""
    a, b = dict(_flat(saved)), dict(_flat(here))
    for k in [*b, *(k for k in a if k not in b)]:  # in the description's order (settings first)
        if a.get(k, "<absent>") != b.get(k, "<absent>"):
            return f"{k}: the checkpoint has {a.get(k, '<absent>')!r}, this task has {b.get(k, '<absent>')!r}"
    return None


def _record(rec) -> dict[str, Any] | None:
    return None if rec is None else _jsonable(dataclasses.asdict(rec))


def _has_dropout(program) -> bool:
    return any(c.op == "dropout_fwd" for calls in program.graphs.values() for c in calls)


RANK_STREAMS = "dropout_seed@ranks"  # every rank's dropout_seed, (world, 1, 1, 1, 2) INT32


def _world(task) -> int:
    return task.group.world_size if task.group is not None else 1


def _rank_streams(task) -> np.ndarray | None:
    """Every rank's dropout stream stacked in rank order on rank 0 (None on the others, and where the run is
    one process or has no dropout). Every rank calls it: it is a gather."""
    if _world(task) == 1 or not _has_dropout(task.program):
        return None
    task.backend.synchronize()
    mine = task.backend.read(task.program.named["dropout_seed"])
    got = task.group.gather("checkpoint/dropout_seed", np.ascontiguousarray(mine).tobytes())
    if got is None:
        return None
    return np.stack([np.frombuffer(b, mine.dtype).reshape(mine.shape) for b in got])


def save(task, path: str | Path, record=None) -> Path:
    """Write ``task``'s state to the checkpoint directory ``path`` (atomically; see checkpoint_files). In
    data-parallel training every rank calls it and only rank 0 writes (every rank holds the same weights; with
    dropout the others first hand rank 0 their dropout streams)."""
    path = Path(path)
    streams = _rank_streams(task)
    configs = None  # data-parallel: every rank's description (a rank's shards and last batches are its own)
    if _world(task) > 1:
        configs = task.group.gather("checkpoint/config", json.dumps(describe(task), sort_keys=True).encode())
    if task.group is not None and not task.group.is_main:
        return path
    task.backend.synchronize()
    tensors = state_tensors(task.program)
    arrays = {k: (task.backend.read(t), t.dtype) for k, t in zip(_keys(tensors), tensors)}
    body = {"epoch": task._epochs_done, "tensors": _tensor_list(tensors), "config": describe(task),
            "metrics": _record(record)}
    if configs is not None:
        body["config_ranks"] = [json.loads(c) for c in configs]
    if streams is not None:
        arrays[RANK_STREAMS] = (streams, task.program.named["dropout_seed"].dtype)
        body["dropout_ranks"] = int(streams.shape[0])
    return checkpoint_files.write(path, arrays, body)


def load(task, path: str | Path) -> dict[str, Any]:
    """Verify the checkpoint at ``path`` against ``task`` and, only when all is right, load its state.
    Returns the manifest. Damage is a DataError, a checkpoint of another model/settings a ConfigError;
    both name the file and the difference, and leave the task as it was."""
    path = Path(path)
    rank = getattr(task.group, "rank", 0) if task.group is not None else 0
    manifest, arrays = checkpoint_files.read(path)
    mpath, where = path / checkpoint_files.MANIFEST, path / checkpoint_files.STATE
    streams = arrays.pop(RANK_STREAMS, None)
    world = _world(task)
    if world > 1 and _has_dropout(task.program):
        saved = manifest.get("dropout_ranks")
        if streams is None:
            raise ConfigError(f"{mpath}: a checkpoint of a run in one process holds one dropout stream; rank "
                              f"{rank} of {world} needs its own: resume data-parallel training with dropout from "
                              f"a checkpoint of a data-parallel run (nothing loaded)")
        if saved != world or streams[0].shape[0] != world:
            raise ConfigError(f"{mpath}: the checkpoint holds the dropout streams of {saved} ranks, this run has "
                              f"{world} (nothing loaded)")
        seed = task.program.named["dropout_seed"]
        if streams[1] is not seed.dtype or tuple(streams[0].shape[1:]) != tuple(seed.shape.dims):
            raise DataError(f"{where}: {RANK_STREAMS} is {streams[0].shape} {streams[1].name}, expected "
                            f"({world}, {', '.join(map(str, seed.shape.dims))}) {seed.dtype.name} (nothing loaded)")
    tensors = state_tensors(task.program)
    listed, here = manifest.get("tensors"), _tensor_list(tensors)
    if listed != here:
        i = next((i for i, (x, y) in enumerate(zip(listed or [], here)) if x != y), min(len(listed or []), len(here)))
        have = _row(listed[i]) if listed and i < len(listed) else "nothing"
        want = _row(here[i]) if i < len(here) else "nothing"
        raise ConfigError(f"{mpath}: a checkpoint of another plan (nothing loaded): state tensor {i} is {have} "
                          f"in the checkpoint, {want} in this task")
    saved_config = manifest.get("config", {})
    per_rank = manifest.get("config_ranks")
    if isinstance(per_rank, list) and len(per_rank) == world and world > 1:  # this rank's own description
        saved_config = per_rank[rank]
    diff = first_difference(saved_config, describe(task))
    if diff is not None:
        raise ConfigError(f"{mpath}: a checkpoint of another configuration (nothing loaded): {diff}")
    for key, t in zip(_keys(tensors), tensors):
        got = arrays.get(key)
        if got is None or got[1] is not t.dtype or tuple(got[0].shape) != tuple(t.shape.dims):
            raise DataError(f"{where}: tensor {key!r} is {None if got is None else (got[0].shape, got[1].name)}, "
                            f"the manifest says {tuple(t.shape.dims)} {t.dtype.name} (nothing loaded)")
    if set(arrays) != set(_keys(tensors)):
        raise DataError(f"{where}: tensors {sorted(set(arrays) - set(_keys(tensors)))} are not in the manifest "
                        "(nothing loaded)")
    epoch = manifest.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise DataError(f"{mpath}: epoch {epoch!r} is not a count of epochs (nothing loaded)")
    task.backend.synchronize()
    for key, t in zip(_keys(tensors), tensors):
        task.backend.write(t, arrays[key][0])
    if world > 1 and streams is not None and _has_dropout(task.program):  # this rank's own dropout stream
        task.backend.write(task.program.named["dropout_seed"], np.ascontiguousarray(streams[0][rank]))
    task._epochs_done = epoch
    return manifest


class CheckpointPolicy:
    """checkpoint_every(): after every ``every``-th epoch save ``directory``/epoch-NNNN, keep the newest
    ``keep_last`` of them, and with ``keep_best`` also ``directory``/best, the best epoch by that metric."""

    def __init__(self, every: int, directory: str | Path, keep_last: int = 1, keep_best: str | None = None) -> None:
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

    def after_epoch(self, task, rec) -> None:
        epoch = rec.epoch
        self.directory.mkdir(parents=True, exist_ok=True)
        if epoch % self.every == 0:
            save(task, self.directory / f"epoch-{epoch:04d}", rec)
            for old in sorted(self.directory.glob("epoch-[0-9]*"))[:-self.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        value = getattr(rec, self.keep_best) if self.keep_best else None
        if value is not None and math.isfinite(value) and self._better(value):
            save(task, self.directory / "best", rec)

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
