"""TransferStation: two host buffers (zones A and B) per device between the workers and the trainer.

Batch k of an epoch lives in zone k % 2. Workers write batch k's samples once the zone is free for it;
the consumer ``acquire(k)`` blocks (on a condition variable, GIL released) until all of batch k is
in, reads or copies it, and ``release(k)``, which hands the zone to batch k + 2. So the workers fill
one zone while the consumer reads the other.

Zone layout (bytes, each part 256-aligned): int32 labels at 0, then the samples (NHWC, float32, float16 or
bfloat16 as uint16 bit patterns) at ``data_offset``. The buffers may be numpy arrays made here or memory handed
in (e.g. pinned host memory from a backend) as any writable buffer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tr.core.align import align_up_256
from tr.core.dtype import DType
from tr.core.errors import ConfigError, DTypeError, ShapeError
from tr.data import _native
from tr.data.checks import MAX_IMAGE_BYTES, MAX_SIDE
from tr.data.fused import out_dtype

MAX_BATCH = 1 << 20  # samples per batch (a zone of MAX_BATCH 224x224x3 FP32 samples is already 600 GiB)

EpochCancelled = _native.EpochCancelled


def _batch_index(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:  # 1.5 is not batch 1
        raise ConfigError(f"a batch index is an integer >= 0, got {k!r}")
    return int(k)


_SAMPLE_DTYPES = (DType.FP32, DType.FP16, DType.BF16)
_ALLOWED = "float32, float16 or bfloat16"


def _sample_dtype(dtype: Any) -> DType:
    """The samples' tr DType: FP32, FP16 or BF16, from a DType, a tr name ("bf16"), "bfloat16" or a numpy dtype.
    A numpy uint16 is refused although it is BF16's storage: as a dtype it does not say the samples are floats."""
    d: DType | None
    if isinstance(dtype, DType):
        d, shown = dtype, dtype.value
    elif isinstance(dtype, str) and dtype.strip().lower() == "bfloat16":
        d, shown = DType.BF16, dtype
    else:
        try:
            npd: np.dtype | None = np.dtype(dtype)
        except TypeError:  # not numpy's: maybe a tr name ("fp16", "bf16")
            npd = None
        try:
            d = DType.parse(dtype if npd is None else npd)
        except DTypeError:
            d = None
        shown = repr(dtype) if npd is None else npd.name
    if d is None or d not in _SAMPLE_DTYPES:
        hint = " (bfloat16's bit patterns: pass 'bfloat16' or DType.BF16)" if shown == "uint16" else ""
        raise ConfigError(f"sample dtype must be {_ALLOWED}, got {shown}{hint}")
    return d


