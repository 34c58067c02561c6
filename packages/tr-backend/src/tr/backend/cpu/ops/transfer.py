"""h2d_copy: copy the first N samples of host staging buffer A or B into the device input tensors.

N is the batch of the ``data`` DTensor (the last batch of an epoch is smaller). The host buffers are bound
with ``CpuBackend.bind_host_buffers`` before or after capture; binding precomputes the source slices, so a
launch is two ``np.copyto`` calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tr.backend.base import HostBuffer
from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import transfer as rules
from tr.core.errors import BackendError, DTypeError, ShapeError


class _Site:
    """One h2d_copy call: its destination views and, once bound, its source slices."""

    def __init__(self, where: str, buffer: int, labels: np.ndarray, data: np.ndarray) -> None:
        self.where, self.buffer, self.labels, self.data = where, buffer, labels, data
        self.src: tuple[np.ndarray, np.ndarray] | None = None

    def bind(self, buffers: Sequence[HostBuffer]) -> None:
        labels, data = buffers[self.buffer]
        n = self.data.shape[0]
        name = "AB"[self.buffer]
        if data.shape[0] < n or data.shape[1:] != self.data.shape[1:]:
            raise ShapeError(f"{self.where}: host buffer {name} data {data.shape} cannot supply "
                             f"{self.data.shape} (first {n} samples of [B, H, W, C])")
        if not np.can_cast(data.dtype, self.data.dtype, "same_kind"):
            raise DTypeError(f"{self.where}: host buffer {name} data is {data.dtype}, the device tensor "
                             f"{self.data.dtype}")
        self.src = (labels[:n], data[:n])

    def __call__(self) -> None:
        src = self.src
        if src is None:
            raise BackendError(f"{self.where}: no host buffers are bound; call bind_host_buffers first")
        np.copyto(self.labels, src[0])
        np.copyto(self.data, src[1])


@cpu_op("h2d_copy")
def h2d_copy(b: Binder) -> Step:
    buffer, n = rules.h2d_copy(b)
    site = _Site(b.where, buffer, b.view("labels", (n,)), b.view("data"))
    b.backend.add_host_consumer(site)
    return site
