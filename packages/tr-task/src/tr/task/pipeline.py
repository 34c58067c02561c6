"""PipelineFeeder: tr.data's native Preprocessor and TransferStation behind the Feeder interface.

The workers write each batch straight into one of the station's two zones (A/B); the trainer copies the
zone to the device (the TRANSFER graph) and releases it, so batch k+2 can be written while batch k+1
computes. With a backend that provides pinned host memory, the zones live in it (``zones=``).

Data parallelism: the feeder is built with the GLOBAL batch; ``shard(rank, world_size)`` (the task calls it
before compiling) makes the Preprocessor deliver rank r's share (``Preprocessor.shard``: training padded so
every rank runs the same steps, validation not) into a new station of the local batch global / W. Zones
handed in at construction are dropped then (they hold the global batch); ``adopt_buffers`` takes the
backend's buffers of the local batch afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.settings import Settings, check_batch_split
from tr.data import PREPROCESSOR_SETTING, Preprocessor, PreprocessorSettings, TransferStation
from tr.data.fused import out_dtype
from tr.data.sharding import check_shard
from tr.task.feeder import FeederDefaults


def staging_dtype(settings: Settings) -> str:
    """The type the host stages batches in: the plan's input type (AMP's 16-bit type, else float32)."""
    return out_dtype(settings.low_dtype or DType.FP32)


class PipelineFeeder(FeederDefaults):
    window = 1  # micro-batches an optimizer step consumes (micro_batches)

    def __init__(self, pre_settings: PreprocessorSettings, batch: int, seed: int, fp16: bool = False,
                 zones: Sequence[Any] | None = None, dtype: str | None = None) -> None:
        """``dtype``: "float32", "float16" or "bfloat16" (default: "float16" when ``fp16``, else "float32")."""
        s = pre_settings if pre_settings.frozen else pre_settings.commit()
        dtype = dtype or ("float16" if fp16 else "float32")
        ds = s.open_dataset()
        shape = s.sample_shape(True, getattr(ds, "image_shape", None))
        self.station = TransferStation(batch, shape, dtype, buffers=zones)
        self.pre = Preprocessor(s, self.station, seed=seed)
        self.batch = self.global_batch = batch
        self.rank, self.world_size = 0, 1
        self.sample_shape = tuple(self.station.sample_shape)
        self.num_classes = getattr(self.pre.dataset, "num_classes", None)
        self._run = None
        self._epoch_station = self.station  # the running epoch's station (release)
        self._held: set[int] = set()  # batches acquired and not yet released

    @property
    def dtype(self) -> np.dtype:
        return self.station.dtype

    @property
    def sample_dtype(self) -> DType:
        return self.station.sample_dtype

    @property
    def seed(self) -> int:
        """The shuffle and augmentation seed (every rank must use the same)."""
        return self.pre.seed

    def shard(self, rank: int, world_size: int) -> None:
        """Serve ``rank``'s share of ``world_size`` ranks: the batch given at construction is the global one,
        each rank's is global / world size (see the module docstring)."""
        rank, world_size = check_shard(rank, world_size)
        check_batch_split(self.global_batch, world_size, f"the world size {world_size}")
        self.pre.shard(rank, world_size)  # checks the phase and the validation split first
        local = self.global_batch // world_size
        if local != self.station.batch_size:
            st = TransferStation(local, self.sample_shape, self.station.sample_dtype)
            self.pre.replace_stations(st)
            self.station = st
        self.rank, self.world_size, self.batch = rank, world_size, local

    def micro_batches(self, k: int) -> None:
        """Serve batches of global / k (task.accumulate(k)), before ``shard``. With drop_last the pipeline drops the
        partial micro-batch and the epoch then keeps only whole windows (as ArrayFeeder)."""
        full = self.__dict__.setdefault("_full_batch", self.global_batch)  # as given: a compile may be retried
        check_batch_split(full, k, f"task.accumulate({k})")
        self.window, self.global_batch = k, full // k
        st = TransferStation(self.global_batch, self.sample_shape, self.station.sample_dtype)
        self.pre.replace_stations(st)
        self.station, self.batch = st, self.global_batch

    def buffers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self.station.zone(0), self.station.zone(1)]

    @property
    def adopts_buffers(self) -> bool:
        return True

    def adopt_buffers(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Let the workers write into these (labels, data) pairs, e.g. pinned memory from the backend."""
        st = TransferStation(self.batch, self.sample_shape, self.station.sample_dtype, buffers=list(pairs))
        self.pre.replace_stations(st)
        self.station = st

    def num_samples(self, train: bool) -> int:
        """This rank's samples per epoch (before drop_last)."""
        try:
            return self.pre.plan(train).num_samples
        except Exception:  # a dataset without a validation split
            if train:
                raise
            return 0

    def steps(self, train: bool) -> int:
        n = self.pre.plan(train).num_batches
        if train and self.window > 1 and self.pre.settings.drop_last_enabled:  # whole accumulation windows only
            n = n // self.window * self.window
            if n == 0:
                raise ConfigError(f"drop_last with batch {self.batch} x task.accumulate({self.window}) leaves no "
                                  f"whole window of the epoch's {self.pre.plan(train).num_batches} micro-batches")
        return n

    def last_batch(self, train: bool) -> int:
        return self.pre.plan(train).last_batch_size

    def train_side(self, side: int) -> None:
        """Progressive resizing: the next training epochs' samples at ``side`` x ``side``, packed at the start of the
        buffers (tr.data's Preprocessor.train_side; the sample shape and buffers stay the largest side's)."""
        self.pre.train_side(side)

    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        run = self._run = self.pre.epoch(epoch, train)
        station = self._epoch_station = run.stations[0]  # (a progressive side's: the zones' memory, packed)
        try:
            for k in range(self.steps(train)):  # (drop_last under accumulation: the workers' last batches unread)
                b = station.acquire(k)
                self._held.add(k)
                yield k, b.zone, b.size
        finally:  # also when the consumer stops early (an exception in a step): stop the workers, free the zones
            run.close()
            for k in sorted(self._held):
                station.release(k)
            self._held.clear()

    def release(self, k: int) -> None:
        self._epoch_station.release(k)
        self._held.discard(k)

    def last_epoch_times(self):
        """Where the last finished pass's time went (tr.data.EpochTimes): the workers' busy and blocked
        seconds, and how long the trainer waited for batches; None before the first pass."""
        return None if self._run is None else self._run.times()

    def close(self) -> None:
        self.pre.close()


def feeder_from_preprocessor(settings: Settings, zones: Sequence[Any] | None = None,
                             pre: PreprocessorSettings | None = None) -> Any:
    """The feeder the seed's examples get: PREPROCESSOR_SETTING, the task's batch, seed and precision. The batch
    is the global one: with several ranks the task's ``shard`` call makes it this rank's share. With
    ``device_augment(True)``, a ResidentFeeder (tr.task.resident): the chain runs on the training device; with
    ``device_decode(True)``, a DeviceJpegFeeder (tr.task.jpeg_feeder): JPEGs decoded and augmented there.
    ``pre``: other preprocessor settings than PREPROCESSOR_SETTING."""
    pre = PREPROCESSOR_SETTING if pre is None else pre
    if pre.device_dec:
        from tr.task.jpeg_feeder import DeviceJpegFeeder

        return DeviceJpegFeeder(pre, settings.batch_size, settings.seed, dtype=staging_dtype(settings),
                                backend=pre.device_dec_backend, cpu_share=pre.device_dec_cpu_share,
                                cpu_threads=pre.device_dec_cpu_threads,
                                interpolate_chroma=pre.device_dec_interpolate_chroma,
                                refused=pre.device_dec_refused)
    if pre.device_aug:
        from tr.task.resident import ResidentFeeder

        return ResidentFeeder(pre, settings.batch_size, settings.seed)
    return PipelineFeeder(pre, settings.batch_size, settings.seed, zones=zones, dtype=staging_dtype(settings))
