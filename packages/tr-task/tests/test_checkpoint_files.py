"""The checkpoint directory format: round trip, the two-rename path's recovery where renameat2 cannot swap,
a failed save leaving the previous checkpoint and no temporaries, and refused manifests (version, file list;
version 1, the seed-region layout, saying why); state_tensors takes EMA regions whenever the plan allocates
them."""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import numpy as np
import pytest

from tr.core.dtype import DType
from tr.core.errors import DataError
from tr.core.memory import Region, Role, dtype_group
from tr.core.shape import Shape
from tr.graph.layers.groups import FC_W
from tr.task import checkpoint, checkpoint_files
from tr.tensor.dtensor import DTensor, slot_bytes_for


def _w(v: float) -> dict:
    return {"w": (np.full((4, 3), v, np.float32), DType.FP32), "h": (np.full((2,), v, np.float16), DType.FP16)}


def test_round_trip_and_replace(tmp_path):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    checkpoint_files.write(tmp_path / "ck", _w(2), {"epoch": 2})
    m, t = checkpoint_files.read(tmp_path / "ck")
    assert m["epoch"] == 2 and (t["w"][0] == 2).all() and t["h"][1] is DType.FP16
    assert os.listdir(tmp_path) == ["ck"]


def test_without_an_atomic_swap_a_crash_between_the_renames_reads_the_previous_one(tmp_path, monkeypatch):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    monkeypatch.setattr(checkpoint_files, "_exchange", lambda a, b: False)
    real = os.replace

    def crash_on_second(src, dst):
        if str(src).startswith(str(tmp_path / ".ck.tmp-")):
            raise KeyboardInterrupt  # the process dies after moving the old checkpoint aside
        real(src, dst)

    monkeypatch.setattr(checkpoint_files.os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_files.write(tmp_path / "ck", _w(2), {"epoch": 2})
    assert not (tmp_path / "ck").exists()
    assert checkpoint_files.read(tmp_path / "ck")[0]["epoch"] == 1  # from .ck.old
    monkeypatch.setattr(checkpoint_files.os, "replace", real)
    checkpoint_files.write(tmp_path / "ck", _w(3), {"epoch": 3})  # the next save completes and tidies up
    assert os.listdir(tmp_path) == ["ck"] and checkpoint_files.read(tmp_path / "ck")[0]["epoch"] == 3


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    real = checkpoint_files._write_file

    def disk_full(path, data):
        if path.name == checkpoint_files.MANIFEST:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(checkpoint_files, "_write_file", disk_full)
    with pytest.raises(DataError, match="ck: cannot save the checkpoint .No space left on device"):
        checkpoint_files.write(tmp_path / "ck", _w(2), {"epoch": 2})
    assert checkpoint_files.read(tmp_path / "ck")[0]["epoch"] == 1 and os.listdir(tmp_path) == ["ck"]


@pytest.mark.parametrize("changes, msg", [
    ({"version": 99}, "format version 99, this tr reads 2"),
    ({"version": 1}, "format version 1: it was written by an older tr with the seed-region memory layout .regions "
                     "such as W_FC_WEIGHT., which this tr cannot read"),
    ({"version": True}, "format version True, this tr reads 2"),  # JSON true equals 1 in Python: not version 1
    ({"version": 1.0}, "format version 1.0, this tr reads 2"),
    ({"version": [1]}, r"format version \[1\], this tr reads 2"),
    ({"format": "other"}, "not a tr checkpoint manifest"),
    ({"files": {}}, "lists files"),
])
def test_refused_manifests_name_the_file(changes, msg, tmp_path, resign):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    resign(tmp_path / "ck", **changes)
    with pytest.raises(DataError, match=msg) as e:
        checkpoint_files.read(tmp_path / "ck")
    assert str(tmp_path / "ck" / "manifest.json") in str(e.value)


def _t(i: int, name: str, region: Region, slot: bool = True) -> DTensor:
    shape = Shape(1, 1, 1, 4)
    return DTensor(i, name, region, shape, DType.FP32, slot_bytes_for(shape, DType.FP32) if slot else 0, 256 * i)


def test_state_tensors_take_ema_weights_when_allocated_and_skip_transients():
    fp32, int32 = dtype_group(DType.FP32), dtype_group(DType.INT32)
    tensors = (_t(0, "w", Region(Role.PARAM, FC_W)), _t(1, "w.ema", Region(Role.EMA, FC_W)),
               _t(2, "w.m", Region(Role.MOMENT1, FC_W)), _t(3, "g", Region(Role.GRAD, FC_W)),
               _t(4, "x", Region(Role.ACTIVATION, fp32)), _t(5, "mask", Region(Role.MASK)),
               _t(6, "lr_table", Region(Role.SCALAR, fp32)), _t(7, "e16", Region(Role.EMA_FP16, FC_W), slot=False),
               _t(8, "accum", Region(Role.RESULT_SUM)), _t(9, "step", Region(Role.SCALAR, int32)))
    names = [t.name for t in checkpoint.state_tensors(SimpleNamespace(tensors=tensors))]
    assert names == ["w", "w.ema", "w.m", "accum", "step"]


def test_a_save_onto_a_file_is_refused(tmp_path):
    (tmp_path / "ck").write_text("mine")
    with pytest.raises(DataError, match="it is a file, not a checkpoint directory"):
        checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    assert (tmp_path / "ck").read_text() == "mine"


# --- a save never deletes what it did not write ------------------------------------------------------------

def _user_folder(path):
    """What log_to leaves: a user's folder a save must not replace."""
    (path / "tensorboard").mkdir(parents=True)
    (path / "metrics.csv").write_text("epoch,train_loss\n1,0.5\n")
    (path / "tensorboard" / "events.out").write_bytes(b"\x00\x01")
    return path


@pytest.mark.parametrize("make, why", [
    (_user_folder, "holds metrics.csv, tensorboard, which a checkpoint does not"),
    (lambda p: (p.mkdir(), (p / ".keep").write_text(""))[0], "holds .keep"),
    (lambda p: (p.mkdir(), (p / "manifest.json").write_text('{"format": "mine"}'))[0],
     "manifest.json is not a tr checkpoint manifest"),
    (lambda p: (p.mkdir(), (p / "state.safetensors").write_bytes(b"x"))[0], "no manifest.json"),
])
def test_a_save_onto_a_folder_that_is_not_a_checkpoint_is_refused_and_leaves_it_whole(make, why, tmp_path):
    target = tmp_path / "logs"
    make(target)
    before = {p.relative_to(target): p.read_bytes() if p.is_file() else None for p in target.rglob("*")}
    with pytest.raises(DataError, match=f"{target}: cannot save a checkpoint there: .*{why}"):
        checkpoint_files.write(target, _w(1), {"epoch": 1})
    assert {p.relative_to(target): p.read_bytes() if p.is_file() else None for p in target.rglob("*")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # no temporary left either


def test_a_checkpoint_a_user_added_files_to_is_not_replaced(tmp_path):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    (tmp_path / "ck" / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="holds notes.txt"):
        checkpoint_files.write(tmp_path / "ck", _w(2), {"epoch": 2})
    assert (tmp_path / "ck" / "notes.txt").read_text() == "mine"
    assert not checkpoint_files.is_checkpoint(tmp_path / "ck")


def test_a_save_through_a_symbolic_link_is_refused(tmp_path):
    checkpoint_files.write(tmp_path / "real", _w(1), {"epoch": 1})
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(DataError, match="link: cannot save a checkpoint there: it is a symbolic link"):
        checkpoint_files.write(tmp_path / "link", _w(2), {"epoch": 2})
    assert checkpoint_files.read(tmp_path / "real")[0]["epoch"] == 1


def test_an_empty_folder_takes_a_checkpoint_and_missing_parents_are_made(tmp_path):
    (tmp_path / "empty").mkdir()
    checkpoint_files.write(tmp_path / "empty", _w(1), {"epoch": 1})
    checkpoint_files.write(tmp_path / "runs" / "mlp" / "ck", _w(2), {"epoch": 2})  # was: No such file or directory
    assert checkpoint_files.read(tmp_path / "empty")[0]["epoch"] == 1
    assert checkpoint_files.read(tmp_path / "runs" / "mlp" / "ck")[0]["epoch"] == 2
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="cannot make"):
        checkpoint_files.write(tmp_path / "file" / "ck", _w(1), {"epoch": 1})


def test_only_checkpoint_leftovers_are_tidied_up(tmp_path):
    checkpoint_files.write(tmp_path / "ck", _w(1), {"epoch": 1})
    dead = tmp_path / ".ck.tmp-999999999-dead"  # a writer that died mid-save: only checkpoint files
    dead.mkdir()
    (dead / "state.safetensors").write_bytes(b"partial")
    users = tmp_path / ".ck.tmp-999999998-mine"  # the same name pattern, a user's files
    users.mkdir()
    (users / "data.bin").write_bytes(b"keep")
    live = tmp_path / f".ck.tmp-{os.getppid()}-live"  # a writer that still runs (here: our parent process)
    live.mkdir()
    old = tmp_path / ".ck.old"
    old.mkdir()
    (old / "diary.txt").write_text("keep")
    checkpoint_files.write(tmp_path / "ck", _w(2), {"epoch": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ck", users.name, live.name, old.name])
    assert (users / "data.bin").read_bytes() == b"keep" and (old / "diary.txt").read_text() == "keep"
