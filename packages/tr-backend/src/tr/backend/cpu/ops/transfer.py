"""h2d_copy: copy the first N samples of host staging buffer A or B into the device input tensors.

N is the batch of the ``data`` DTensor (the last batch of an epoch is smaller); a ``packed`` copy (progressive
resizing's smaller sides) reads the buffer's first N x H x W x C elements as [N, H, W, C]. The host buffers are bound
with ``CpuBackend.bind_host_buffers`` before or after capture; binding precomputes the source slices, so a
launch is two copies. Host data of the device tensor's numpy type is copied; other host data is cast where numpy
casts it within its kind (float32 into FP16: round to nearest even). A BF16 tensor holds uint16 bit patterns, which
a numpy cast would fill with values: it takes float32 host data, rounded by tr.core.bf16, or those bit patterns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tr.backend.base import HostBuffer
from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.convert import Converter, converter
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import transfer as rules
from tr.core.dtype import DType
from tr.core.errors import BackendError, DTypeError, ShapeError


def _copy(src: np.ndarray, dst: np.ndarray) -> None:
    np.copyto(dst, src)


class _Site:
    """One h2d_copy call: its destination views and, once bound, its source slices and their cast."""

    def __init__(self, where: str, buffer: int, labels: np.ndarray, data: np.ndarray, dtype: DType,
                 packed: bool = False) -> None:
        self.where, self.buffer, self.labels, self.data, self.dtype = where, buffer, labels, data, dtype
        self.packed = packed
        self.src: tuple[np.ndarray, np.ndarray] | None = None
        self.cast: Converter = _copy

    def bind(self, buffers: Sequence[HostBuffer]) -> None:
        labels, data = buffers[self.buffer]
        n = self.data.shape[0]
        name = "AB"[self.buffer]
        problem = rules.host_data_problem(data.shape, self.data.shape, self.packed, data.flags.c_contiguous)
        if problem is not None:
            raise ShapeError(f"{self.where}: host buffer {name} data {data.shape} cannot supply "
                             f"{self.data.shape} ({problem})")
        if self.packed:  # (a view: the feeder rewrites the buffer each batch)
            data = data.reshape(-1)[:self.data.size].reshape(self.data.shape)
        if self.dtype is DType.BF16:  # float32 values, rounded, or the bit patterns themselves (uint16)
            ok = data.dtype in (np.float32, np.uint16)
            cast = converter(DType.FP32, DType.BF16) if data.dtype == np.float32 else _copy
        else:
            ok, cast = np.can_cast(data.dtype, self.data.dtype, "same_kind"), _copy
        if not ok:
            raise DTypeError(f"{self.where}: host buffer {name} data is {data.dtype}, the device tensor "
                             f"{self.dtype.name} ({self.data.dtype})")
        self.src, self.cast = (labels[:n], data[:n]), cast

    def __call__(self) -> None:
        src = self.src
        if src is None:
            raise BackendError(f"{self.where}: no host buffers are bound; call bind_host_buffers first")
        np.copyto(self.labels, src[0])
        self.cast(src[1], self.data)


@cpu_op("h2d_copy")
def h2d_copy(b: Binder) -> Step:
    buffer, n, packed = rules.h2d_copy(b)
    site = _Site(b.where, buffer, b.view("labels", (n,)), b.view("data"), b.dtype("data"), packed)
    b.backend.add_host_consumer(site)
    return site
