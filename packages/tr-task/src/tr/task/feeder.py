"""Batch feeders: what fills the two host staging buffers (A/B) that the transfer graphs copy from.

A feeder owns two host buffers (labels int32 [B], data [B, H, W, C] float32/float16) and yields, for each
batch k of an epoch, (k, buffer index, samples in the batch). The consumer copies the buffer to the
device (the TRANSFER graph) and then calls ``release(k)`` so the buffer can be refilled with batch k+2.

``ArrayFeeder`` serves an in-memory dataset already normalised (no augmentation), single-threaded: the
plain reader used by tests. ``PipelineFeeder`` (tr.task.pipeline) drives tr.data's native Preprocessor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from tr.core import philox
from tr.core.errors import ConfigError, DataError


class Feeder(Protocol):
    batch: int
    sample_shape: tuple[int, int, int]

    def buffers(self) -> list[tuple[np.ndarray, np.ndarray]]: ...
    def num_samples(self, train: bool) -> int: ...
    def steps(self, train: bool) -> int: ...
    def last_batch(self, train: bool) -> int: ...
    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]: ...
    def release(self, k: int) -> None: ...
    def close(self) -> None: ...


def steps_for(samples: int, batch: int, drop_last: bool) -> tuple[int, int]:
    """(steps per epoch, size of the last batch)."""
    if samples <= 0:
        raise ConfigError(f"the dataset has {samples} samples")
    if drop_last:
        steps = samples // batch
        if steps == 0:
            raise ConfigError(f"drop_last with batch {batch} leaves no batch from {samples} samples")
        return steps, batch
    steps = -(-samples // batch)
    return steps, samples - (steps - 1) * batch


class ArrayFeeder:
    """Feeds normalised in-memory arrays: x [N, H, W, C] float32, y [N] int labels."""

    def __init__(self, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray] | None,
                 batch: int, seed: int = 0, shuffle: bool = True, drop_last: bool = False,
                 dtype: np.dtype = np.float32, num_classes: int | None = None) -> None:
        self.batch = int(batch)
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.num_classes = num_classes
        self._sets = {True: self._check(*train, "train"), False: self._check(*val, "val") if val else None}
        x0 = self._sets[True][0]
        self.sample_shape = tuple(x0.shape[1:])
        if num_classes is not None:
            for name, s in (("train", self._sets[True]), ("val", self._sets[False])):
                if s is not None and (s[1].min() < 0 or s[1].max() >= num_classes):
                    bad = s[1][(s[1] < 0) | (s[1] >= num_classes)][0]
                    raise DataError(f"{name} label {int(bad)} is outside [0, {num_classes})")
        self._bufs = [(np.zeros(self.batch, np.int32), np.zeros((self.batch, *self.sample_shape), dtype))
                      for _ in range(2)]

    @staticmethod
    def _check(x: np.ndarray, y: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        if x.ndim != 4:
            raise DataError(f"{name} images must be [N, H, W, C], got shape {x.shape}")
        if len(x) != len(y):
            raise DataError(f"{name} has {len(x)} images but {len(y)} labels")
        return x, np.asarray(y, dtype=np.int32)

    def buffers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._bufs

    def num_samples(self, train: bool) -> int:
        s = self._sets[train]
        return 0 if s is None else len(s[1])

    def steps(self, train: bool) -> int:
        return steps_for(self.num_samples(train), self.batch, self.drop_last and train)[0]

    def last_batch(self, train: bool) -> int:
        return steps_for(self.num_samples(train), self.batch, self.drop_last and train)[1]

    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        x, y = self._sets[train]
        n = len(y)
        order = (philox.shuffle_indices(n, philox.derive_seed(self.seed, epoch, 0x5EED))
                 if train and self.shuffle else np.arange(n))
        steps = self.steps(train)
        for k in range(steps):
            idx = order[k * self.batch:(k + 1) * self.batch]
            labels, data = self._bufs[k % 2]
            m = len(idx)
            labels[:m] = y[idx]
            np.copyto(data[:m], x[idx], casting="same_kind")
            yield k, k % 2, m

    def release(self, k: int) -> None:  # single-threaded: nothing to signal
        pass

    def close(self) -> None:
        pass
