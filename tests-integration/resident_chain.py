"""What the device-augmentation tests share: the seed's MNIST chain as tr.data transforms, the same chain as
augment_affine's spec (the slots are the transforms' 1-based positions), and a slice of the bundled digits."""

from __future__ import annotations

from pathlib import Path

from renaissance import (
    GLOBAL_SETTING,
    PREPROCESSOR_SETTING,
    AdamW,
    ConstantLR,
    CrossEntropyLoss,
    DeepLearningTask,
    NormMode,
    fc,
    relu,
    reset_global_settings,
    seq,
)
from tr.backend.rules.augment import AugmentSpec
from tr.data import (
    MNIST,
    ArrayDataset,
    Pad,
    RandomCrop,
    RandomErasing,
    RandomHorizontalFlip,
    RandomRotation,
    RandomScale,
    reset_preprocessor_settings,
)

ROOT = Path(__file__).resolve().parents[1]
CHAIN = (Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomScale(0.8, 1.2), RandomErasing(0.5),
         RandomHorizontalFlip())
SPEC = AugmentSpec(pad=2, degrees=20.0, scale=(0.8, 1.2), erase_p=0.5, flip_p=0.5, mean=(0.1307,), std=(0.3081,),
                   crop_slot=2, rotation_slot=3, scale_slot=4)


def digits(train: int, val: int) -> ArrayDataset:
    """The first ``train`` training and ``val`` test digits of the bundled MNIST."""
    m = MNIST(ROOT / "data" / "mnist")
    tr, va = m.load("train"), m.load("val")
    return ArrayDataset((tr.images[:train], tr.labels[:train]), (va.images[:val], va.labels[:val]), num_classes=10)


def configure(ds, chain=CHAIN, device_augment=True, val=(), seed=123):
    """Fresh global settings: ``ds`` with the chain, MNIST normalisation and device_augment as asked."""
    reset_global_settings()
    reset_preprocessor_settings()
    GLOBAL_SETTING.manual_seed(seed).global_batch_size(100)
    s = PREPROCESSOR_SETTING.dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST)
    s.train_transforms(*chain).val_transforms(*val).device_augment(device_augment)
    return s


def task(device="cpu", epochs=1, amp=False, batch=100, hook=None, hidden=64, ema=None, tta=None):
    """A compiled two-layer MLP task on the configured data (``ema``: with an EMA of this decay, validated;
    ``tta``: task.tta's arguments)."""
    GLOBAL_SETTING.amp(amp).global_batch_size(batch)
    t = DeepLearningTask().device(device).quiet().model(seq(fc(hidden, True), relu(), fc(10, True))) \
        .loss(CrossEntropyLoss()).total_epochs(epochs).optimizer(AdamW()) \
        .scheduler(ConstantLR().base_lr(1e-3))
    if hook is not None:
        t.on_step(hook)
    if ema is not None:
        t.ema(ema)
    if tta is not None:
        t.tta(*tta)
    return t.compile()
