"""Batch feeders: what fills the two host staging buffers (A/B) that the transfer graphs copy from.

A feeder owns two host buffers (labels int32 [B], data [B, H, W, C] float32/float16) and yields, for each
batch k of an epoch, (k, buffer index, samples in the batch). The consumer copies the buffer to the
device (the TRANSFER graph) and then calls ``release(k)`` so the buffer can be refilled with batch k+2.

``ArrayFeeder`` serves an in-memory dataset already normalised (no augmentation), single-threaded: the
plain reader used by tests. ``PipelineFeeder`` (tr.task.pipeline) drives tr.data's native Preprocessor.

Data parallelism: a feeder that can serve one rank's share has ``shard(rank, world_size)``; the task calls
it before compiling (its ``batch`` then becomes the local batch, ``num_samples`` this rank's count). A feeder
without it must already deliver this rank's data with the local batch. Which samples a rank takes is
tr.data.sharding's rule (``shard_positions``, re-exported here), shared with the native pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from tr.core import philox
from tr.core.bf16 import MAX as BF16_MAX
from tr.core.bf16 import bf16_bits, round_bf16
from tr.core.dtype import DType
from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.core.settings import check_batch_split
from tr.data.fused import out_dtype
from tr.data.labels import check_labels
from tr.data.seeds import check_seed, data_seed
from tr.data.sharding import check_shard, shard_positions, shard_size

__all__ = ["ArrayFeeder", "DeviceSideFeeder", "Feeder", "FeederDefaults", "InMemoryFeeder", "check_labels",
           "complete_feeder", "shard_positions", "shard_size", "steps_for"]


class Feeder(Protocol):
    """What the task calls. A user's feeder needs the first group; ``complete_feeder`` gives it the rest."""

    batch: int
    sample_shape: tuple[int, int, int]

    def buffers(self) -> list[tuple[np.ndarray, np.ndarray]]: ...
    def num_samples(self, train: bool) -> int: ...
    def steps(self, train: bool) -> int: ...
    def last_batch(self, train: bool) -> int: ...
    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]: ...
    def release(self, k: int) -> None: ...
    def close(self) -> None: ...

    # --- with defaults (FeederDefaults) ----------------------------------------------------------------
    @property
    def staging_shape(self) -> tuple[int, ...]: ...  # one sample in the host buffers
    @property
    def adopts_buffers(self) -> bool: ...  # whether adopt_buffers takes the backend's pinned pairs
    def adopt_buffers(self, pairs: Any) -> None: ...
    def shard(self, rank: int, world_size: int) -> None: ...
    def check_labels(self, num_classes: int) -> None: ...
    def last_epoch_times(self) -> Any: ...  # tr.data.EpochTimes of the last pass, or None
    def input_plan(self) -> Any: ...  # the plan's input (tr.graph.input_plan: a ResidentInput, a JpegInput), or None
    def decoded_on_cpu(self) -> int | None: ...  # the last pass's images the device decoder refused, or None
    def upload(self, backend: Any, program: Any) -> None: ...  # once, after the arena is allocated
    def begin_epoch(self, backend: Any, program: Any, epoch: int) -> None: ...  # before each training pass
    def train_side(self, side: int) -> None: ...  # progressive resizing: the next training epochs' side


