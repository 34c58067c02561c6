"""Fuzzing checkpoints (task.save / task.resume, tr.task.checkpoint) of tiny CPU tasks: the raw bytes of
manifest.json and state.safetensors, and structure-aware edits that recompute the manifest's SHA-256 and its
file checksums, so that resume's semantic checks decide: the epoch, the tensor list, the configuration, the
dtype, shape and set of the tensors, a data-parallel run's dropout streams, and whatever keys a newer manifest
carries (every top-level key is edited, known or not; none is required by name here).

Accepted outcomes: a load that put the file's tensors into the arena and the manifest's epoch into the task,
or a DataError / ConfigError naming the checkpoint with the arena's bytes and the epoch count as they were.
No native code reads a checkpoint, so this suite is not part of the ASan run. One compiled task per model
serves every case; the files are written to memory (/dev/shm).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from parser_fuzz import dumps, mutate, mutate_json, one_process, print_total, run_cases, scratch

from tr.algo.optimizer import SGD, Adam
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError, DataError
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, dropout, fc, flatten, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

st = pytest.importorskip("safetensors.numpy")

PLANNED = {"checkpoint mlp": 2000, "checkpoint cnn": 1000, "checkpoint data-parallel": 700}
MANIFEST, STATE = "manifest.json", "state.safetensors"  # the directory format (tr.task.checkpoint_files)
RANK_STREAMS = "dropout_seed@ranks"
_counts: dict[str, int] = {}

_rng = np.random.default_rng(0)
X = _rng.standard_normal((24, 4, 4, 1)).astype(np.float32)
Y = (np.arange(24) % 3).astype(np.int32)


def _task(model, opt) -> DeepLearningTask:
    feeder = ArrayFeeder((X[:16], Y[:16]), (X[16:], Y[16:]), 8, seed=2, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(1).global_batch_size(8)).device("cpu").quiet().model(model)
            .optimizer(opt).scheduler(ConstantLR(0.01)).data(feeder).total_epochs(4)).compile()


# ---- the manifest's checksums, as the format defines them (tr.task.checkpoint_files) --------------------

def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def seal(m: dict[str, Any], state: bytes | None = None) -> dict[str, Any]:
    """The manifest's own SHA-256 (of its canonical JSON without that key) recomputed, and with ``state`` the
    state file's entry under "files" too (where "files" still has that shape)."""
    if state is not None and isinstance(m.get("files"), dict) and isinstance(m["files"].get(STATE), dict):
        m["files"][STATE] = {"sha256": _sha(state), "bytes": len(state)}
    body = {k: v for k, v in m.items() if k != "sha256"}
    m["sha256"] = _sha(dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return m


def _text(m: Any) -> bytes:
    return dumps(m, sort_keys=True, indent=1).encode()


@dataclass
class Seed:
    """A checkpoint to mutate and the compiled task (playing ``rank`` of a data-parallel run, or not) that
    resumes every case."""

    task: DeepLearningTask
    manifest: dict[str, Any]
    state: bytes
    rank: SimpleNamespace | None = None


DIR = object()  # in a case's files: a directory in that file's place
Files = dict[str, "bytes | object"]


# ---- mutations: (files of the case's checkpoint directory, or bytes for a file in its place; recipe) ------

def _tensors(state: bytes) -> dict[str, np.ndarray]:
    return dict(st.load(state))


def _edit_tensors(seed: Seed, r: np.random.Generator) -> tuple[bytes, str]:
    """One tensor of the state file changed in dtype, shape, name or values, dropped, or one added."""
    arrays = _tensors(seed.state)
    names = sorted(arrays)
    name = names[int(r.integers(0, len(names)))]
    if RANK_STREAMS in arrays and r.random() < 0.4:  # a data-parallel checkpoint: its streams most often
        name = RANK_STREAMS
    a = arrays[name]
    k = int(r.integers(0, 8))
    if k == 0:
        dts = (np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8, np.bool_, np.float32)
        dt = dts[int(r.integers(0, len(dts)))]
        arrays[name] = a.astype(dt)
        how = f"{name}: dtype {a.dtype} -> {np.dtype(dt)}"
    elif k == 1:
        shapes = [a.reshape(-1).shape, a.T.shape, (1, *a.shape), a.shape[1:] or (1,), (0,), (*a.shape[:-1], 0),
                  (2, *a.shape)]
        shape = shapes[int(r.integers(0, len(shapes)))]
        arrays[name] = np.resize(a, shape).astype(a.dtype)
        how = f"{name}: shape {a.shape} -> {shape}"
    elif k == 2:
        del arrays[name]
        how = f"{name}: dropped"
    elif k == 3:
        extra = [name + "_", "extra", RANK_STREAMS, "L9.w"][int(r.integers(0, 4))]
        arrays[extra] = a.copy() if extra != RANK_STREAMS else np.zeros((3, *a.shape), np.int32)
        how = f"{extra}: added"
    elif k == 4:
        other = names[int(r.integers(0, len(names)))]
        arrays[name], arrays[other] = arrays[other], a
        how = f"{name} and {other}: swapped"
    elif k == 5:
        arrays[name + "_"] = arrays.pop(name)
        how = f"{name}: renamed {name}_"
    else:  # values only: a valid checkpoint of other numbers
        b = a.copy().reshape(-1)
        if b.size:
            j = int(r.integers(0, b.size))
            v = [0, 1, -1, 2**31 - 1, 1e30, 3.5][int(r.integers(0, 6))]
            b[j] = np.asarray(v).astype(b.dtype) if np.issubdtype(b.dtype, np.floating) else np.int32(v % 1000)
        arrays[name] = b.reshape(a.shape)
        how = f"{name}: a value changed"
    return st.save(arrays), how


def _edit_state_header(seed: Seed, r: np.random.Generator) -> tuple[bytes, str]:
    """The safetensors JSON header edited (offsets, dtypes, shapes, names), its length field kept right."""
    n = int.from_bytes(seed.state[:8], "little")
    head, data = json.loads(seed.state[8:8 + n]), seed.state[8 + n:]
    head, how = mutate_json(head, r)
    text = dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data, f"state header {how}"


_WEIGHT = {"epoch": 4, "tensors": 4, "config": 4, "files": 2, "dropout_ranks": 3, "config_ranks": 2}


def _edit_manifest(seed: Seed, r: np.random.Generator) -> tuple[dict[str, Any], str]:
    """One top-level key of the manifest edited (any key it has: the weights favour the ones resume reads)."""
    m = json.loads(json.dumps(seed.manifest))
    keys = sorted(k for k in m if k != "sha256")
    w = np.array([_WEIGHT.get(k, 1) for k in keys], float)
    key = keys[int(r.choice(len(keys), p=w / w.sum()))]
    if key == "epoch" and r.random() < 0.6:
        v = [m["epoch"] + 1, m["epoch"] - 1, 0, -1, 2**63, 10**30, float(m["epoch"]), str(m["epoch"]), None,
             True][int(r.integers(0, 10))]
        m["epoch"] = v
        return m, f"epoch -> {v!r}"
    if r.random() < 0.05:
        del m[key]
        return m, f"{key}: deleted"
    m, how = mutate_json(m, r, protect=[k for k in m if k != key])
    return m, how


def mutate_checkpoint(seed: Seed, r: np.random.Generator) -> tuple[Files | bytes, str]:
    manifest, state = _text(seed.manifest), seed.state
    k = int(r.choice(7, p=[0.10, 0.08, 0.12, 0.35, 0.20, 0.10, 0.05]))
    if k == 0:
        data, how = mutate(manifest, r, header=len(manifest))
        return {MANIFEST: data, STATE: state}, f"manifest bytes: {how}"
    if k == 1:
        data, how = mutate(state, r, header=8 + int.from_bytes(state[:8], "little"))
        return {MANIFEST: manifest, STATE: data}, f"state bytes: {how}"
    if k in (2, 4, 5):  # the state file changed, the manifest told its new checksum and size
        if k == 2:
            data, how = mutate(state, r, header=8 + int.from_bytes(state[:8], "little"))
            how = f"state bytes: {how}"
        else:
            data, how = (_edit_tensors if k == 4 else _edit_state_header)(seed, r)
        m = json.loads(json.dumps(seed.manifest))
        return {MANIFEST: _text(seal(m, data)), STATE: data}, f"{how}; manifest sealed"
    if k == 3:
        m, how = _edit_manifest(seed, r)
        if r.random() < 0.9:
            seal(m)
            how += "; manifest sealed"
        return {MANIFEST: _text(m), STATE: state}, how
    layouts: list[tuple[Files | bytes, str]] = [
        ({MANIFEST: manifest}, "no state file"),
        ({STATE: state}, "no manifest"),
        ({MANIFEST: manifest, STATE: state, "notes.txt": b"x"}, "an extra file"),
        ({MANIFEST: manifest, STATE: DIR}, "the state file is a directory"),
        ({MANIFEST: DIR, STATE: state}, "the manifest is a directory"),
        ({MANIFEST: state, STATE: manifest}, "the two files swapped"),
        ({}, "an empty directory"),
        (manifest, "a file where the directory should be"),
    ]
    return layouts[int(r.integers(0, len(layouts)))]


def _write(path: Path, files: Files | bytes) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if isinstance(files, bytes):
        path.write_bytes(files)
        return
    path.mkdir()
    for name, data in files.items():
        if data is DIR:
            (path / name).mkdir()
        else:
            (path / name).write_bytes(data)


# ---- the oracle -------------------------------------------------------------------------------------------

def _arena(task) -> bytes:
    return task.backend.arena.tobytes()


def check(seed: Seed, path: Path, files: Files | bytes) -> None:
    """Resume from ``path``: loaded as the files say, or refused with the task as it was."""
    task = seed.task
    before, epochs = _arena(task), task._epochs_done
    task.group = seed.rank
    try:
        task.resume(path)
    except (DataError, ConfigError):
        assert _arena(task) == before, "a refused checkpoint changed the arena"
        assert task._epochs_done == epochs, "a refused checkpoint changed the epoch count"
        raise
    finally:
        task.group = None
    assert isinstance(files, dict)
    manifest, arrays = json.loads(files[MANIFEST]), _tensors(files[STATE])
    assert task._epochs_done == manifest["epoch"], (task._epochs_done, manifest["epoch"])
    for t in checkpoint.state_tensors(task.program):
        want = arrays[t.name]
        if seed.rank is not None and t.name == "dropout_seed":
            want = arrays[RANK_STREAMS][seed.rank.rank]
        got = task.backend.read(t)
        assert got.dtype == want.dtype and got.shape == want.shape, f"{t.name}: {got.dtype} {got.shape} loaded"
        assert got.tobytes() == want.tobytes(), f"{t.name}: other bytes than the file's"


# ---- the seeds --------------------------------------------------------------------------------------------

def _seed(model, opt, d: Path, rank: SimpleNamespace | None = None) -> Seed:
    task = _task(model, opt)
    task.run(1)
    task.save(d)
    seed = Seed(task, json.loads((d / MANIFEST).read_bytes()), (d / STATE).read_bytes(), rank)
    if rank is not None:  # a data-parallel run's checkpoint: every rank's dropout stream (made up here)
        arrays = _tensors(seed.state)
        own = arrays["dropout_seed"]
        arrays[RANK_STREAMS] = np.stack([own, own + 7]).astype(own.dtype)
        seed.state = st.save(arrays)
        seed.manifest["dropout_ranks"] = rank.world_size
        seed.manifest["config_ranks"] = [seed.manifest["config"]] * rank.world_size  # each rank's description
        seal(seed.manifest, seed.state)
    return seed


SEEDS: dict[str, Callable[[Path], Seed]] = {
    "checkpoint mlp": lambda d: _seed(seq(fc(8), relu(), dropout(0.5), fc(3)), Adam(), d),
    "checkpoint cnn": lambda d: _seed(seq(conv(4, 3, 1, 1), bn(), relu(), flatten(), fc(3)), SGD().momentum(0.9), d),
    # rank 1 of 2, stood in by this one process (there is no other rank to agree with)
    "checkpoint data-parallel": lambda d: _seed(seq(fc(8), relu(), dropout(0.5), fc(3)), Adam(), d,
                                                SimpleNamespace(rank=1, world_size=2, agree=lambda what, facts: None)),
}


@pytest.mark.parametrize("label", list(PLANNED))
def test_fuzz_checkpoints(label):
    with scratch("tr-fuzz-ck-") as d:
        seed = SEEDS[label](d / "seed")
        seed_files = {MANIFEST: _text(seed.manifest), STATE: seed.state}
        _write(d / "ck", seed_files)
        check(seed, d / "ck", seed_files)  # the seed itself loads
        r = np.random.default_rng(sum(map(ord, label)))
        path = d / "ck"

        def cases():
            for _ in range(PLANNED[label]):
                files, how = mutate_checkpoint(seed, r)
                _write(path, files)
                yield how, (lambda files=files: check(seed, path, files)), (str(path),)

        out = run_cases(label, cases(), accept=(DataError, ConfigError))
    assert out.loaded > 0.05 * out.cases and out.rejected > 0.5 * out.cases, out
    _counts[label] = out.cases


@one_process
def test_fuzz_checkpoints_ran_every_planned_case():
    print_total("checkpoints", _counts)
    assert _counts == PLANNED
