"""tr.data: datasets, augmentation transforms, the native Preprocessor, FusedNormalization and the
TransferStation. Depends only on tr.core and numpy (plus its own native extension)."""

from tr.data.cifar import CIFAR10, CIFAR100
from tr.data.dataset import ArrayDataset, Dataset, Split, open_dataset
from tr.data.fused import FusedNormalization
from tr.data.idx import read_idx
from tr.data.image_dataset import DtsImages, ImageFolder
from tr.data.image_folder import ImageFolderIndex, jpeg_info, scan_image_folder
from tr.data.loader import BatchLoader
from tr.data.mnist import MNIST
from tr.data.preprocessor import EpochPlan, EpochRun, EpochTimes, Preprocessor
from tr.data.seeds import sample_seed, shuffle_order
from tr.data.settings import PREPROCESSOR_SETTING, PreprocessorSettings, reset_preprocessor_settings
from tr.data.sharding import shard_positions, shard_size
from tr.data.station import Batch, EpochCancelled, TransferStation, ZoneLayout
from tr.data.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    DoNothing,
    FastRandomResizedCrop,
    GaussianBlur,
    GaussianNoise,
    Pad,
    RandAugment,
    RandomAutocontrast,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    Resize,
    Transform,
    TrivialAugmentWide,
)

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "MNIST",
    "PREPROCESSOR_SETTING",
    "ArrayDataset",
    "Batch",
    "BatchLoader",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Dataset",
    "DoNothing",
    "DtsImages",
    "EpochCancelled",
    "EpochPlan",
    "EpochRun",
    "EpochTimes",
    "FastRandomResizedCrop",
    "FusedNormalization",
    "GaussianBlur",
    "GaussianNoise",
    "ImageFolder",
    "ImageFolderIndex",
    "Pad",
    "Preprocessor",
    "PreprocessorSettings",
    "RandAugment",
    "RandomAutocontrast",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomScale",
    "Resize",
    "Split",
    "TransferStation",
    "Transform",
    "TrivialAugmentWide",
    "ZoneLayout",
    "jpeg_info",
    "open_dataset",
    "read_idx",
    "reset_preprocessor_settings",
    "sample_seed",
    "scan_image_folder",
    "shard_positions",
    "shard_size",
    "shuffle_order",
]