class FeederDefaults:
    """The optional part of the Feeder protocol: what a feeder that has nothing to say about it means."""

    sample_shape: tuple[int, int, int]

    @property
    def sample_dtype(self) -> DType:
        """The tr type of the staged samples (numpy has no bfloat16: a BF16 feeder stages its bits in uint16)."""
        dtype = np.dtype(getattr(self, "dtype", np.float32))
        if dtype == np.uint16:
            name = type(getattr(self, "wrapped", self)).__name__
            raise ConfigError(f"{name} stages uint16 samples: if they are bfloat16 bit patterns, give the feeder a "
                              f"sample_dtype property returning tr.core.dtype.DType.BF16")
        return DType.parse(dtype)

    @property
    def staging_shape(self) -> tuple[int, ...]:
        return tuple(self.sample_shape)

    def micro_batches(self, k: int) -> None:
        """Serve batches of global / k for task.accumulate(k)."""
        name = type(getattr(self, "wrapped", self)).__name__  # (a user's feeder: its own name)
        raise ConfigError(f"task.accumulate({k}): {name} cannot serve micro-batches (ArrayFeeder and the tr.data "
                          "pipeline can)")

    @property
    def adopts_buffers(self) -> bool:
        return False

    def adopt_buffers(self, pairs: Any) -> None:
        raise ConfigError(f"{type(self).__name__} fills its own staging buffers")

    def shard(self, rank: int, world_size: int) -> None:
        """Without it, a feeder already delivers this rank's data with the local batch."""

    def check_labels(self, num_classes: int) -> None:
        """Without it, labels past the logits are found in the step (the loss's label check)."""

    def last_epoch_times(self) -> Any:
        return None

    def input_plan(self) -> Any:
        """Without one the plan copies each staged batch from the host (tr.graph.input_plan.HostInput)."""
        return None

    def decoded_on_cpu(self) -> int | None:
        return None

    def upload(self, backend: Any, program: Any) -> None:
        """Without a resident input there is nothing of the feeder's to place in the arena."""

    def begin_epoch(self, backend: Any, program: Any, epoch: int) -> None:
        """Without a resident input the device needs nothing per epoch from the feeder."""

    def train_side(self, side: int) -> None:
        """Progressive resizing: serve the next training epochs at ``side`` x ``side``, packed at the start of the
        staging buffers. Without it a feeder serves one sample shape."""
        name = type(getattr(self, "wrapped", self)).__name__
        if side != self.sample_shape[0]:
            raise ConfigError(f"progressive resizing: {name} serves one sample shape {tuple(self.sample_shape)}; "
                              f"training at side {side} needs a feeder that resizes each epoch (tr.data's pipeline: "
                              f"PREPROCESSOR_SETTING with a RandomResizedCrop, or a feeder with train_side(side))")


class _Completed(FeederDefaults):
    """A user's feeder with the optional part filled in where it has none."""

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattribute__(self, name: str) -> Any:
        inner = object.__getattribute__(self, "_inner")
        if name in _OPTIONAL and not hasattr(inner, name if name != "adopts_buffers" else "adopt_buffers"):
            return object.__getattribute__(self, name)
        if name == "adopts_buffers":
            return True
        if name == "wrapped":
            return inner
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_inner"), name, value)


_OPTIONAL = frozenset({"sample_dtype", "micro_batches", "staging_shape", "adopts_buffers", "adopt_buffers", "shard",
                       "check_labels", "last_epoch_times", "input_plan", "decoded_on_cpu", "upload",
                       "begin_epoch", "train_side"})


def complete_feeder(feeder: Any) -> Feeder:
    """``feeder`` with the whole protocol: ours have it; a user's gets FeederDefaults where it lacks a part
    (its ``wrapped`` attribute is the user's object)."""
    return feeder if isinstance(feeder, FeederDefaults) else _Completed(feeder)  # type: ignore[return-value]


