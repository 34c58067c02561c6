"""safetensors through the maintained package: every tr dtype (BF16 included) round-trips, files stay
readable by safetensors itself, saves are atomic and corrupt files are DataErrors naming the file."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from tr.core import DType
from tr.core.errors import DataError
from tr.tensor import Tensor, load_safetensors, save_safetensors

st = pytest.importorskip("safetensors")
st_numpy = pytest.importorskip("safetensors.numpy")


def _tensors() -> dict[str, Tensor]:
    rng = np.random.default_rng(7)
    out = {}
    for dt in DType:
        data = rng.integers(-100, 100, (2, 1, 3, 4)).astype(dt.np_dtype)
        out[f"t_{dt.value}"] = Tensor(data, dt, name=f"t_{dt.value}")
    return out


def test_every_dtype_round_trips_bf16_included(tmp_path):
    ts = _tensors()
    p = tmp_path / "all.safetensors"
    save_safetensors(p, ts)
    back = load_safetensors(p)
    assert sorted(back) == sorted(ts)  # the BF16 tensor used to be dropped silently
    for k, t in ts.items():
        assert back[k].dtype is t.dtype and np.array_equal(back[k].data, t.data), k
    bf = Tensor(np.array([0x3F80, 0xC000], np.uint16), DType.BF16, name="bf")  # 1.0, -2.0
    back_bf = Tensor.load(bf.save(tmp_path / "bf.safetensors"))
    assert back_bf.dtype is DType.BF16 and back_bf.name == "bf" and back_bf.data.ravel().tolist() == [0x3F80, 0xC000]


def test_files_are_standard_safetensors(tmp_path):
    p = tmp_path / "x.safetensors"
    save_safetensors(p, _tensors())
    n = struct.unpack("<Q", p.read_bytes()[:8])[0]
    header = json.loads(p.read_bytes()[8 : 8 + n])
    assert header["t_bf16"]["dtype"] == "BF16" and header["t_fp32"]["shape"] == [2, 1, 3, 4]
    np_only = {k: t for k, t in _tensors().items() if t.dtype is not DType.BF16}
    save_safetensors(p, np_only)
    for k, a in st_numpy.load_file(str(p)).items():
        assert np.array_equal(a, np_only[k].data)


def test_failed_save_keeps_the_old_file_and_leaves_no_tmp(tmp_path, monkeypatch):
    p = tmp_path / "x.safetensors"
    save_safetensors(p, {"a": Tensor(np.ones(3, np.float32))})
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(DataError, match=r"x.safetensors: cannot save \(Input/output error\)"):
        save_safetensors(p, {"a": Tensor(np.zeros(3, np.float32))})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["x.safetensors"]
    assert load_safetensors(p)["a"].data.ravel().tolist() == [1.0, 1.0, 1.0]


def _raw(tmp_path) -> bytes:
    p = tmp_path / "good.safetensors"
    save_safetensors(p, {"a": Tensor(np.arange(6, dtype=np.float32))})
    return p.read_bytes()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda raw: raw[:-4], "not a valid safetensors file"),
        (lambda raw: raw[:5], "not a valid safetensors file"),
        (lambda raw: b"", "not a valid safetensors file"),
        (lambda raw: struct.pack("<Q", 2**63) + raw[8:], "not a valid safetensors file"),
        (lambda raw: raw[:8] + b"[" + raw[9:], "not a valid safetensors file"),
        (lambda raw: raw.replace(b'"F32"', b'"F64"'), "not a valid safetensors file"),
        (lambda raw: raw.replace(b'"F32"', b'"U32"'), "tensor 'a' has dtype U32, which tr cannot hold"),
    ],
)
def test_corrupt_files_are_data_errors_naming_the_file(tmp_path, make, message):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(make(_raw(tmp_path)))
    with pytest.raises(DataError, match=rf"bad.safetensors: {message}"):
        load_safetensors(p)
    with pytest.raises(DataError, match="bad.safetensors"):
        Tensor.load(p)


def test_shapes_tr_cannot_hold_are_data_errors(tmp_path):
    p = tmp_path / "5d.safetensors"
    st_numpy.save_file({"a": np.zeros((1, 1, 1, 1, 2), np.float32)}, str(p))
    with pytest.raises(DataError, match=r"5d.safetensors: 'a': Tensor needs 1 to 4 dimensions"):
        load_safetensors(p)
