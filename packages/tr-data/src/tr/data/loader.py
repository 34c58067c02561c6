"""BatchLoader: tr-data's pipeline as a plain batch iterator, for a user of tr-data alone (or of PyTorch).

    loader = BatchLoader(PreprocessorSettings().dataset(ImageFolder("photos")).train_transforms(
        RandomResizedCrop(224), RandomHorizontalFlip()).val_transforms(Resize(256), CenterCrop(224))
        .normalization(NormMode.IMAGENET), batch_size=256, dtype="float16")
    for epoch in range(90):
        for images, labels in loader.epoch(epoch):            # numpy views, valid until the next batch
            ...
        for images, labels in loader.epoch(epoch, train=False, torch=True):   # torch tensors, no copy
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tr.core.errors import ConfigError
from tr.data.preprocessor import Preprocessor
from tr.data.settings import PreprocessorSettings
from tr.data.station import TransferStation


class BatchLoader:
    """Batches of ``batch_size`` normalised samples (NHWC, ``dtype``) and int32 labels, epoch by epoch, in the
    pipeline's deterministic order (a function of the seed and the epoch, whatever the workers). The arrays
    are views of the loader's buffers: valid until the iterator moves on (``copy=True`` gives copies)."""

    def __init__(self, settings: PreprocessorSettings, batch_size: int, dtype: str = "float32") -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        s = settings if settings.frozen else settings.commit()
        self.station = TransferStation(batch_size, s.sample_shape(True), dtype)
        self.pre = Preprocessor(s, self.station)

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        return tuple(self.station.sample_shape)  # type: ignore[return-value]

    def __len__(self) -> int:
        """Batches in a training epoch."""
        return self.pre.plan(True).num_batches

    def epoch(self, epoch: int, train: bool = True, copy: bool = False, torch: bool = False) -> Iterator[Any]:
        """(images, labels) of every batch of ``epoch`` (training or validation); ``torch``: as torch tensors
        sharing the buffers (DLPack)."""
        with self.pre.epoch(epoch, train) as run:
            for b in run.batches(0):
                if torch:
                    x, y = b.torch()
                    yield (x.clone(), y.clone()) if copy else (x, y)
                else:
                    yield (b.valid_data.copy(), b.valid_labels.copy()) if copy else (b.valid_data, b.valid_labels)

    def close(self) -> None:
        self.pre.close()

    def __enter__(self) -> BatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