def check_batch(owner: str, batch: Any) -> int:
    """A batch size is an integer >= 1 (2.5 is not truncated to 2)."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ConfigError(f"{owner} batch must be an integer >= 1, got {batch!r}")
    return int(batch)


def _flag(owner: str, name: str, v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):  # shuffle="no" would be taken for True
        raise ConfigError(f"{owner} {name} must be True or False, got {v!r}")
    return bool(v)


def steps_for(samples: int, batch: int, drop_last: bool, window: int = 1) -> tuple[int, int]:
    """(steps per epoch, size of the last batch); with drop_last only whole windows of ``window`` batches."""
    if samples <= 0:
        raise ConfigError(f"the dataset has {samples} samples")
    if drop_last:
        steps = samples // (batch * window) * window
        if steps == 0:
            raise ConfigError(f"drop_last with batch {batch}{f' x {window} micro-batches' if window > 1 else ''} "
                              f"leaves no batch from {samples} samples")
        return steps, batch
    steps = -(-samples // batch)
    return steps, samples - (steps - 1) * batch


class InMemoryFeeder(FeederDefaults):
    """What the single-threaded feeders of in-memory data share: two (labels, data) staging pairs, filled by
    the caller's thread, and the epoch's counts of a rank's share. A subclass sets ``batch``, ``rank``,
    ``world_size``, ``drop_last`` and ``_bufs`` and says how many samples a split has (``_split_size``)."""

    batch: int
    global_batch: int
    rank: int
    world_size: int
    drop_last: bool
    _bufs: list[tuple[np.ndarray, np.ndarray]]
    window: int = 1  # micro-batches an optimizer step consumes (micro_batches)

    def _split_size(self, train: bool) -> int | None:  # None: no such split
        raise NotImplementedError

    def buffers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._bufs

    @property
    def adopts_buffers(self) -> bool:
        return True

    def adopt_buffers(self, pairs) -> None:
        """Fill these (labels, data) pairs instead (e.g. pinned memory from the backend)."""
        pairs = [(np.asarray(lab), np.asarray(dat)) for lab, dat in pairs]
        for (lab, dat), (mine_l, mine_d) in zip(pairs, self._bufs):
            if lab.shape != mine_l.shape or dat.shape != mine_d.shape or dat.dtype != mine_d.dtype:
                raise ConfigError(f"adopted buffers {lab.shape}/{dat.shape} {dat.dtype} do not match "
                                  f"{mine_l.shape}/{mine_d.shape} {mine_d.dtype}")
        self._bufs = pairs

    def shard(self, rank: int, world_size: int) -> None:
        """Serve ``rank``'s share of ``world_size`` ranks: the batch given at construction is the global one,
        each rank's is global / world size (tr.data.sharding: training padded, validation not)."""
        rank, world_size = check_shard(rank, world_size)
        check_batch_split(self.global_batch, world_size, f"the world size {world_size}")
        self.rank, self.world_size, self.batch = rank, world_size, self.global_batch // world_size
        self._alloc()

    def micro_batches(self, k: int) -> None:
        """Serve training batches of global / k (task.accumulate(k)), before ``shard``: k of them make one
        optimizer step's batch (consecutive slices of the epoch's order, so a window holds that batch's samples).
        With drop_last an epoch keeps whole windows only. Validation batches shrink alike (the arithmetic per
        sample is the same)."""
        full = self.__dict__.setdefault("_full_batch", self.global_batch)  # as given: a compile may be retried
        check_batch_split(full, k, f"task.accumulate({k})")
        self.window, self.global_batch = k, full // k
        self.batch = self.global_batch // self.world_size
        self._alloc()

    def _alloc(self) -> None:
        raise NotImplementedError

    def num_samples(self, train: bool) -> int:
        n = self._split_size(train)
        return 0 if n is None else shard_size(n, self.rank, self.world_size, pad=train)

    def steps(self, train: bool) -> int:
        return self._steps_for(train)[0]

    def last_batch(self, train: bool) -> int:
        return self._steps_for(train)[1]

    def _steps_for(self, train: bool) -> tuple[int, int]:
        return steps_for(self.num_samples(train), self.batch, self.drop_last and train, self.window if train else 1)

    def release(self, k: int) -> None:  # single-threaded: nothing to signal
        pass

    def close(self) -> None:
        pass


