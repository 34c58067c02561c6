"""Fuzzing the tensor file parsers (TRT, .npy, safetensors): seeded mutations of small valid files of
every dtype; each case loads or is a DataError naming the file, never another exception or a hang."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core import DType
from tr.tensor import Tensor, load_safetensors, save_safetensors

PLANNED = {"trt": 1200, "npy": 1200, "safetensors": 1200}
_counts: dict[str, int] = {}


def _tensors(rng) -> list[Tensor]:
    out = []
    for k, dt in enumerate(DType):
        shape = [(1, 2, 3, 4), (5,), (2, 7), (1, 1, 3, 2), (3, 1, 1, 1)][k % 5]
        out.append(Tensor(rng.integers(-50, 50, shape).astype(dt.np_dtype), dt, name=f"t{k}_{dt.value}"))
    return out


def _seeds(tmp_path, rng, suffix: str):
    seeds = []
    for t in _tensors(rng):
        if suffix == ".npy" and t.dtype is DType.BF16:
            continue  # .npy cannot hold BF16 (refused on save)
        p = tmp_path / f"{t.name}{suffix}"
        if suffix == ".safetensors":
            save_safetensors(p, {t.name: t, "extra": Tensor(np.arange(6, dtype=np.int32))})
        else:
            t.save(p)
        seeds.append((p, p.read_bytes()))
    return seeds


@pytest.mark.parametrize("fmt, suffix, load, header", [
    ("trt", ".trt", Tensor.load, 80),
    ("npy", ".npy", Tensor.load, 128),
    ("safetensors", ".safetensors", load_safetensors, 200),
])
def test_fuzz_tensor_files(tmp_path, fuzz, fmt, suffix, load, header):
    rng = np.random.default_rng(29)
    out = fuzz(fmt, _seeds(tmp_path, rng, suffix), load, PLANNED[fmt], seed=31 + len(fmt), header=header)
    assert out.rejected > 0.3 * out.cases
    if fmt == "trt":  # header, name, padding and payload are all under a CRC: only no-op mutations load
        assert out.loaded == out.unchanged
    _counts[fmt] = out.cases


def test_fuzz_tensor_files_ran_every_planned_case():
    total = sum(_counts.values())
    print(f"[fuzz] tr.tensor file parsers: {total} cases in all ({_counts})")
    assert _counts == PLANNED and total >= sum(PLANNED.values())
