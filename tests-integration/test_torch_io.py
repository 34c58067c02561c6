"""Models out of tr and in: tr -> torch state_dict -> the same logits as tr's inference, and torch -> tr -> the
same logits, for the MNIST MLP, a small CNN (an fc after the flatten of a 4x4x8 NHWC map, conv biases), one
with torch's AdaptiveAvgPool2d before its Linear, torchvision's VGG16-BN (unchanged) and ResNet-50 at 32x32 with
10 classes (eval mode: BN with running statistics).
Bad state_dicts raise naming the first differing parameter and change nothing; predict() refuses bad input.

Tolerance: FP32 on both sides, different summation orders: |diff| <= 1e-4 * max|logit| + 1e-5.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from tr.algo.optimizer import SGD  # noqa: E402
from tr.core.errors import ConfigError, DTypeError, PhaseError, ShapeError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import bn, conv, fc, flatten, maxpool, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402
from tr.task.predict import predict  # noqa: E402
from tr.task.torch_io import load_torch, to_torch_state_dict  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models import mlp_mnist, resnet50, vgg16_bn  # noqa: E402

CLASSES, BATCH = 10, 2


def _classes(bp):  # the example model with a 10-way head
    return seq(*bp.root.layers[:-1], fc(CLASSES))


def _mlp():
    t = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, CLASSES))
    return mlp_mnist, (28, 28, 1), t


def _cnn():
    bp = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2), flatten(), fc(CLASSES))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 1, 1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 8, CLASSES))
    return bp, (8, 8, 3), t


def _pooled_cnn():  # torch pools the 2x2 map to 3x3 before its Linear (overlapping bins); tr's fc reads 2x2
    bp = seq(conv(4, 3, 1, 1), bn(), relu(), maxpool(2, 2), flatten(), fc(CLASSES))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, 1, 1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.AdaptiveAvgPool2d(3), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 9, CLASSES))
    return bp, (4, 4, 3), t


def _biased_cnn():  # convs declared with bias=True, no BN: their biases map both ways
    bp = seq(conv(6, 3, 1, 1, bias=True), relu(), conv(8, 3, 2, 1, groups=2, bias=True), relu(), flatten(),
             fc(CLASSES))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, 1, 1), torch.nn.ReLU(), torch.nn.Conv2d(6, 8, 3, 2, 1, groups=2),
                            torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(2 * 2 * 8, CLASSES))
    return bp, (4, 4, 3), t


def _vgg():
    # unchanged: at 32x32 its AdaptiveAvgPool2d((7, 7)) replicates the 1x1x512 map, folded into classifier.0
    return _classes(vgg16_bn), (32, 32, 3), torchvision.models.vgg16_bn(num_classes=CLASSES)


def _resnet():
    return _classes(resnet50), (32, 32, 3), torchvision.models.resnet50(num_classes=CLASSES)


MODELS = {"mlp": _mlp, "cnn": _cnn, "pooled_cnn": _pooled_cnn, "biased_cnn": _biased_cnn, "vgg16_bn": _vgg,
          "resnet50": _resnet}


def _task(bp, hwc, train_steps=0, device="cpu"):
    rng = np.random.default_rng(3)
    n = max(train_steps, 1) * BATCH
    x = rng.standard_normal((n, *hwc)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x[:BATCH], y[:BATCH]), BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device(device).quiet().model(bp)
            .optimizer(SGD().momentum(0.9)).total_epochs(1).data(feeder)).compile()
    assert task.backend.name == device
    if train_steps:
        task.run()  # BN running statistics move away from (0, 1)
    return task


def _batch(hwc, seed=11):
    return np.random.default_rng(seed).standard_normal((BATCH, *hwc)).astype(np.float32)


def _torch_logits(model, x):
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * float(np.abs(b).max()) + 1e-5)


def _randomize(model):
    """Non-trivial BN statistics and affine parameters, conv biases (folded into tr's BN mean) where there are."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            elif isinstance(m, torch.nn.Conv2d) and m.bias is not None:
                m.bias.copy_(torch.randn(m.out_channels, generator=g) * 0.1)
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_same_logits(name):  # one compiled task for both directions: compiling is most of the time
    _round_trip(name, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mlp", "cnn", "biased_cnn", "vgg16_bn", "resnet50"])
def test_round_trip_same_logits_on_cuda(name):
    """The same from a plan compiled for the CUDA backend (FP32, no TF32): trained there, read out, loaded in."""
    _round_trip(name, "cuda")


def _round_trip(name, device):
    bp, hwc, model = MODELS[name]()
    task = _task(bp, hwc, train_steps=1, device=device)
    # tr -> torch
    state = to_torch_state_dict(task, model)
    model.load_state_dict(state)  # strict: every key present, shapes equal
    x = _batch(hwc)
    _close(_torch_logits(model, x), predict(task, x))
    bns = [k for k in state if k.endswith("running_var")]
    if bns:  # the statistics left (0, 1): the comparison exercised them
        assert not np.allclose(state[bns[0]].numpy(), 1.0)
        assert int(state[bns[0].replace("running_var", "num_batches_tracked")]) == 1
    # torch -> tr: other weights, statistics and conv biases than tr's
    model = _randomize(MODELS[name]()[2])
    load_torch(task, model)
    x = _batch(hwc, seed=12)
    _close(predict(task, x), _torch_logits(model, x))
    np.testing.assert_array_equal(predict(task, x, "argmax"), predict(task, x).argmax(1))
    np.testing.assert_allclose(predict(task, x[:1], "probs").sum(1), 1.0, rtol=1e-6)
    if name == "resnet50":  # the same architecture with another head: refused at the head, nothing written
        before = task.weights()
        with pytest.raises(ShapeError, match=r"'fc.weight' has shape \(7, 2048\)"):
            load_torch(task, torchvision.models.resnet50(num_classes=7))
        after = task.weights()
        assert all(np.array_equal(v, after[k]) for k, v in before.items())


def test_fine_tune_from_loaded_weights():
    bp, hwc, model = _cnn()
    task = _task(bp, hwc, train_steps=2)
    before = task.load_torch(_randomize(model)).weights()  # the task's thin methods: load_torch, to_torch, predict
    task.run()
    after = task.weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    model.load_state_dict(task.to_torch(model))  # and back out after training
    x = _batch(hwc)
    _close(_torch_logits(model, x), task.predict(x))


def test_other_architecture_is_refused_and_nothing_loaded():
    bp, hwc, _ = _cnn()
    task = _task(bp, hwc)
    before = task.weights()
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 1, 1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 16, CLASSES))
    with pytest.raises(ShapeError, match=r"'0\.weight' has shape \(16, 3, 3, 3\)"):
        load_torch(task, other)
    with pytest.raises(ShapeError, match="'5.weight'"):
        to_torch_state_dict(task, torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                                      torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Identity(),
                                                      torch.nn.Linear(7, CLASSES)))
    no_pool = _pooled_cnn()[2]
    no_pool[4] = torch.nn.Identity()  # a Linear(36) with no pool before it reads a 3x3 map: not this model
    pooled_task = _task(_pooled_cnn()[0], (4, 4, 3))
    with pytest.raises(ShapeError, match=r"'6.weight' has shape \(10, 36\)"):
        load_torch(pooled_task, no_pool)
    load_torch(pooled_task, no_pool.state_dict())  # a bare state_dict says nothing of pools: read as pooled
    state = _cnn()[2].state_dict()
    state["1.running_mean"] = torch.zeros(9)  # one statistic of the wrong size: refused before any write
    with pytest.raises(ShapeError, match="'1.running_mean'"):
        load_torch(task, state)
    del state["1.running_var"]
    state["1.running_mean"] = torch.zeros(8)
    with pytest.raises(ShapeError, match="'1.running_var' is missing"):
        load_torch(task, state)
    with pytest.raises(ShapeError, match="'conv1.weight' has shape \\(64, 3, 7, 7\\)"):
        load_torch(task, torchvision.models.resnet18(num_classes=CLASSES))
    after = task.weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_predict_refuses_bad_input():
    bp, hwc, _ = _cnn()
    with pytest.raises(PhaseError, match="compile"):
        predict(DeepLearningTask().model(bp), _batch(hwc))
    task = _task(bp, hwc)
    with pytest.raises(ShapeError, match=r"\[n, 8, 8, 3\]"):
        predict(task, np.zeros((BATCH, 3, 8, 8), np.float32))
    with pytest.raises(ShapeError, match="n <= 2"):
        predict(task, np.zeros((3, 8, 8, 3), np.float32))
    with pytest.raises(DTypeError, match="float64"):
        predict(task, np.zeros((BATCH, 8, 8, 3)))


