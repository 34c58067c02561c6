"""Checkpoints of a DeepLearningTask: save, exact resume, and periodic checkpoints (tr.task.checkpoint_policy).

A checkpoint (the directory format of tr.task.checkpoint_files) holds everything that decides the next
step, so a resumed run gives the bytes of an uninterrupted one:

- the arena's state tensors (:func:`state_tensors`: those whose memory role is ``state``): master weights
  (PARAM) and the inference parameters folded from the BN statistics (FOLDED), the AMP FP16 working copies
  (AMP_COPY; also rebuilt from the masters at every epoch's start), EMA weights (EMA, EMA_FP16, whenever the
  plan allocates them), BN running statistics (RUNNING, RUNNING_NEXT), optimizer moments (MOMENT1, MOMENT2),
  LARS ratios (TRUST_RATIO), the epoch's accumulated results (RESULT_SUM) and the scalars (SCALAR): step
  counter (the LR table is indexed by it), skip counter, loss scale and its tracker (loss_scale_tracker), the
  dropout seed. Activations, gradients, inputs, masks and temporaries are not state: every step rewrites them
  before reading them. In data-parallel training with dropout each rank draws its own dropout stream: the
  checkpoint then also holds every rank's (``dropout_seed@ranks``, gathered to rank 0 at the save), and each
  rank resumes its own.
- ``epoch``: the completed epochs. The data pipeline's order and augmentation are keyed by (seed, epoch,
  sample), so the epoch number is the whole position of the data RNG; a save is therefore refused inside an
  epoch and after a cancelled one until an epoch completes (tr.task.epoch_state). ``steps_outside_epochs``
  and ``lr_history_sha256`` let a resume check the epoch against the step counter and a longer schedule
  against the rates already trained (tr.task.checkpoint_checks).
- ``config``: a canonical description of what the plan was compiled from (settings, the environment variables
  that change the plan or the numbers as the compile read them (tr.core.env.recorded), BluePrint,
  CompileSpec, loss, optimizer, schedule with a hash of its LR table, the data) and ``tensors``, the state
  tensors' (name, region name such as "moment1/fc_w", shape, dtype). Loading into a task that differs is
  refused naming the first difference; the one change allowed is a larger total_epochs whose schedule keeps
  the past rates. A checkpoint without a recorded variable (written before tr recorded it) is taken to have had
  its default.
- ``data_fingerprint``: the training and validation data's fingerprints (tr.task.data_fingerprint); a resume
  on other data is refused unless ``allow_data_change``.
- ``metrics``: the epoch's record (what keep_best compares).

``load`` reads and verifies every file and every difference before it writes one byte to the arena. In
data-parallel training a save is one exchange every rank takes part in (:func:`save_to`): the ranks hand rank 0
their descriptions and dropout streams, rank 0 writes and tells every rank the outcome, so a failed save fails
on every rank, and a rank that does not arrive is a BackendError naming it within the operation timeout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tr.core import env as tr_env
from tr.core import errors
from tr.core.errors import BackendError, ConfigError, DataError
from tr.core.log import get_logger
from tr.core.settings import Settings
from tr.graph.spec import CompileSpec
from tr.task import checkpoint_checks, checkpoint_files, engines, plateau
from tr.task.data_fingerprint import fingerprints
from tr.task.ema import EmaConfig
from tr.tensor.dtensor import DTensor

log = get_logger(__name__)

# compiled from the schedule and the data (the batch sizes are a rank's own in data-parallel training):
# compared through config, not loaded
_CONFIG_TENSORS = frozenset({"lr_table", "batch_train", "batch_train_last", "batch_val", "batch_val_last"})
# The task section's recorded fields (tr.task.config.TaskConfig.recorded_names()), each under the key the
# description gives it (a test holds the two alike, so a new recorded field cannot go unrecorded).
TASK_FIELDS = ("model", "loss", "optimizer", "param_groups", "layer_decay", "scheduler", "epochs", "grad_clip",
               "grad_clip_mode", "ema", "accumulate", "freeze_first_after", "mixup", "tta")


def state_tensors(program) -> list[DTensor]:
    """The arena tensors a checkpoint holds, in plan order: those of a role whose bytes outlive a step (inputs,
    activations, gradients, the step result, masks and temporaries are rewritten before they are read)."""
    return [t for t in program.tensors if t.allocated and t.region.role.state and t.name not in _CONFIG_TENSORS]


def _keys(tensors: list[DTensor]) -> list[str]:
    names = [t.name for t in tensors]
    return [t.name if names.count(t.name) == 1 else f"{t.name}#{t.id}" for t in tensors]


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=repr))  # key order kept: the first difference is the first named


def _pipeline_settings(feeder) -> Any:
    """The data section (tr.data's PreprocessorSettings) a native-pipeline feeder was built from, else None."""
    s = getattr(getattr(feeder, "pre", None), "settings", None) or getattr(feeder, "pre_settings", None)
    return s if s is not None and hasattr(s, "chain") and hasattr(s, "recorded") else None


def _pipeline(s: Any) -> dict[str, Any]:
    """The data section's train and val chains (augmentation and normalisation) and its other recorded fields."""
    if s is None:
        return {"transforms": None}
    rest = {k: v for k, v in s.recorded().items() if k not in ("train", "val")}  # (the chains say those)
    return {"transforms": [repr(s.chain(True)), repr(s.chain(False))], "pipeline": rest}


def describe(task) -> dict[str, Any]:
    """The canonical description of what ``task``'s plan and run were built from (JSON values): the recorded
    fields of its configuration tree (tr.task.config), what compile derived from them, and the data's sizes."""
    c, f = task.config, task.feeder  # (a user's own feeder, not its completed wrapper)
    t = c.task
    table = np.ascontiguousarray(task._sched.table(), dtype=np.float32)  # as prepared (ReduceLROnPlateau's reductions
    # are the run's state, recorded apart: tr.task.plateau)
    return _jsonable({
        "settings": c.settings.recorded(),
        "env": task._recorded_env,  # second: a variable changes the plan unseen, so name it before its effects
        # then the data: its sizes decide the steps per epoch, so a data set of another size is named as such,
        # not by the LR table it changes (other data of the same sizes: the fingerprint, allow_data_change)
        "data": {"feeder": type(f).__name__, "seed": getattr(f, "seed", None), "batch": f.batch,
                 "sample_shape": list(f.sample_shape), "dtype": str(np.dtype(f.dtype)),
                 "train_samples": f.num_samples(True), "val_samples": f.num_samples(False),
                 "world_size": getattr(f, "world_size", 1),
                 **_pipeline(c.data if c.data is not None else _pipeline_settings(f))},
        "blueprint": repr(t.model),
        "loss": repr(t.loss),
        "optimizer": repr(t.optimizer),
        **({"param_groups": [g.as_dict() for g in t.param_groups]} if t.param_groups else {}),  # (when any)
        **({"layer_decay": t.layer_decay} if t.layer_decay is not None else {}),
        **({"freeze_first_after": t.freeze_first_after} if t.freeze_first_after is not None else {}),
        **({"tta": {"flip": t.tta.flip, "shift_px": t.tta.shift_px}} if t.tta is not None else {}),
        "schedule": {"scheduler": repr(t.scheduler), "total_epochs": t.epochs,
                     "lr_table_sha256": hashlib.sha256(table.tobytes()).hexdigest(),
                     # progressive resizing: every epoch's training side (when there is a schedule)
                     **({"resolutions": list(task._resolved.train_sides)} if task._resolved.train_sides else {})},
        "grad_clip": t.grad_clip,
        **({"grad_clip_mode": t.grad_clip_mode} if t.grad_clip_mode != "value" else {}),  # (named when not the seed's)
        **({"ema": dataclasses.asdict(t.ema)} if t.ema is not None else {}),
        **({"mixup": dataclasses.asdict(t.mixup)} if t.mixup is not None else {}),
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


def _env_defaults(saved: Any) -> tuple[Any, list[str]]:
    """A saved description with the default of every recorded variable it lacks (a checkpoint written before
    tr recorded it), and the names filled in."""
    env = saved.get("env", {}) if isinstance(saved, dict) else None
    if not isinstance(env, dict):
        return saved, []  # malformed: compared as it is
    missing = {k: v for k, v in tr_env.recorded_defaults().items() if k not in env}
    return ({**saved, "env": {**missing, **env}}, list(missing)) if missing else (saved, [])


def _as_recorded_then(saved: Any, here: dict[str, Any]) -> dict[str, Any]:
    """``here`` without what a checkpoint written before tr recorded it lacks: the data pipeline's fields, and a
    field of the plan (CompileSpec) or the EMA newer than the checkpoint while it holds its default (the run the
    checkpoint's tree compiled had no other)."""  # (a field of the plan, the EMA or the settings)
    if not isinstance(saved, dict):
        return here
    data = saved.get("data")
    if isinstance(data, dict) and "transforms" in data and "pipeline" not in data:
        here = {**here, "data": {k: v for k, v in here["data"].items() if k != "pipeline"}}
    for key, cls in (("spec", CompileSpec), ("ema", EmaConfig), ("settings", Settings)):
        old, new = saved.get(key), here.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            defaults = _jsonable({f.name: f.default for f in dataclasses.fields(cls)
                                  if f.default is not dataclasses.MISSING})
            newer = [k for k, v in new.items() if k not in old and k in defaults and defaults[k] == v]
            if newer:
                here = {**here, key: {k: v for k, v in new.items() if k not in newer}}
    return here


def _env_note(diff: str, assumed: list[str]) -> str:
    name = next((k for k in assumed if diff.startswith(f"env.{k}:")), None)
    return "" if name is None else (f" (the checkpoint does not record {name}: it was written before tr recorded "
                                    f"it, and its default is assumed)")


def _record(rec) -> dict[str, Any] | None:
    return None if rec is None else _jsonable(dataclasses.asdict(rec))


def _has_dropout(program) -> bool:
    """Whether a step draws from the dropout stream (dropout, drop path, attention dropout: each advances it)."""
    seed = program.named.get("dropout_seed")
    return seed is not None and any(v == seed for step in program.steps.values() for c in step.calls
                                    for v in c.args.values() if isinstance(v, DTensor))


RANK_STREAMS = "dropout_seed@ranks"  # every rank's dropout_seed, (world, 1, 1, 1, 2) INT32


def _world(task) -> int:
    return task.group.world_size if task.group is not None else 1


def _mine(task) -> dict[str, Any]:
    """What this rank hands rank 0 at a save: its description (a rank's shards and last batches are its own)
    and, in data-parallel training with dropout, its dropout stream."""
    out: dict[str, Any] = {"config": describe(task)}
    if _world(task) > 1 and _has_dropout(task.program):
        task.backend.synchronize()
        out["stream"] = np.ascontiguousarray(task.backend.read(task.program.named["dropout_seed"])).tobytes().hex()
    return out


def save(task, path: str | Path, record=None) -> Path:
    """Write ``task``'s state to the checkpoint directory ``path`` (atomically, never over anything but a tr
    checkpoint; see checkpoint_files). In data-parallel training every rank calls it and only rank 0 writes."""
    return save_to(task, [Path(path)], record)[0]


def save_to(task, paths: Sequence[Path], record=None, after: Callable[[], None] | None = None) -> list[Path]:
    """Save the same state to every path of ``paths`` and then run ``after`` (rank 0's tidying up, e.g. the
    pruning of old checkpoints). Every rank calls it; rank 0 writes (see :func:`together`)."""
    task._epoch_state.check("save()")
    mine = _mine(task)

    def gather_and_write() -> None:
        contributions = [mine]
        if _world(task) > 1:
            got = task.group.gather("the checkpoint save", json.dumps(mine).encode())
            if got is None:  # not rank 0, which writes
                return
            contributions = [json.loads(g) for g in got]
        _write(task, paths, record, contributions)
        if after is not None:
            after()

    together(task, gather_and_write)
    return list(paths)


def together(task, fn: Callable[[], None]) -> None:
    """Run ``fn`` on every rank (its rank-0 part writes) and make its outcome every rank's: rank 0 shares
    whether it succeeded, so an error there (a refused path, a full disk, a rank that never arrived at a
    gather) is raised on every rank, not a hang of the others until a collective times out."""
    group = task.group
    if group is None or group.world_size == 1:
        fn()
        return
    try:
        fn()
    except BaseException as e:
        if group.is_main:  # the other ranks wait for the outcome: they fail with this error, not a timeout
            _share_outcome(group, {"error": str(e), "type": type(e).__name__})
        raise
    outcome = json.loads(_share_outcome(group, {"ok": True} if group.is_main else None))
    if "error" in outcome:
        kind = getattr(errors, str(outcome.get("type")), None)
        kind = kind if isinstance(kind, type) and issubclass(kind, errors.TrError) else BackendError
        raise kind(f"rank {group.rank}: rank 0 failed: {outcome['error']}")


def _share_outcome(group, outcome: dict[str, Any] | None) -> bytes:
    what = "the checkpoint's outcome on rank 0"
    if outcome is None or "ok" in outcome:
        return group.share(what, None if outcome is None else json.dumps(outcome).encode())
    # rank 0 failed: it waits for the others to read why before it raises (and, exiting, closes the store it
    # hosts), up to a minute: ranks reach a save seconds apart, not minutes, and a dead one must not hold it long
    try:
        return group.share(what, json.dumps(outcome).encode(), timeout_s=min(group.op_timeout_s, 60.0))
    except Exception:  # noqa: BLE001 - the save's own error is the one to raise
        return b"{}"


def _write(task, paths: Sequence[Path], record, contributions: list[dict[str, Any]]) -> None:
    """Rank 0: write the checkpoint to each of ``paths`` from every rank's ``contributions`` (in rank order:
    the first, rank 0's own, gives the manifest's description)."""
    for path in paths:  # before anything is read: a refused target costs nothing
        checkpoint_files.check_target(path)
    task.backend.synchronize()
    tensors = state_tensors(task.program)
    arrays = {k: (task.backend.read(t), t.dtype) for k, t in zip(_keys(tensors), tensors)}
    epoch, step = task._epochs_done, checkpoint_checks.device_step(arrays)
    body = {"epoch": epoch, **checkpoint_checks.position(task, epoch, step), "tensors": _tensor_list(tensors),
            "config": contributions[0]["config"], "data_fingerprint": fingerprints(task.feeder),
            "engines": engines.used(task), "metrics": _record(record), **plateau.record(task)}
    if len(contributions) > 1:
        body["config_ranks"] = [c["config"] for c in contributions]
        if all("stream" in c for c in contributions):
            seed = task.program.named["dropout_seed"]
            dt = seed.dtype.np_dtype
            streams = np.stack([np.frombuffer(bytes.fromhex(c["stream"]), dt).reshape(seed.shape.dims)
                                for c in contributions])
            arrays[RANK_STREAMS] = (streams, seed.dtype)
            body["dropout_ranks"] = int(streams.shape[0])
    for path in paths:
        checkpoint_files.write(path, arrays, body)


def load(task, path: str | Path, allow_data_change: bool = False) -> dict[str, Any]:
    """Verify the checkpoint at ``path`` against ``task`` and, only when all is right, load its state.
    Returns the manifest. Damage (an edited epoch too) is a DataError, a checkpoint of another model, settings
    or data a ConfigError; both name the file and the difference, and leave the task as it was. Other
    training or validation data is accepted only with ``allow_data_change`` (a warning names it)."""
    task._epoch_state.check("resume()", cancelled_too=False)
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
    # the configuration first: a difference there names the setting (the tensors' then only say which plan)
    saved_config = manifest.get("config", {})
    per_rank = manifest.get("config_ranks")
    if isinstance(per_rank, list) and len(per_rank) == world and world > 1:  # this rank's own description
        saved_config = per_rank[rank]
    saved_config, assumed = _env_defaults(saved_config)
    a, b, grows = checkpoint_checks.growth(saved_config, _as_recorded_then(saved_config, describe(task)))
    diff = first_difference(a, b)
    if diff is not None:
        raise ConfigError(f"{mpath}: a checkpoint of another configuration (nothing loaded): {diff}"
                          f"{_env_note(diff, assumed)}")
    tensors = state_tensors(task.program)
    listed, here = manifest.get("tensors"), _tensor_list(tensors)
    if listed != here:
        i = next((i for i, (x, y) in enumerate(zip(listed or [], here)) if x != y), min(len(listed or []), len(here)))
        have = _row(listed[i]) if listed and i < len(listed) else "nothing"
        want = _row(here[i]) if i < len(here) else "nothing"
        raise ConfigError(f"{mpath}: a checkpoint of another plan (nothing loaded): state tensor {i} is {have} "
                          f"in the checkpoint, {want} in this task")
    for key, t in zip(_keys(tensors), tensors):
        got = arrays.get(key)
        if got is None or got[1] is not t.dtype or tuple(got[0].shape) != tuple(t.shape.dims):
            raise DataError(f"{where}: tensor {key!r} is {None if got is None else (got[0].shape, got[1].name)}, "
                            f"the manifest says {tuple(t.shape.dims)} {t.dtype.name} (nothing loaded)")
    if set(arrays) != set(_keys(tensors)):
        raise DataError(f"{where}: tensors {sorted(set(arrays) - set(_keys(tensors)))} are not in the manifest "
                        "(nothing loaded)")
    step = checkpoint_checks.device_step(arrays)
    epoch = checkpoint_checks.check_position(task, manifest, step, mpath)
    rule_state, lr_table = plateau.restored(task, manifest, mpath)  # (the run's LR table: its reductions written in)
    if grows:
        checkpoint_checks.check_growth(task, manifest, saved_config, step, mpath, lr_table)
    checkpoint_checks.check_data(task, manifest, mpath, allow_data_change)
    _report_engines(task, _recorded_engines(manifest, mpath), mpath)
    task.backend.synchronize()
    for key, t in zip(_keys(tensors), tensors):
        task.backend.write(t, arrays[key][0])
    if world > 1 and streams is not None and _has_dropout(task.program):  # this rank's own dropout stream
        task.backend.write(task.program.named["dropout_seed"], np.ascontiguousarray(streams[0][rank]))
    if rule_state is not None:
        task._plateau, task._lr_table = rule_state, lr_table
        task.backend.write(task.program.tensor("lr_table"), lr_table)
    task._epochs_done = epoch
    task._epoch_state.loaded()
    return manifest


def compile_for(task, path: str | Path) -> None:
    """Compile ``task`` to resume the checkpoint at ``path``. Where timing chose the saved run's convolution
    engines (TR_CUDNN_AUTOTUNE=1), the same engines are pinned (tr.task.engines), so the resumed run computes
    what the unbroken one would have, on this machine too; an engine that cannot run here (another GPU model or
    cuDNN) is a warning, and the task compiles with this machine's choice."""
    recorded = _recorded_engines(checkpoint_files.read_manifest(path), Path(path) / checkpoint_files.MANIFEST)
    if recorded is not None and engines.autotuned(recorded):
        try:
            with engines.pinned(task, recorded):
                task.compile()
            return
        except ConfigError as e:  # a failed compile leaves the task as it was: compile again without the pins
            why = e
        task.compile()
        log.warning("%s: the saved run's autotuned convolution engines cannot all run here (%s); resuming with "
                    "this machine's engines, so the run continues with other bytes than an unbroken one",
                    path, why)
        return
    task.compile()


def _recorded_engines(manifest: dict[str, Any], mpath: Path) -> dict[str, Any] | None:
    """The manifest's engine description (None: a checkpoint of a tr before engines were recorded); a malformed
    one is a DataError."""
    if "engines" not in manifest:
        return None
    why = engines.malformed(manifest["engines"])
    if why is not None:
        raise DataError(f"{mpath}: the manifest's engines are {why} (nothing loaded)")
    return manifest["engines"]


def _report_engines(task, recorded: dict[str, Any] | None, where: Path) -> None:
    """A warning when this task's convolution engines are not the saved run's: the resumed run then computes
    other bytes than the unbroken one would have (another GPU model, cuDNN, or autotuned engines not pinned)."""
    if recorded is None:
        return
    diff = engines.differences(recorded, engines.used(task))
    if diff:
        log.warning("%s: this task's convolution engines differ from the saved run's (%s%s): the resumed run will "
                    "not give the bytes of an unbroken one", where, "; ".join(diff[:3]),
                    f"; {len(diff) - 3} more" if len(diff) > 3 else "")
