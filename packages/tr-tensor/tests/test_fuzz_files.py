"""Fuzzing the tensor file parsers (TRT, .npy, safetensors, the seed's TSR4): seeded mutations of small valid files of
every dtype; each case loads or is a DataError naming the file, never another exception or a hang."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core import DType
from tr.tensor import Tensor, load_safetensors, load_tsr, save_safetensors

PLANNED = {"trt": 1200, "npy": 1200, "safetensors": 1200, "tsr": 800, "tsr_zlib": 400}
_counts: dict[str, int] = {}


def _tensors(rng) -> list[Tensor]:
    out = []
    for k, dt in enumerate(DType):
        shape = [(1, 2, 3, 4), (5,), (2, 7), (1, 1, 3, 2), (3, 1, 1, 1)][k % 5]
        out.append(Tensor(rng.integers(-50, 50, shape).astype(dt.np_dtype), dt, name=f"t{k}_{dt.value}"))
    return out


def _seeds(tmp_path, rng, suffix: str, fmt: str):
    seeds = []
    if suffix == ".tsr":  # the seed's format, read only: files built from its layout (tsr_files.tsr_bytes)
        from tsr_files import tsr_bytes

        arrays = [t.data for t in _tensors(rng) if t.dtype in (DType.FP32, DType.FP16, DType.INT8, DType.INT32)]
        for k in range(3):
            p = tmp_path / f"s{k}.tsr"
            p.write_bytes(tsr_bytes(arrays[k:k + 3], compress=fmt == "tsr_zlib"))
            seeds.append((p, p.read_bytes()))
        return seeds
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
    ("tsr", ".tsr", load_tsr, 320),
    ("tsr_zlib", ".tsr", load_tsr, 320),
])
def test_fuzz_tensor_files(tmp_path, fuzz, fmt, suffix, load, header):
    rng = np.random.default_rng(29)
    out = fuzz(fmt, _seeds(tmp_path, rng, suffix, fmt), load, PLANNED[fmt], seed=31 + len(fmt), header=header)
    assert out.rejected > 0.3 * out.cases
    # every byte is under a CRC or checked (TSR RAW: entries, padding): only no-op mutations load. Not so for
    # ZLIB: deflate has inert bits (the last byte's padding), so a changed stream can decompress to the same
    # elements, which their CRC vouches for.
    if fmt in ("trt", "tsr"):
        assert out.loaded == out.unchanged
    _counts[fmt] = out.cases


def test_fuzz_tensor_files_ran_every_planned_case():
    total = sum(_counts.values())
    print(f"[fuzz] tr.tensor file parsers: {total} cases in all ({_counts})")
    assert _counts == PLANNED and total >= sum(PLANNED.values())
