"""Training with device_augment (tr.task.resident, tr.graph.resident) on the CPU backend: the data set lives in
the arena and augment_affine at the head of the step gathers and augments each batch.

Against tr.data's worker pipeline for the same settings: the same samples in the same order with the same
labels; against the op's reference (tr.backend.cpu.ops.augment.augment) on the batch's indices: the step's
input exactly; reruns byte-identical; a sample's augmentation independent of the batch size; chains the device
op does not implement refused at compile time, naming the transform."""

from __future__ import annotations

import numpy as np
import pytest
from resident_chain import CHAIN, SPEC, configure, task
from resident_chain import digits as mnist_digits

from renaissance import NormMode
from tr.backend.cpu.ops.augment import augment
from tr.backend.rules.augment import AugmentSpec
from tr.core.errors import ConfigError
from tr.core.memory import Role
from tr.data import (
    ArrayDataset,
    ColorJitter,
    Compose,
    Pad,
    RandAugment,
    RandomCrop,
    RandomHorizontalFlip,
    RandomRotation,
    RandomScale,
    TrivialAugmentWide,
)
from tr.data.seeds import seed_prefix
from tr.task.pipeline import PipelineFeeder
from tr.task.resident import ResidentFeeder

SEED = 123


@pytest.fixture(scope="module")
def digits():
    return mnist_digits(1000, 300)


def inputs_per_step(t):
    """A hook that records (indices, labels, augmented input) after every training step."""
    seen = []

    def hook(_k, _result):
        p, be = t[0].program, t[0].backend
        seen.append((be.read(p.tensor("data_a")).reshape(-1), be.read(p.tensor("labels_a")).reshape(-1),
                     be.read(p.tensor("aug_x")), be.read(p.tensor("data_b")).reshape(-1),
                     be.read(p.tensor("labels_b")).reshape(-1)))
    return seen, hook


def test_same_samples_order_and_labels_as_the_worker_pipeline(digits):
    """The order the device computes (shuffle_order) and walks (batch_select) is tr.data's Preprocessor's, with
    its labels, epoch by epoch."""
    s = configure(digits).commit()
    res = ResidentFeeder(s, 100, SEED)
    pipe = PipelineFeeder(s, 100, SEED)
    try:
        for epoch in (0, 3):
            np.testing.assert_array_equal(res.epoch_order(epoch, True), pipe.pre.epoch_order(epoch, True))
        assert res.steps(False) == pipe.steps(False) and res.last_batch(False) == pipe.last_batch(False)
        want = {epoch: pipe.pre.epoch_order(epoch, True) for epoch in range(4)}
    finally:
        pipe.close()
    box = []
    seen, hook = inputs_per_step(box)
    box.append(task(epochs=4, hook=hook))
    box[0].run()
    labels = digits.load("train").labels
    assert len(seen) == 40
    for epoch in range(4):
        steps = seen[10 * epoch:10 * (epoch + 1)]
        idx = np.concatenate([ia if k % 2 == 0 else ib for k, (ia, _la, _x, ib, _lb) in enumerate(steps)])
        lab = np.concatenate([la if k % 2 == 0 else lb for k, (_ia, la, _x, _ib, lb) in enumerate(steps)])
        np.testing.assert_array_equal(idx, want[epoch])
        np.testing.assert_array_equal(lab, labels[idx])


def test_the_step_input_is_the_op_on_the_batch_and_near_the_workers(digits):
    configure(digits)
    box = []
    seen, hook = inputs_per_step(box)
    box.append(task(epochs=2, hook=hook))
    t = box[0]
    t.run()
    images = digits.load("train").images
    labels = digits.load("train").labels
    assert len(seen) == 20
    compose = Compose(list(CHAIN), NormMode.MNIST)
    for k, (ia, la, x, ib, lb) in enumerate(seen):
        idx, lab = (ia, la) if k % 2 == 0 else (ib, lb)  # step k reads buffer k % 2; aug_x is its batch
        epoch = k // 10
        np.testing.assert_array_equal(lab, labels[idx])
        np.testing.assert_array_equal(x, augment(images, idx.astype(np.int64), seed_prefix(SEED, epoch), SPEC, 1))
        if k in (0, 13):
            workers = np.stack([compose(images[i], seed=SEED, epoch=epoch, index=int(i)) for i in idx])
            assert np.abs(x - workers).mean() < 0.02 * float(workers.max() - workers.min())
    order0 = np.concatenate([seen[k][0] if k % 2 == 0 else seen[k][3] for k in range(10)])
    assert sorted(order0) == list(range(1000))  # each sample once per epoch


def test_reruns_are_byte_identical_and_training_learns(digits):
    results = []
    for _ in range(2):
        configure(digits)
        t = task(epochs=3)
        r = t.run()
        results.append((r, t.weights()))
    (r1, w1), (r2, w2) = results
    assert w1.keys() == w2.keys() and all(np.array_equal(w1[k], w2[k]) for k in w1)
    losses = [e.train_loss for e in r1.history]
    assert losses == [e.train_loss for e in r2.history] and losses[-1] < losses[0]
    assert r1.best_top1 > 0.5