class DeviceSideFeeder(InMemoryFeeder):
    """What the feeders whose batches are made on the device share: the labels of both splits held here
    (``_labels[train]``, None: no such split), their checks and counts, and a validation set every rank has a
    sample of (``setting`` names the PreprocessorSettings switch in messages)."""

    _labels: dict[bool, np.ndarray | None]
    setting: str = "device"

    def micro_batches(self, k: int) -> None:
        raise ConfigError(f"task.accumulate({k}) with {self.setting}(True) is not supported: its batches are chosen on "
                          f"the device; accumulate from the CPU pipeline or an ArrayFeeder")

    def _keep(self, s: Any, ds: Any, train: Any, val: Any, batch: int, seed: int | None) -> None:
        """What every device-side feeder keeps of committed PreprocessorSettings ``s`` and the data set's splits:
        the labels, the class count, shuffling, the seed (the Preprocessor's rule) and the batch (the global one
        until ``shard``)."""
        self._labels = {True: train.labels, False: None if val is None else val.labels}
        self.num_classes = getattr(ds, "num_classes", None)
        self.shuffle_train, self.drop_last = s.shuffle_train, s.drop_last_enabled
        self.seed = data_seed(seed, s.seed_value)
        self.batch = self.global_batch = check_batch(type(self).__name__, batch)
        self.rank, self.world_size = 0, 1

    def shard(self, rank: int, world_size: int) -> None:
        """Serve ``rank``'s share (InMemoryFeeder.shard): every rank needs a validation sample, or the ranks
        would compile different plans."""
        val = self._labels[False]
        if val is not None and len(val) < world_size:
            raise ConfigError(f"{self.setting}: the validation set has {len(val)} samples, fewer than the "
                              f"{world_size} ranks")
        super().shard(rank, world_size)

    def check_labels(self, num_classes: int) -> None:
        for name, train in (("train", True), ("val", False)):
            if self._labels[train] is not None:
                check_labels(self._labels[train], name, num_classes)

    def _split_size(self, train: bool) -> int | None:
        labels = self._labels[train]
        return None if labels is None else len(labels)


_FEED_DTYPES = {"float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16}  # name -> what is staged
_CHECK_ROWS = 1 << 14  # images checked at a time: the range check's temporaries stay small


class ArrayFeeder(InMemoryFeeder):
    """Feeds normalised in-memory arrays: x [N, H, W, C] floats, y [N] int labels, to the model as they are.

    The images are what the model sees, so they must already be normalised floats: integer images (raw uint8
    pixels 0..255) are refused, not cast (tr.data's pipeline takes those, with its normalization setting), and
    so is a finite value that the staging ``dtype`` (float32, float16 or bfloat16) cannot hold (a float32 70000
    would become inf in float16), naming the image and the value. bfloat16 (BF16 AMP) is staged as its bits in
    uint16, rounded once by tr.core.bf16 when the feeder is made. NaN and inf given as such reach the model as they
    are (the task skips a non-finite step and reports it)."""

    def __init__(self, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray] | None,
                 batch: int, seed: int = 0, shuffle: bool = True, drop_last: bool = False,
                 dtype: Any = np.float32, num_classes: int | None = None) -> None:
        self.batch = self.global_batch = check_batch("ArrayFeeder", batch)
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 2):
            raise ConfigError(f"ArrayFeeder num_classes must be an integer >= 2, got {num_classes!r}")
        self._staged = _feed_dtype(dtype)
        self._dtype = self._staged.np_dtype
        self.rank, self.world_size = 0, 1
        self.seed = check_seed(seed, "ArrayFeeder seed")
        self.shuffle = _flag("ArrayFeeder", "shuffle", shuffle)
        self.drop_last = _flag("ArrayFeeder", "drop_last", drop_last)
        self.num_classes = num_classes
        self._sets = {True: self._check(train, "train", num_classes, self._staged),
                      False: self._check(val, "val", num_classes, self._staged) if val is not None else None}
        self.sample_shape = tuple(self._sets[True][0].shape[1:])
        if self._sets[False] is not None and tuple(self._sets[False][0].shape[1:]) != self.sample_shape:
            raise DataError(f"val images are {tuple(self._sets[False][0].shape[1:])} (H, W, C) but train images "
                            f"are {self.sample_shape}: one compiled plan takes one sample shape")
        self._alloc()

    def check_labels(self, num_classes: int) -> None:
        """DataError when a label is outside the ``num_classes`` the model was compiled for."""
        for name, s in (("train", self._sets[True]), ("val", self._sets[False])):
            if s is not None:
                check_labels(s[1], name, num_classes)

    def _alloc(self) -> None:
        self._bufs = [(np.zeros(self.batch, np.int32), np.zeros((self.batch, *self.sample_shape), self._dtype))
                      for _ in range(2)]

    def shard(self, rank: int, world_size: int) -> None:
        """Serve ``rank``'s share of ``world_size`` ranks: the batch given at construction is the global one,
        each rank's is global / world size. Training epochs are padded (every rank runs the same steps, see
        :func:`shard_positions`); validation is not (the task sums it exactly over the ranks)."""
        val = self._sets[False]
        if val is not None and len(val[1]) < world_size:
            raise ConfigError(f"the validation set has {len(val[1])} samples, fewer than the {world_size} ranks")
        super().shard(rank, world_size)

    @staticmethod
    def _check(split: Any, name: str, num_classes: int | None, dtype: DType) -> tuple[np.ndarray, np.ndarray]:
        if not (isinstance(split, (tuple, list)) and len(split) == 2):
            raise ConfigError(f"ArrayFeeder {name} must be an (images, labels) pair, got {type(split).__name__}")
        x, y = np.asarray(split[0]), np.asarray(split[1])
        if x.ndim != 4:
            raise ShapeError(f"{name} images must be [N, H, W, C], got shape {x.shape}")
        if len(x) == 0 or min(x.shape[1:]) < 1:
            raise ShapeError(f"{name} has no images (shape {x.shape})")
        if x.dtype.kind != "f":
            raise DTypeError(f"{name} images are {x.dtype}, but ArrayFeeder gives the model its images as they are: "
                             f"normalise them to floats first ((x / 255 - mean) / std), or let tr.data's pipeline "
                             f"do it (PREPROCESSOR_SETTING.dataset(ArrayDataset(...)).normalization(...))")
        if y.ndim == 1 and len(x) != len(y):
            raise DataError(f"{name} has {len(x)} images but {len(y)} labels")
        _check_fits(x, name, dtype)
        if dtype is DType.BF16:  # rounded once, here: every epoch stages the same bits
            x = bf16_bits(x)
        return x, check_labels(y, name, num_classes)

    @property
    def dtype(self) -> np.dtype:
        return self._bufs[0][1].dtype

    @property
    def sample_dtype(self) -> DType:
        return self._staged

    def _split_size(self, train: bool) -> int | None:
        s = self._sets[train]
        return None if s is None else len(s[1])

    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        x, y = self._sets[train]
        n = len(y)
        order = (philox.shuffle_indices(n, philox.derive_seed(self.seed, epoch, 0x5EED))
                 if train and self.shuffle else np.arange(n))
        if self.world_size > 1:
            order = order[shard_positions(n, self.rank, self.world_size, pad=train)]
        steps = self.steps(train)
        for k in range(steps):
            idx = order[k * self.batch:(k + 1) * self.batch]
            labels, data = self._bufs[k % 2]
            m = len(idx)
            labels[:m] = y[idx]
            np.copyto(data[:m], x[idx], casting="same_kind")
            yield k, k % 2, m


