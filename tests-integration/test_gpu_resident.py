"""device_augment on the CUDA backend (GPU tests): the data set in the arena, augment_affine inside the captured
step. The step's input equals the op's CPU reference on the same batch indices (1e-5 of the normalised range in
FP32; FP16 rounding in AMP), the epoch's order (shuffled on the device) is tr.data's, every sample once per
epoch with its own label, byte-identical reruns, and the task learns."""

from __future__ import annotations

import numpy as np
import pytest
from resident_chain import SPEC, configure, digits, task

from tr.backend.cpu.ops.augment import augment
from tr.data.seeds import seed_prefix

pytestmark = pytest.mark.gpu
SEED = 77


def _run(amp: bool, epochs: int = 2):
    ds = digits(2000, 500)
    train = ds.load("train")
    configure(ds, seed=SEED)
    seen = []
    box = []

    def hook(k, _r):
        p, be = box[0].program, box[0].backend
        ab = "ab"[k % 2]
        seen.append((be.read(p.tensor(f"data_{ab}")).reshape(-1), be.read(p.tensor(f"labels_{ab}")).reshape(-1),
                     be.read(p.tensor("aug_x"))))

    t = task("cuda", epochs=epochs, amp=amp, batch=200, hook=hook, hidden=256)
    box.append(t)
    r = t.run()
    return t, r, seen, train.images, train.labels


@pytest.fixture(scope="module")
def amp_run():
    """One AMP run checked by both tests below (against the CPU reference, and as the first of the two runs that
    must be byte-identical): run once, not twice."""
    return _run(True)


@pytest.mark.parametrize("amp", [False, True])
def test_the_captured_step_augments_like_the_cpu_reference(amp, request):
    t, r, seen, images, labels = request.getfixturevalue("amp_run") if amp else _run(False)
    assert t.backend.name == "cuda" and len(seen) == 20
    tol = 1e-5 if not amp else 4e-3
    for k, (idx, lab, x) in enumerate(seen):
        np.testing.assert_array_equal(lab, labels[idx])
        want = augment(images, idx.astype(np.int64), seed_prefix(SEED, k // 10), SPEC, 1)
        span = float(want.max() - want.min())
        err = np.abs(x.astype(np.float32) - want)
        assert err.max() <= tol * span * (1 if not amp else 2), (k, float(err.max()))
    for epoch in (0, 1):  # the order the device shuffled is tr.data's (the Preprocessor's) for the epoch
        order = np.concatenate([s[0] for s in seen[10 * epoch:10 * (epoch + 1)]])
        np.testing.assert_array_equal(order, t._feeder.epoch_order(epoch, True))
    assert sorted(order) == list(range(2000))
    assert r.best_top1 > 0.45  # 20 steps of heavily augmented digits (the CPU backend: about 0.6)


def test_reruns_on_the_device_are_byte_identical(amp_run):
    (t1, r1, *_), (t2, r2, *_) = amp_run, _run(True)
    w1, w2 = t1.weights(), t2.weights()
    assert all(np.array_equal(w1[k], w2[k]) for k in w1)
    assert [e.train_loss for e in r1.history] == [e.train_loss for e in r2.history]
