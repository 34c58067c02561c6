"""Helpers for the CUDA backend tests: one arena layout on both backends, the same inputs, compare outputs.

Twin places tensors with backend_testkit.SimpleArena, allocates a CpuBackend (the reference) and a
CudaBackend over the same ArenaLayout, writes every input to both, poisons the CUDA outputs (so an element a
kernel never writes shows up), runs the same op calls on both, and compares.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from backend_testkit import SimpleArena

from tr.backend.cpu import CpuBackend
from tr.core.dtype import DType
from tr.core.ops import OpCall


def cuda_backend(**options: Any) -> Any:
    from tr.backend.cuda import CudaBackend

    return CudaBackend(**options)


class Twin:
    def __init__(self, **cuda_options: Any) -> None:
        self.arena = SimpleArena()
        self.cuda_options = cuda_options
        self.cpu: CpuBackend | None = None
        self.gpu: Any = None
        self.rng = np.random.default_rng(1234)

    def add(self, name: str, shape: Any, dtype: str = "fp32", region: Any = None) -> Any:
        if region is None:
            return self.arena.add(name, shape, dtype)
        return self.arena.add(name, shape, dtype, region)

    def __getitem__(self, name: str) -> Any:
        return self.arena[name]

    def allocate(self) -> Twin:
        layout = self.arena.layout()
        self.cpu = CpuBackend()
        self.cpu.allocate(layout)
        self.gpu = cuda_backend(**self.cuda_options)
        self.gpu.allocate(layout)
        return self

    def write(self, name: str, values: Any) -> None:
        t = self.arena[name]
        self.cpu.write(t, values)
        self.gpu.write(t, values)

    def fill(self, name: str, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
        """Random values (never zero) in both backends; integers for INT tensors."""
        t = self.arena[name]
        if t.dtype in (DType.INT8, DType.INT32):
            v = self.rng.integers(int(lo), int(hi), t.numel)
        else:
            v = self.rng.uniform(lo, hi, t.numel).astype(np.float32)
            v[v == 0] = 0.5
        self.write(name, v)
        return v

    def poison(self, *names: str) -> None:
        """Garbage in the CUDA copy only: NaN bits for floats, 0x5A bytes otherwise."""
        for name in names:
            t = self.arena[name]
            raw = np.full(t.nbytes, 0x5A, np.uint8)
            if t.dtype is DType.FP32:
                raw = np.full(t.numel, np.nan, np.float32).view(np.uint8)
            elif t.dtype is DType.FP16:
                raw = np.full(t.numel, np.nan, np.float16).view(np.uint8)
            self.gpu.write_bytes(t.offset, raw)

    def run(self, *calls: OpCall, name: str = "test", poison: tuple[str, ...] = ()) -> tuple[Any, Any]:
        self.poison(*poison)
        gc, gg = self.cpu.capture(name, calls), self.gpu.capture(name, calls)
        self.cpu.launch(gc)
        self.gpu.launch(gg)
        self.gpu.synchronize()
        return gc, gg

    def both(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        t = self.arena[name]
        return self.cpu.read(t), self.gpu.read(t)


def as_f64(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.uint16:  # BF16 bits
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def close(actual: np.ndarray, expected: np.ndarray, tol: float, what: str = "") -> None:
    """max |a - e| <= tol * max(1, max finite |e|), NaN exactly where the reference has NaN."""
    a, e = as_f64(actual), as_f64(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert np.array_equal(np.isnan(a), np.isnan(e)), f"{what}: NaN at different places"
    ok = ~np.isnan(e)
    a, e = a[ok], e[ok]
    with np.errstate(invalid="ignore"):
        diff = np.where(a == e, 0.0, np.abs(a - e))  # equal infinities count as no error
    finite = np.abs(e[np.isfinite(e)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    err = float(diff.max()) if diff.size else 0.0
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol:.1g} * {scale:.3g}"


def rel_norm(actual: np.ndarray, expected: np.ndarray) -> float:
    """||a - e|| / ||e||."""
    a, e = as_f64(actual).ravel(), as_f64(expected).ravel()
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-30))
