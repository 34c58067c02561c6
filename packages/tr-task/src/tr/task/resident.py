"""ResidentFeeder: the data set in the device's arena, each batch augmented inside the captured step.

PREPROCESSOR_SETTING.device_augment(True) makes the task use this feeder instead of tr.data's worker pipeline
(tr.task.pipeline). At compile time it turns the training chain into augment_affine's attributes (or refuses
it, naming the transform), the plan declares the raw train and val sets and their labels in role
RESIDENT (tr.graph.resident) and ``upload`` copies them there once. Per epoch the host writes two seeds:
the shuffle's (tr.data.seeds' TAG_SHUFFLE seed of the epoch) and the augmentation's prefix; the device then
computes the epoch's order, the Fisher-Yates permutation tr.data's Preprocessor uses, and each step's
transfer graph picks the next batch's indices and labels from it on the device (batch_select): nothing
crosses PCIe per step, and the step's first op gathers and augments the batch.

Relation to the CPU worker pipeline: the same samples in the same order with the same labels, and every random
parameter (crop shift, angle, scale, erase rectangle, flip) is the workers' for the same seed, epoch and index.
The pixels differ by the interpolation only: the workers resample after each geometric step and round to uint8
in between, the device op samples the source once, bilinearly, in float (mean |difference| about 1 % of the
normalised range on MNIST; tests-integration/test_device_augment.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tr.backend.rules.augment import MAX_CHANNELS
from tr.core.errors import ConfigError, DataError
from tr.core.philox import derive_seed
from tr.data import transforms as T
from tr.data.fused import norm_constants
from tr.data.seeds import TAG_SHUFFLE, epoch_order, seed_prefix
from tr.data.settings import PreprocessorSettings
from tr.graph.resident import (
    DATA_RANK,
    KEY,
    ORDER_KEY,
    TRAIN_LABELS,
    TRAIN_SET,
    VAL_LABELS,
    VAL_SET,
    ResidentInput,
)
from tr.task.feeder import DeviceSideFeeder

DEVICE_CHAIN = ("Pad + RandomCrop (the image's size, constant fill 0), RandomRotation (-d, d) and RandomScale "
                "(fill 0), in that order, then RandomErasing and RandomHorizontalFlip")


def _refuse(t: Any, why: str) -> ConfigError:
    return ConfigError(f"device_augment: {t!r} {why}; the device chain is {DEVICE_CHAIN}. Turn device_augment "
                       "off to run this chain on tr.data's CPU workers")


def device_attrs(transforms: tuple, normalization: Any, image: tuple[int, int, int],
                 pad_channels: int | None) -> dict[str, Any]:
    """augment_affine's attributes for a training chain of tr.data transforms, with each transform's chain
    slot (its 1-based position: the Philox stream tr.data's workers draw it from). ConfigError for a transform
    or an order the op does not implement."""
    h, w, c = image
    attrs: dict[str, Any] = {}
    stage = 0  # geometric steps seen: 1 crop, 2 rotation, 3 scale (the op composes them in this order)
    pending_pad = None
    for j, t in enumerate(transforms):
        slot = j + 1

        def geometric(order: int, name: str, t: Any = t) -> None:
            nonlocal stage
            if stage >= order:
                raise _refuse(t, f"comes after a later geometric step, or {name} is given twice")
            stage = order

        if isinstance(t, T.Pad):
            if pending_pad is not None or stage:
                raise _refuse(t, "is not the chain's first geometric step")
            if len(set(t.padding)) != 1 or t.padding_mode != "constant" or any(f != 0 for f in t.fill):
                raise _refuse(t, "is not an equal constant padding with fill 0")
            pending_pad = t
        elif isinstance(t, T.RandomCrop):
            geometric(1, "RandomCrop")
            pad = pending_pad.padding if pending_pad is not None else (t.padding or (0, 0, 0, 0))
            if pending_pad is not None and t.padding is not None:
                raise _refuse(t, "pads again after a Pad")
            if (tuple(t.size) != (h, w) or t.pad_if_needed or len(set(pad)) != 1 or t.padding_mode != "constant"
                    or any(f != 0 for f in t.fill)):
                raise _refuse(t, f"is not a {h}x{w} crop of an equally, constantly (fill 0) padded image")
            attrs.update(pad=int(pad[0]), crop_slot=slot)
            pending_pad = None
        elif isinstance(t, T.RandomRotation):
            geometric(2, "RandomRotation")
            lo, hi = t.degrees
            if lo != -hi or any(f != 0 for f in t.fill):
                raise _refuse(t, "is not a symmetric range (-d, d) with fill 0")
            attrs.update(degrees=float(hi), rotation_slot=slot)
        elif isinstance(t, T.RandomScale):
            geometric(3, "RandomScale")
            if any(f != 0 for f in t.fill):
                raise _refuse(t, "has a fill other than 0")
            attrs.update(scale=tuple(float(v) for v in t.scale), scale_slot=slot)
        elif isinstance(t, T.RandomErasing):
            if len(set(t.value)) != 1:
                raise _refuse(t, "erases with a value per channel")
            attrs.update(erase_p=float(t.p), erase_scale=tuple(t.scale), erase_ratio=tuple(t.ratio),
                         erase_value=float(t.value[0]))
        elif isinstance(t, T.RandomHorizontalFlip):
            attrs.update(flip_p=float(t.p))
        else:
            raise _refuse(t, "has no device kernel")
        if pending_pad is not None and not isinstance(t, T.Pad):
            raise _refuse(pending_pad, "is not followed by a RandomCrop of the image's size")
    if pending_pad is not None:
        raise _refuse(pending_pad, "is not followed by a RandomCrop of the image's size")
    attrs.update(_norm_attrs(normalization, c, pad_channels))
    return attrs


def _norm_attrs(normalization: Any, c: int, pad_channels: int | None) -> dict[str, Any]:
    mean, std = norm_constants(normalization)
    if len(mean) not in (1, c):
        raise ConfigError(f"device_augment: the normalisation has {len(mean)} channels, the images {c}")
    if c > MAX_CHANNELS or (pad_channels or c) > MAX_CHANNELS:
        raise ConfigError(f"device_augment: the device op takes up to {MAX_CHANNELS} channels, the samples have "
                          f"{max(c, pad_channels or 0)}")
    return {"mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std)}


class ResidentFeeder(DeviceSideFeeder):
    """Feeds a plan with a resident input (tr.graph.resident): labels and dataset indices per batch."""

    setting = "device_augment"

    def __init__(self, pre_settings: PreprocessorSettings, batch: int, seed: int | None = None) -> None:
        s = pre_settings if pre_settings.frozen else pre_settings.commit()
        if s.val:
            raise ConfigError(f"device_augment: val transforms {list(s.val)} have no device kernel; validation "
                              "on the device normalises the raw images only (leave val_transforms empty)")
        self.pre_settings = s  # (a checkpoint records its chains)
        ds = s.open_dataset()
        train = ds.load("train")
        if train.ragged or train.encoded:
            raise ConfigError(f"device_augment needs a data set of equal-size uint8 images held in memory; "
                              f"{getattr(ds, 'name', type(ds).__name__)!r} has "
                              f"{'encoded (JPEG)' if train.encoded else 'ragged'} samples")
        has_val = getattr(ds, "has_split", lambda split: True)("val")
        val = ds.load("val") if has_val else None
        if val is not None and (val.ragged or val.encoded or val.image_shape != train.image_shape):
            raise ConfigError(f"device_augment: the val images {val.image_shape} must be held like the train "
                              f"images {train.image_shape}")
        self.image = train.image_shape
        self.attrs = device_attrs(s.train, s.norm, self.image, s.pad_channels)
        self.val_attrs = _norm_attrs(s.norm, self.image[2], s.pad_channels)
        c_out = max(self.image[2], s.pad_channels or 0)
        self.sample_shape = (self.image[0], self.image[1], c_out)
        self.dtype = np.dtype(np.int32)
        self._images = {True: train.images, False: None if val is None else val.images}
        self._keep(s, ds, train, val, batch, seed)
        self._alloc()

    @property
    def staging_shape(self) -> tuple[int, ...]:
        return (1, 1, 1)  # one int32 dataset index a sample

    # --- the plan's side ----------------------------------------------------------------------------
    def input_plan(self) -> ResidentInput:
        return ResidentInput(len(self._labels[True]), 0 if self._labels[False] is None else len(self._labels[False]),
                             self.image, tuple(sorted(self.attrs.items())), tuple(sorted(self.val_attrs.items())),
                             shuffle=self.shuffle_train)

    def upload(self, backend: Any, program: Any) -> None:
        """Copy the raw data sets and their labels into the arena (once, after allocation)."""
        backend.write(program.tensor(TRAIN_SET), self._images[True])
        backend.write(program.tensor(TRAIN_LABELS), self._labels[True].astype(np.int32))
        if self._images[False] is not None:
            backend.write(program.tensor(VAL_SET), self._images[False])
            backend.write(program.tensor(VAL_LABELS), self._labels[False].astype(np.int32))

    def begin_epoch(self, backend: Any, program: Any, epoch: int) -> None:
        """Write the epoch's two seeds: the shuffle's (shuffle_order computes the order from it on the device)
        and the augmentation's prefix (the per-sample keys are splitmix64(prefix ^ index) on the device)."""
        seeds = ((ORDER_KEY, derive_seed(self.seed, TAG_SHUFFLE, epoch)), (KEY, seed_prefix(self.seed, epoch)))
        for name, seed in seeds:
            backend.write(program.tensor(name), np.array([seed], dtype="<u8").view(np.int32))
        # this rank's share (tr.data.sharding), written each epoch: a checkpoint that rank 0 saved restores
        # rank 0's value on every rank
        backend.write(program.tensor(DATA_RANK), np.array([self.rank], np.int32))

    # --- the Feeder protocol ------------------------------------------------------------------------
    def _alloc(self) -> None:
        self._bufs = [(np.zeros(self.batch, np.int32), np.zeros((self.batch, 1, 1, 1), np.int32)) for _ in range(2)]

    def epoch_order(self, epoch: int, train: bool) -> np.ndarray:
        """Dataset indices in the epoch's order: tr.data's Preprocessor.epoch_order for the same settings (what
        the device computes; the host's copy, for tests and tools)."""
        return epoch_order(len(self._labels[train]), self.seed, epoch, train, self.shuffle_train, self.rank,
                           self.world_size)

    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        """The epoch's steps; the batches themselves are chosen on the device (batch_select)."""
        if self._labels[train] is None:
            raise DataError("the data set has no validation split")
        n = self.num_samples(train)  # this rank's share
        for k in range(self.steps(train)):
            yield k, k % 2, min(self.batch, n - k * self.batch)
