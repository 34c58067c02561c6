"""Normalisation presets of the data pipeline (SEED_SYSTEM.md §9): x' = (x/255 - mean) / std."""

from __future__ import annotations

from enum import Enum


class NormMode(Enum):
    NO_NORM = "no_norm"
    MNIST = "mnist"
    CIFAR = "cifar"
    IMAGENET = "imagenet"
    MLPERF = "mlperf"

    @property
    def mean(self) -> tuple[float, ...]:
        return _CONSTANTS[self][0]

    @property
    def std(self) -> tuple[float, ...]:
        return _CONSTANTS[self][1]


_CONSTANTS: dict[NormMode, tuple[tuple[float, ...], tuple[float, ...]]] = {
    NormMode.NO_NORM: ((0.0,), (1.0,)),
    NormMode.MNIST: ((0.1307,), (0.3081,)),
    NormMode.CIFAR: ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    NormMode.IMAGENET: ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    NormMode.MLPERF: ((123.68 / 255, 116.78 / 255, 103.94 / 255), (1 / 255, 1 / 255, 1 / 255)),
}
