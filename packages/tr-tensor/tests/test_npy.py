""".npy files: atomic saves (temporary file, fsync, rename) and DataError for every corrupt file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import numpy.lib.format as npf
import pytest

from tr.core import DType
from tr.core.errors import DataError, DTypeError
from tr.tensor import Tensor


def _tensor(seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal((2, 3, 4, 5)).astype(np.float32), name="x")


def test_round_trip_and_numpy_interop(tmp_path):
    t = _tensor()
    p = t.save(tmp_path / "x.npy")
    assert np.array_equal(np.load(p), t.data)
    back = Tensor.load(p)
    assert back.dtype is DType.FP32 and np.array_equal(back.data, t.data)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)))
    assert np.array_equal(Tensor.load(tmp_path / "f.npy").data[0, 0], np.arange(12).reshape(3, 4))


def test_failed_save_keeps_the_old_file_and_leaves_no_tmp(tmp_path, monkeypatch):
    old = _tensor(1)
    p = old.save(tmp_path / "x.npy")

    def torn(f, array, **kw):  # half the bytes, then the disk fills up
        f.write(b"\x93NUMPY" + b"\0" * 40)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(npf, "write_array", torn)
    with pytest.raises(DataError, match=r"x.npy: cannot save \(No space left on device\)"):
        _tensor(2).save(p)
    assert sorted(os.listdir(tmp_path)) == ["x.npy"]
    assert np.array_equal(Tensor.load(p).data, old.data)


def test_kill_9_during_a_save_leaves_the_previous_file(tmp_path):
    # The child is killed after writing the new bytes and before the rename (inside fsync).
    p = tmp_path / "x.npy"
    _tensor(1).save(p)
    child = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from tr.tensor import Tensor
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        Tensor(np.zeros((64, 64, 64), np.float32)).save({str(p)!r})
    """)
    r = subprocess.run([sys.executable, "-c", child], timeout=60)
    assert r.returncode == -signal.SIGKILL
    assert np.array_equal(Tensor.load(p).data, _tensor(1).data)


def test_bf16_cannot_go_to_npy(tmp_path):
    with pytest.raises(DTypeError, match="npy has no bfloat16"):
        Tensor(np.zeros(4, np.uint16), DType.BF16).save(tmp_path / "b.npy")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda raw: raw[: len(raw) - 5], r"so 608 bytes are expected, the file has 603 \(truncated\)"),
        (lambda raw: raw + b"\0", r"the file has 609 \(trailing bytes\)"),
        (lambda raw: raw[:20], "corrupt or truncated header"),
        (lambda raw: b"\x93NUMPX" + raw[6:], "corrupt or truncated header"),
        (lambda raw: raw.replace(b"'descr': '<f4'", b"'descr': '<q4'"), "corrupt or truncated header"),
        (lambda raw: raw.replace(b"(2, 3, 4, 5)", b"(2, 3, 4, 9)"), r"the file has 608 \(truncated\)"),
        (lambda raw: raw.replace(b"(2, 3, 4, 5)", b"(2**64, 1)  "), "corrupt or truncated header"),
        (lambda raw: b"", "corrupt or truncated header"),
    ],
)
def test_corrupt_files_are_data_errors_naming_the_file(tmp_path, make, message):
    raw = _tensor().save(tmp_path / "good.npy").read_bytes()
    p = tmp_path / "bad.npy"
    p.write_bytes(make(raw))
    with pytest.raises(DataError, match=rf"bad.npy: .*{message}"):
        Tensor.load(p)


def test_arrays_tr_cannot_hold_are_data_errors(tmp_path):
    np.save(tmp_path / "f64.npy", np.zeros(3))
    with pytest.raises(DataError, match="f64.npy: numpy dtype float64 has no tr DType"):
        Tensor.load(tmp_path / "f64.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match="obj.npy: holds Python objects"):
        Tensor.load(tmp_path / "obj.npy")
    np.save(tmp_path / "5d.npy", np.zeros((1, 1, 1, 1, 2), np.float32))
    with pytest.raises(DataError, match=r"5d.npy: shape \(1, 1, 1, 1, 2\) is not"):
        Tensor.load(tmp_path / "5d.npy")
    np.save(tmp_path / "empty.npy", np.zeros((0, 3), np.float32))
    with pytest.raises(DataError, match="empty.npy: shape"):
        Tensor.load(tmp_path / "empty.npy")
    (tmp_path / "dir.npy").mkdir()
    with pytest.raises(DataError, match="dir.npy: cannot read"):
        Tensor.load(tmp_path / "dir.npy")