def test_a_sample_is_augmented_alike_in_batches_of_any_size(digits):
    rows = []
    for batch in (100, 40):
        configure(digits)
        box = []
        seen, hook = inputs_per_step(box)
        box.append(task(batch=batch, hook=hook))
        box[0].run(1)
        got = {}
        for k, (ia, _la, x, ib, _lb) in enumerate(seen):
            for j, i in enumerate(ia if k % 2 == 0 else ib):
                got[int(i)] = x[j]
        rows.append(got)
    common = sorted(set(rows[0]) & set(rows[1]))
    assert len(common) >= 300
    for i in common:
        np.testing.assert_array_equal(rows[0][i], rows[1][i])


def test_amp_trains_on_fp16_input(digits):
    configure(digits)
    t = task(epochs=2, amp=True)
    r = t.run()
    assert t.program.tensor("aug_x").dtype.name == "FP16"
    assert np.isfinite(r.history[-1].train_loss) and r.best_top1 > 0.3


@pytest.mark.parametrize("chain, match", [
    ((ColorJitter(0.4),), "ColorJitter.*has no device kernel"),
    ((Pad(2), RandomCrop(28), RandAugment()), r"RandAugment\(num_ops=2.*has no device kernel"),
    ((TrivialAugmentWide(fill=0),), r"TrivialAugmentWide\(num_magnitude_bins=31.*has no device kernel"),
    ((RandomScale(0.9, 1.1), RandomRotation(10)), "RandomRotation.*after a later geometric step"),
    ((Pad(2, padding_mode="edge"), RandomCrop(28)), "Pad.*constant padding"),
    ((RandomCrop(28, padding=(1, 2)),), "RandomCrop.*equally"),
    ((Pad(2), RandomRotation(10), RandomCrop(28)), "Pad.*not followed by a RandomCrop"),
    ((RandomRotation((-5, 20)),), "symmetric range"),
])
def test_chains_without_a_device_kernel_are_refused_naming_the_transform(digits, chain, match):
    configure(digits, chain=chain)
    with pytest.raises(ConfigError, match=match):
        task()


def test_val_transforms_and_ragged_data_are_refused(digits):
    configure(digits, val=(RandomCrop(28, padding=1),))
    with pytest.raises(ConfigError, match="val transforms"):
        task()
    imgs = [np.zeros((28, 28, 1), np.uint8), np.zeros((30, 28, 1), np.uint8)] * 50
    ragged = ArrayDataset((imgs, [0, 1] * 50), num_classes=10)
    configure(ragged, chain=(RandomCrop(28),))
    with pytest.raises(ConfigError, match="ragged"):
        task()


def test_predict_runs_on_a_user_batch(digits):
    configure(digits)
    t = task(epochs=1)
    t.run()
    x = np.zeros((5, 28, 28, 1), np.float32)
    out = t.predict(x, "logits")
    assert out.shape == (5, 10) and np.isfinite(out).all()


def test_both_models_are_validated_on_the_resident_val_set(digits):
    """Validation reads the resident val set (the INFER and INFER_EMA parts head with augment_affine's normalisation):
    its top-1 equals predict()'s on the same digits fed from the host, for the weights and for the EMA."""
    configure(digits)
    t = task(epochs=2, ema=0.9)
    last = t.run().history[-1]
    val = digits.load("val")
    x = ((val.images.astype(np.float32) / 255 - 0.1307) / 0.3081).astype(np.float32)

    def top1() -> float:
        got = np.concatenate([t.predict(x[i:i + 100], "argmax") for i in range(0, len(x), 100)])
        return float((got == val.labels).mean())

    assert last.ema_top1 is not None and last.ema_top1 != last.top1
    assert abs(top1() - last.top1) < 1e-6
    be = t.backend
    masters = [w for w in t.program.tensors if w.region.role is Role.PARAM]
    assert masters
    for w in masters:
        (e,) = [x for x in t.program.tensors if x.name == w.name + ".ema"]
        be.write(w, be.read(e))
    assert abs(top1() - last.ema_top1) < 1e-6


def test_tta_validates_the_views_of_the_resident_val_set(digits):
    """With tta(flip, shift) validation gathers the resident batch on the device, reads it back and runs the other
    views: its loss and top-1 (the EMA's top-1 too) are those of the mean softmax over the views computed here from
    predict() of the same weights without TTA."""
    configure(digits)
    tta = task(epochs=2, ema=0.9, tta=(True, 1))
    configure(digits)
    plain = task(epochs=2, ema=0.9)
    last, _ = tta.run().history[-1], plain.run()
    val = digits.load("val")
    x = ((val.images.astype(np.float32) / 255 - 0.1307) / 0.3081).astype(np.float32)
    views = [x, *(np.take(x, np.clip(np.arange(28) - s, 0, 27), axis=a) for a, s in ((2, 1), (2, -1), (1, 1),
                                                                                      (1, -1)))]
    views += [v[:, :, ::-1] for v in views]

    def probs() -> np.ndarray:
        z = [np.concatenate([plain.predict(v[i:i + 100], "logits") for i in range(0, len(v), 100)]) for v in views]
        e = [np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True)) for a in z]
        return np.mean([a / a.sum(axis=1, keepdims=True) for a in e], axis=0)

    p = probs()
    rows = np.arange(len(val.labels))
    assert last.val_loss == pytest.approx(float(-np.log(p[rows, val.labels]).mean()), rel=1e-5)
    assert abs(float((p.argmax(axis=1) == val.labels).mean()) - last.top1) < 1e-6
    be = plain.backend
    for w in [w for w in plain.program.tensors if w.region.role is Role.PARAM]:
        (e,) = [x for x in plain.program.tensors if x.name == w.name + ".ema"]
        be.write(w, be.read(e))
    p = probs()
    assert abs(float((p.argmax(axis=1) == val.labels).mean()) - last.ema_top1) < 1e-6


