"""device_augment on the CUDA backend (GPU tests): the data set in the arena, augment_affine inside the captured
step. The step's input equals the op's CPU reference on the same batch indices (1e-5 of the normalised range in
FP32; FP16 rounding in AMP), every sample once per epoch with its own label, byte-identical reruns, and the
task learns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
from tr.backend.augment import AugmentSpec
from tr.backend.cpu.ops.augment import augment
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
from tr.data.seeds import seed_prefix

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
CHAIN = (Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomScale(0.8, 1.2), RandomErasing(0.5),
         RandomHorizontalFlip())
SPEC = AugmentSpec(pad=2, degrees=20.0, scale=(0.8, 1.2), erase_p=0.5, flip_p=0.5, mean=(0.1307,), std=(0.3081,),
                   crop_slot=2, rotation_slot=3, scale_slot=4)
SEED = 77


def _run(amp: bool, epochs: int = 2):
    m = MNIST(ROOT / "data" / "mnist")
    tr, va = m.load("train"), m.load("val")
    ds = ArrayDataset((tr.images[:2000], tr.labels[:2000]), (va.images[:500], va.labels[:500]), num_classes=10)
    reset_global_settings()
    reset_preprocessor_settings()
    GLOBAL_SETTING.manual_seed(SEED).global_batch_size(200).amp(amp)
    PREPROCESSOR_SETTING.dataset(ds).normalization(NormMode.MNIST).train_transforms(*CHAIN).device_augment(True)
    seen = []
    box = []

    def hook(k, _r):
        p, be = box[0].program, box[0].backend
        ab = "ab"[k % 2]
        seen.append((be.read(p.tensor(f"data_{ab}")).reshape(-1), be.read(p.tensor(f"labels_{ab}")).reshape(-1),
                     be.read(p.tensor("aug_x"))))

    t = DeepLearningTask().device("cuda").quiet().model(seq(fc(256, True), relu(), fc(10, True))) \
        .loss(CrossEntropyLoss()).total_epochs(epochs).optimizer(AdamW()).scheduler(ConstantLR().base_lr(1e-3))
    t.on_step(hook)
    box.append(t.compile())
    r = t.run()
    return t, r, seen, tr.images[:2000], tr.labels[:2000]


@pytest.mark.parametrize("amp", [False, True])
def test_the_captured_step_augments_like_the_cpu_reference(amp):
    t, r, seen, images, labels = _run(amp)
    assert t.backend.name == "cuda" and len(seen) == 20
    tol = 1e-5 if not amp else 4e-3
    for k, (idx, lab, x) in enumerate(seen):
        np.testing.assert_array_equal(lab, labels[idx])
        want = augment(images, idx.astype(np.int64), seed_prefix(SEED, k // 10), SPEC, 1)
        span = float(want.max() - want.min())
        err = np.abs(x.astype(np.float32) - want)
        assert err.max() <= tol * span * (1 if not amp else 2), (k, float(err.max()))
    order = np.concatenate([s[0] for s in seen[:10]])
    assert sorted(order) == list(range(2000))
    assert r.best_top1 > 0.45  # 20 steps of heavily augmented digits (the CPU backend: about 0.6)


def test_reruns_on_the_device_are_byte_identical():
    (t1, r1, *_), (t2, r2, *_) = _run(True), _run(True)
    w1, w2 = t1.weights(), t2.weights()
    assert all(np.array_equal(w1[k], w2[k]) for k in w1)
    assert [e.train_loss for e in r1.history] == [e.train_loss for e in r2.history]