def _np_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype the samples are stored as (uint16 for BF16)."""
    return _sample_dtype(dtype).np_dtype


@dataclass(frozen=True)
class ZoneLayout:
    label_offset: int
    label_bytes: int
    data_offset: int
    data_bytes: int
    zone_bytes: int


@dataclass(frozen=True)
class Batch:
    """Batch ``index`` in zone ``zone``: ``data`` / ``labels`` are views of the whole zone (batch_size
    rows); the first ``size`` rows are valid (``size`` < batch_size only for the last batch)."""

    index: int
    zone: int
    size: int
    data: np.ndarray
    labels: np.ndarray

    @property
    def valid_data(self) -> np.ndarray:
        return self.data[: self.size]

    @property
    def valid_labels(self) -> np.ndarray:
        return self.labels[: self.size]

    def torch(self) -> tuple[Any, Any]:
        """(data, labels) of the valid rows as torch tensors sharing this batch's memory (DLPack, no copy; torch
        is not a dependency of tr-data; bfloat16 samples as torch.bfloat16). Valid until the batch is released:
        copy what must outlive it."""
        try:
            import torch
        except ImportError:
            raise ConfigError("Batch.torch() needs PyTorch: pip install torch") from None
        x = self.valid_data
        if x.dtype == np.uint16:  # bfloat16 bit patterns, the only samples stored as uint16; int16: DLPack-safe
            return torch.from_dlpack(x.view(np.int16)).view(torch.bfloat16), torch.from_dlpack(self.valid_labels)
        return torch.from_dlpack(x), torch.from_dlpack(self.valid_labels)


class TransferStation:
    """``TransferStation(batch_size, sample_shape, dtype, buffers=None)``.

    ``buffers``: None (numpy memory, 256-byte aligned), or two writable buffers of at least
    ``TransferStation.layout(...).zone_bytes`` bytes each, or two (labels, data) array pairs.
    """

    def __init__(
        self,
        batch_size: int,
        sample_shape: Sequence[int],
        dtype: Any = "float32",
        buffers: Sequence[Any] | None = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if batch_size > MAX_BATCH:
            raise ConfigError(f"batch_size must be <= {MAX_BATCH}, got {batch_size}")
        raw = tuple(sample_shape) if isinstance(sample_shape, (Sequence, np.ndarray)) else (sample_shape,)
        if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in raw):  # 2.7 is not 2
            raise ShapeError(f"sample_shape must be three integers (height, width, channels), got {raw}")
        shape = tuple(int(s) for s in raw)
        if len(shape) != 3 or min(shape) < 1:
            raise ShapeError(f"sample_shape must be a positive (height, width, channels), got {tuple(sample_shape)}")
        h, w, c = shape
        if h > MAX_SIDE or w > MAX_SIDE or c > 64 or h * w * c > MAX_IMAGE_BYTES:
            raise ShapeError(
                f"sample_shape {shape} is over the limit (sides <= {MAX_SIDE}, <= 64 channels, "
                f"at most {MAX_IMAGE_BYTES} elements)"
            )
        self.batch_size = batch_size
        self.sample_shape: tuple[int, int, int] = shape  # type: ignore[assignment]
        self.sample_dtype = _sample_dtype(dtype)  # what the samples are (the numpy dtype alone cannot say BF16)
        self.dtype = self.sample_dtype.np_dtype  # how they are stored
        self.sample_bytes = int(np.prod(shape)) * self.dtype.itemsize
        lay = self.layout(batch_size, shape, self.sample_dtype)
        self._raw: list[np.ndarray | None] = [None, None]
        zones: list[tuple[np.ndarray, np.ndarray]] = []
        if buffers is None:
            block = np.zeros(2 * lay.zone_bytes + 256, dtype=np.uint8)
            start = (-block.ctypes.data) % 256
            for z in range(2):
                raw = block[start + z * lay.zone_bytes : start + (z + 1) * lay.zone_bytes]
                self._raw[z] = raw
                zones.append(self._carve(raw, lay))
            self._owner: Any = block
        else:
            if len(buffers) != 2:
                raise ConfigError(f"buffers must hold two zones (A and B), got {len(buffers)}")
            for z, b in enumerate(buffers):
                if isinstance(b, tuple) and len(b) == 2:
                    zones.append(self._pair(z, b))
                else:
                    raw = self._as_bytes(z, b, lay.zone_bytes)
                    self._raw[z] = raw
                    zones.append(self._carve(raw, lay))
            self._owner = tuple(buffers)
        self._zones = zones
        self._native = _native.Station(
            batch_size,
            self.sample_bytes,
            zones[0][1].reshape(-1).view(np.uint8),
            zones[0][0],
            zones[1][1].reshape(-1).view(np.uint8),
            zones[1][0],
        )

    @property
    def dtype_name(self) -> str:
        """The samples' dtype as FusedNormalization and Compose name it: float32, float16 or bfloat16."""
        return out_dtype(self.sample_dtype)

    def _storage(self) -> str:
        return "uint16 (bfloat16 bit patterns)" if self.sample_dtype is DType.BF16 else self.dtype.name

    # ---- layout ---------------------------------------------------------------------------------
    @staticmethod
    def layout(batch_size: int, sample_shape: Sequence[int], dtype: Any = "float32") -> ZoneLayout:
        """Byte layout of one zone: what a backend allocates (pinned) to hand buffers in."""
        d = _np_dtype(dtype)
        lb = align_up_256(batch_size * 4)
        db = align_up_256(batch_size * int(np.prod(tuple(sample_shape))) * d.itemsize)
        return ZoneLayout(0, lb, lb, db, lb + db)

    def _carve(self, raw: np.ndarray, lay: ZoneLayout) -> tuple[np.ndarray, np.ndarray]:
        labels = raw[: self.batch_size * 4].view(np.int32)
        nd = self.batch_size * self.sample_bytes
        data = raw[lay.data_offset : lay.data_offset + nd].view(self.dtype).reshape(self.batch_size, *self.sample_shape)
        return labels, data

    @staticmethod
    def _as_bytes(z: int, b: Any, need: int) -> np.ndarray:
        try:
            mv = memoryview(b)
        except TypeError:
            raise ConfigError(f"buffer {'AB'[z]} does not support the buffer protocol: {type(b).__name__}") from None
        if mv.readonly:
            raise ConfigError(f"buffer {'AB'[z]} is read-only")
        if not mv.c_contiguous:
            raise ConfigError(f"buffer {'AB'[z]} must be C-contiguous")
        raw = np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, dtype=np.uint8)
        if raw.nbytes < need:
            raise ConfigError(f"buffer {'AB'[z]} holds {raw.nbytes} bytes; a zone needs {need}")
        return raw[:need]

    def _pair(self, z: int, pair: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray]:
        labels, data = (np.asarray(x) for x in pair)
        if labels.dtype != np.int32 or labels.shape != (self.batch_size,) or not labels.flags.c_contiguous:
            raise ConfigError(
                f"zone {'AB'[z]} labels must be C-contiguous int32 ({self.batch_size},), "
                f"got {labels.dtype} {labels.shape}"
            )
        want = (self.batch_size, *self.sample_shape)
        if data.dtype != self.dtype or data.shape != want or not data.flags.c_contiguous:
            raise ConfigError(
                f"zone {'AB'[z]} data must be C-contiguous {self._storage()} {want}, got {data.dtype} {data.shape}"
            )
        if not (labels.flags.writeable and data.flags.writeable):
            raise ConfigError(f"zone {'AB'[z]} arrays must be writable")
        return labels, data

    # ---- zones ----------------------------------------------------------------------------------
    def zone(self, z: int) -> tuple[np.ndarray, np.ndarray]:
        """(labels, data) arrays of zone z (0 = A, 1 = B)."""
        return self._zones[z]

    def raw_zone(self, z: int) -> np.ndarray | None:
        """The zone's bytes (labels, then data at data_offset) when it is one buffer, else None."""
        return self._raw[z]

    # ---- consumer ---------------------------------------------------------------------------------
    @property
    def num_batches(self) -> int:
        """Batches of the current epoch."""
        return self._native.num_batches

    def batch_size_of(self, k: int) -> int:
        return self._native.batch_size_of(k)

    def acquire(self, k: int, timeout: float | None = None) -> Batch:
        """Wait until batch k is complete and take it (DataError / ShapeError if a worker failed,
        TimeoutError after ``timeout`` seconds, EpochCancelled if the epoch was stopped)."""
        k = _batch_index(k)
        # the native core reads a negative timeout as "wait forever": -5 must not mean that
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not 0 <= timeout < math.inf):
            raise ConfigError(f"timeout must be None (wait) or a finite number of seconds >= 0, got {timeout!r}")
        n = self._native.acquire(k, timeout)
        if n < 0:
            raise TimeoutError(f"batch {k} was not ready within {timeout} s")
        labels, data = self._zones[k & 1]
        return Batch(int(k), int(k & 1), n, data, labels)

    def release(self, k: int) -> None:
        """Give batch k's zone back to the workers (it will hold batch k + 2)."""
        self._native.release(_batch_index(k))

    @contextmanager
    def batch(self, k: int, timeout: float | None = None) -> Iterator[Batch]:
        """``with station.batch(k) as b:`` acquire, then release on exit."""
        b = self.acquire(k, timeout)
        try:
            yield b
        finally:
            self.release(k)

    def abort(self) -> None:
        """Wake every waiter; pending and later acquires of this epoch raise EpochCancelled."""
        self._native.abort()

    def __repr__(self) -> str:
        return (f"TransferStation(batch_size={self.batch_size}, sample_shape={self.sample_shape}, "
                f"dtype={self.dtype_name})")