def _feed_dtype(dtype: Any) -> DType:
    """ArrayFeeder's ``dtype`` argument (a name, a numpy dtype or a tr DType) -> the staged DType."""
    if isinstance(dtype, DType):
        d = dtype
    else:
        try:
            name = "bfloat16" if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16") else \
                np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
        d = _FEED_DTYPES.get(name)
    if d not in _FEED_DTYPES.values():
        raise ConfigError(f"ArrayFeeder dtype must be float32, float16 or bfloat16 (the staging buffers the model "
                          f"reads), got {name if not isinstance(dtype, DType) else dtype.name}")
    return d


def _check_fits(x: np.ndarray, name: str, dtype: DType) -> None:
    """DataError naming the first image and value that is finite but not once cast to the staging ``dtype``
    (a float64 or float32 beyond float16's range would silently become inf); nothing to check without a
    narrowing cast."""
    top = BF16_MAX if dtype is DType.BF16 else float(np.finfo(dtype.np_dtype).max)
    if np.finfo(x.dtype).max <= top:
        return
    cast = round_bf16 if dtype is DType.BF16 else (lambda b: b.astype(dtype.np_dtype))
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, len(x), _CHECK_ROWS):
            block = x[start:start + _CHECK_ROWS]
            bad = np.isfinite(block) & ~np.isfinite(cast(block))
            if bad.any():
                at = np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)
                raise DataError(f"{name} image {start + int(at[0])} has value {block[at].item()!r} at (h, w, c) "
                                f"{tuple(int(i) for i in at[1:])}, which overflows the {out_dtype(dtype)} staging "
                                "buffers")
