"""DeepLearningTask.predict() on the CPU backend: what it takes and what it refuses.

- Raw uint8 images with input="raw" go through the task's own validation chain (here a CenterCrop and the MNIST
  normalisation): the samples are byte-identical to the batches the feeder delivers to validation, the top-1
  equals the task's validation top-1, and the logits of the last validation batch are those validation left in
  the arena.
- Un-normalised input is refused (uint8 without input="raw", float pixel values) or, for x / 255, warned about.
- Any n >= 1 is split into chunks of the compiled batch: the same numbers as chunk-by-chunk calls.
- NaN/Inf samples raise naming them, or are flagged (NaN rows, class -1) for each output kind.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.core.errors import ConfigError, DataError, DTypeError, PhaseError, ShapeError
from tr.core.norm import NormMode
from tr.core.settings import Settings
from tr.data import MNIST, ArrayDataset, CenterCrop, PreprocessorSettings, RandomCrop
from tr.graph.blueprint import bn, conv, fc, flatten, maxpool, relu, seq
from tr.graph.steps import Part
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder
from tr.task.predict import input_tensor, normalize_raw, predict

ROOT = Path(__file__).resolve().parents[1]
BATCH = 128
VAL = 8 * BATCH  # whole batches: the last validation batch runs the plan predict() runs


@pytest.fixture(scope="module")
def mnist():
    """An MLP trained one epoch on 2,000 bundled digits (RandomCrop(24)), validated on 1,024 (CenterCrop(24))."""
    m = MNIST(ROOT / "data" / "mnist")
    tr, va = m.load("train"), m.load("val")
    ds = ArrayDataset((tr.images[:2000], tr.labels[:2000]), (va.images[:VAL], va.labels[:VAL]), num_classes=10)
    pre = (PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST)
           .train_transforms(RandomCrop(24)).val_transforms(CenterCrop(24)))
    feeder = PipelineFeeder(pre, BATCH, seed=7)
    task = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(flatten(), fc(64), relu(), fc(10))).optimizer(SGD().momentum(0.9)).total_epochs(1)
            .data(feeder)).compile()
    last = task.run().history[-1]
    data = input_tensor(task)
    loss = next(c for c in task.program.step("val_a").calls_of(Part.INFER_A.value) if c.op == "softmax_ce_inf")
    val_logits = task.backend.read(loss.args["logits"]).reshape(BATCH, -1).copy()  # the last validation batch's
    return task, feeder, va.images[:VAL], va.labels[:VAL], last.top1, val_logits, data


def test_raw_images_reproduce_validation(mnist):
    task, feeder, images, labels, top1, val_logits, data = mnist
    assert tuple(data.shape.dims) == (BATCH, 24, 24, 1)
    # the samples: what the feeder hands validation, byte for byte
    fed = []
    for k, zone, m in feeder.epoch(1, False):
        fed.append(feeder.buffers()[zone][1][:m].copy())
        feeder.release(k)
    order = feeder.pre.epoch_order(1, False)
    x = normalize_raw(task, images)
    assert x.dtype == np.float32 and x.shape == (VAL, 24, 24, 1)
    np.testing.assert_array_equal(x[order], np.concatenate(fed))
    # the top-1 validation computed, and the logits its last batch left in the arena
    pred = task.predict(images, "argmax", input="raw")
    assert float((pred == labels).mean()) == pytest.approx(top1, abs=1e-12)
    logits = task.predict(images, input="raw")
    np.testing.assert_array_equal(logits[VAL - BATCH:], val_logits)
    np.testing.assert_array_equal(logits, predict(task, x))
    # a sequence of [h, w, c] images (a ragged data set's form) is the same
    np.testing.assert_array_equal(task.predict(list(images[:3]), input="raw"), logits[:3])


def test_un_normalised_input_is_refused_or_warned(mnist, caplog):
    task, _, images, labels, top1, _, _ = mnist
    cropped = images[:, 2:26, 2:26]  # what CenterCrop(24) keeps
    with pytest.raises(DTypeError, match="input='raw'"):
        task.predict(cropped)
    with pytest.raises(DataError, match=r"sample 0 holds values in \[0, 255\].*input='raw'"):
        task.predict(cropped.astype(np.float32))
    with caplog.at_level(logging.WARNING, logger="tr"):
        scaled = task.predict(cropped.astype(np.float32) / 255, "argmax")  # the mistake the warning is for
    assert "x / 255" in caplog.text
    assert float((scaled == labels).mean()) != top1  # it is a different answer, not a harmless one
    with pytest.raises(DTypeError, match="takes uint8 images"):
        task.predict(images.astype(np.float32), input="raw")
    with pytest.raises(ShapeError, match=r"expected \[n, h, w, c\]"):
        task.predict(images[..., 0], input="raw")
    with pytest.raises(ShapeError, match=r"\(28, 28, 3\) \(h, w, c\): they become \(24, 24, 3\) samples, but the "
                                         r"plan takes \(24, 24, 1\)"):
        task.predict(np.repeat(images[:2], 3, axis=3), input="raw")
    with pytest.raises(ShapeError, match="looks like CHW"):
        task.predict(images.transpose(0, 3, 1, 2).copy(), input="raw")
    with pytest.raises(ConfigError, match="input="):
        task.predict(cropped, input="pixels")


def test_random_val_transforms_cannot_be_reproduced():
    rng = np.random.default_rng(0)
    ds = ArrayDataset((rng.integers(0, 256, (8, 10, 10, 1), np.uint8), np.arange(8) % 2),
                      (rng.integers(0, 256, (4, 10, 10, 1), np.uint8), np.arange(4) % 2), num_classes=2)
    pre = (PreprocessorSettings().dataset(ds).preprocess_workers(1).train_transforms(RandomCrop(8))
           .val_transforms(RandomCrop(8)))
    task = (DeepLearningTask(Settings().global_batch_size(4)).device("cpu").quiet().model(seq(fc(2)))
            .optimizer(SGD()).total_epochs(1).data(PipelineFeeder(pre, 4, seed=1))).compile()
    with pytest.raises(ConfigError, match="val transforms .* are random"):
        task.predict(ds.load("val").images, input="raw")
    assert task.predict(np.zeros((1, 8, 8, 1), np.float32)).shape == (1, 2)


# --- an ArrayFeeder task: normalised arrays of the user's own ----------------------------------------------------

HWC, B = (8, 8, 3), 4


@pytest.fixture(scope="module")
def cnn():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2 * B, *HWC)).astype(np.float32)
    y = rng.integers(0, 10, 2 * B).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x[:B], y[:B]), B, shuffle=False, num_classes=10)
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(B)).device("cpu").quiet()
            .model(seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2), flatten(), fc(10)))
            .optimizer(SGD().momentum(0.9)).total_epochs(1).data(feeder)).compile()
    task.run()  # BN statistics away from (0, 1)
    return task


def _x(n, seed=11):
    return np.random.default_rng(seed).standard_normal((n, *HWC)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 3, 4, 9, 13])
def test_any_count_is_split_into_compiled_batches(cnn, n):
    x = _x(n)
    chunks = [predict(cnn, x[i:i + B]) for i in range(0, n, B)]
    got = predict(cnn, x)
    assert got.shape == (n, 10)
    np.testing.assert_array_equal(got, np.concatenate(chunks))
    np.testing.assert_array_equal(predict(cnn, x, "argmax"), got.argmax(1))
    np.testing.assert_allclose(predict(cnn, x, "probs").sum(1), 1.0, rtol=1e-6)
    # one sample alone gives its row of the big call (each sample is inferred alone), up to the rounding of its
    # row's position in the chunk (the CPU GEMM's blocking)
    np.testing.assert_allclose(predict(cnn, x[n - 1:n])[0], got[n - 1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("output", ["logits", "probs", "argmax"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_raise_or_are_flagged(cnn, output, bad):
    x = _x(9)
    clean = predict(cnn, x, output)
    x[2, 1, 1, 0] = bad
    x[7, 0, 0, 2] = bad
    with pytest.raises(DataError, match=r"sample \[2, 7\] \(2 of them\) holds NaN or Inf"):
        predict(cnn, x, output)
    got = predict(cnn, x, output, nonfinite="flag")
    keep = np.array([i not in (2, 7) for i in range(9)])
    np.testing.assert_array_equal(got[keep], clean[keep])  # the others untouched
    if output == "argmax":
        assert got.dtype == np.int64 and list(got[[2, 7]]) == [-1, -1]
    else:
        assert got.dtype == np.float32 and np.isnan(got[[2, 7]]).all()


def test_non_finite_logits_from_finite_input(cnn):
    x = _x(5)
    before = cnn.weights()
    fc_w = next(i.tensor for i in cnn.program.inits if i.tensor.region.name == "param/fc_w")
    w = cnn.backend.read(fc_w).copy()
    w2 = w.copy()
    w2.reshape(w.shape[0], -1)[3] = np.inf  # class 3's weights: every sample's logit 3 is +-inf or nan
    cnn.backend.write(fc_w, w2)
    try:
        with pytest.raises(DataError, match="logits of sample .* not finite, though the input is"):
            predict(cnn, x, "argmax")
        assert (predict(cnn, x, "argmax", nonfinite="flag") == -1).all()
    finally:
        cnn.backend.write(fc_w, w)
    after = cnn.weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_bad_input_is_refused_with_the_expected_shape(cnn):
    bp = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2), flatten(), fc(10))
    with pytest.raises(PhaseError, match="compile"):
        predict(DeepLearningTask().model(bp), _x(2))
    with pytest.raises(ShapeError, match=r"\[n, 8, 8, 3\] \(NHWC\).*looks like NCHW.*transpose\(0, 2, 3, 1\)"):
        predict(cnn, np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(ShapeError, match=r"of shape \(8, 8, 3\).*batch axis"):
        predict(cnn, np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ShapeError, match=r"of shape \(2, 8, 7, 3\); the plan takes \[n, 8, 8, 3\]"):
        predict(cnn, np.zeros((2, 8, 7, 3), np.float32))
    with pytest.raises(ShapeError, match="at least one sample"):
        predict(cnn, np.zeros((0, 8, 8, 3), np.float32))
    with pytest.raises(DTypeError, match="float64"):
        predict(cnn, np.zeros((2, 8, 8, 3)))
    with pytest.raises(DTypeError, match="numpy array"):
        predict(cnn, [[0.0]])
    with pytest.raises(DTypeError, match="input='raw'"):
        predict(cnn, np.zeros((2, 8, 8, 3), np.uint8))
    with pytest.raises(ConfigError, match="ArrayFeeder"):  # no chain to normalise raw images with
        predict(cnn, np.zeros((2, 8, 8, 3), np.uint8), input="raw")
    with pytest.raises(ConfigError, match="nonfinite="):
        predict(cnn, _x(2), nonfinite="ignore")
    big = _x(2) * 1e4  # an ArrayFeeder's arrays have no known range: not judged
    assert predict(cnn, big).shape == (2, 10)