def test_save_torch_file_loads_with_torch(tmp_path):
    from tr.task.torch_io import save_torch

    bp, hwc, model = _cnn()
    task = _task(bp, hwc, train_steps=1)
    save_torch(task, model, str(tmp_path / "cnn.pt"))
    model.load_state_dict(torch.load(tmp_path / "cnn.pt", weights_only=True))
    x = _batch(hwc)
    _close(_torch_logits(model, x), task.predict(x))


def test_amp_plan_predicts_what_torch_computes_in_fp32():
    bp, hwc, model = _cnn()
    x = np.random.default_rng(3).standard_normal((BATCH, *hwc)).astype(np.float32)
    feeder = ArrayFeeder((x, np.zeros(BATCH, np.int32)), (x, np.zeros(BATCH, np.int32)), BATCH, shuffle=False,
                         num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH).amp()).device("cpu").quiet()
            .model(bp).optimizer(SGD()).total_epochs(1).data(feeder)).compile()
    task.load_torch(_randomize(model))  # the FP16 working weights are refreshed from the loaded masters
    ref = _torch_logits(model, x)
    np.testing.assert_allclose(task.predict(x), ref, atol=2e-2 * float(np.abs(ref).max()))


def test_without_validation_data_predict_works_and_no_torch_is_a_clear_error(monkeypatch):
    bp, hwc, model = _cnn()
    x = _batch(hwc)
    feeder = ArrayFeeder((x, np.zeros(BATCH, np.int32)), None, BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(bp)
            .optimizer(SGD()).total_epochs(1).data(feeder)).compile()
    _close(task.load_torch(_randomize(model)).predict(x), _torch_logits(model, x))  # the plan infers at the batch
    with pytest.raises(ConfigError, match="output="):
        task.predict(x, "softmax")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(ImportError, match=r"tr-task\[torch\]"):
        task.to_torch(model.state_dict())