def test_device_augment_and_ema_start_from_the_weights_of_the_plain_plan(digits):
    starts = []
    for device_augment, ema in ((False, None), (True, None), (True, 0.9)):
        configure(digits, device_augment=device_augment)
        starts.append(task(ema=ema).weights())
    for other in starts[1:]:
        assert other.keys() == starts[0].keys() and all(np.array_equal(other[k], starts[0][k]) for k in other)


def test_a_resumed_run_gives_the_bytes_of_an_unbroken_one(digits, tmp_path):
    configure(digits)
    straight = task(epochs=3)
    straight.run()
    configure(digits)
    first = task(epochs=3)
    first.run(1)
    first.save(tmp_path / "ck")
    configure(digits)
    resumed = task(epochs=3).resume(tmp_path / "ck")
    resumed.run()
    want, got = straight.weights(), resumed.weights()
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


def test_a_checkpoint_of_another_input_or_chain_is_refused(digits, tmp_path):
    configure(digits, device_augment=False)
    task().save(tmp_path / "ck")
    configure(digits)
    with pytest.raises(ConfigError, match="another configuration.*data.feeder: the checkpoint has 'PipelineFeeder', "
                                          "this task has 'ResidentFeeder'"):
        task().resume(tmp_path / "ck")
    configure(digits)
    task().save(tmp_path / "ck2")
    configure(digits, chain=(Pad(3), RandomCrop(28)))
    with pytest.raises(ConfigError, match=r"another configuration.*transforms.*Pad\(padding=\(2"):
        task().resume(tmp_path / "ck2")


def test_rgb_images_with_padded_channels(tmp_path):
    """CIFAR-like: 3 channels, RandomCrop(32, padding=4) and a flip, the samples padded to 4 channels."""
    rng = np.random.default_rng(5)
    ds = ArrayDataset((rng.integers(0, 256, (300, 32, 32, 3), dtype=np.uint8), np.arange(300) % 10),
                      (rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8), np.arange(60) % 10), num_classes=10)
    s = configure(ds, chain=(RandomCrop(32, padding=4), RandomHorizontalFlip()))
    s.normalization(NormMode.CIFAR).pad_channels_to(4)
    box = []
    seen, hook = inputs_per_step(box)
    box.append(task(hook=hook))
    box[0].run(1)
    spec = AugmentSpec(pad=4, flip_p=0.5, crop_slot=1, mean=NormMode.CIFAR.mean, std=NormMode.CIFAR.std)
    idx, _, x = seen[0][0], seen[0][1], seen[0][2]
    assert x.shape == (100, 32, 32, 4) and (x[..., 3] == 0).all()
    want = augment(ds.load("train").images, idx.astype(np.int64), seed_prefix(SEED, 0), spec, 4)
    np.testing.assert_array_equal(x, want)
    compose = Compose([RandomCrop(32, padding=4), RandomHorizontalFlip()], NormMode.CIFAR, pad_channels_to=4)
    workers = np.stack([compose(ds.load("train").images[i], seed=SEED, epoch=0, index=int(i)) for i in idx])
    np.testing.assert_allclose(x, workers, atol=1e-5)  # a pure shift and flip: no interpolation at all


def test_a_rank_takes_the_pipeline_s_share(digits):
    s = configure(digits).commit()
    for rank in (0, 1):
        res = ResidentFeeder(s, 100, SEED)
        pipe = PipelineFeeder(s, 100, SEED)
        try:
            res.shard(rank, 2)
            pipe.shard(rank, 2)
            for train in (True, False):
                np.testing.assert_array_equal(res.epoch_order(2, train), pipe.pre.epoch_order(2, train))
                assert res.steps(train) == pipe.steps(train) and res.num_samples(train) == pipe.num_samples(train)
        finally:
            pipe.close()


def test_more_ranks_than_validation_samples_is_refused():
    """Every rank needs a validation sample (else the ranks would compile different plans)."""
    import resident_chain

    s = configure(resident_chain.digits(200, 3)).commit()
    feeder = ResidentFeeder(s, 100, SEED)
    with pytest.raises(ConfigError, match="the validation set has 3 samples, fewer than the 4 ranks"):
        feeder.shard(0, 4)
    feeder.shard(1, 2)  # enough: rank 1 of 2 takes the validation positions 1
    assert feeder.num_samples(False) == 1 and feeder.batch == 50
