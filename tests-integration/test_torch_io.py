"""Models out of tr and in: tr -> torch state_dict -> the same logits as tr's inference, and torch -> tr -> the
same logits, for the MNIST MLP, a small CNN (an fc after the flatten of a 4x4x8 NHWC map, conv biases), one
with torch's AdaptiveAvgPool2d before its Linear, torchvision's VGG16-BN (unchanged) and ResNet-50 at 32x32 with
10 classes (eval mode: BN with running statistics).
Bad state_dicts raise naming the first differing parameter and change nothing. A torch model whose layers
compute otherwise than tr's (another activation, conv stride or padding, pool window, BN eps, an extra or a
missing activation) is refused naming the torch module, in both directions; its bare state_dict is matched by
shapes alone. NaN/Inf weights are refused both ways, naming the tensor. (predict(): test_predict.py.)

Tolerance: FP32 on both sides, different summation orders: |diff| <= 1e-4 * max|logit| + 1e-5; logits finite.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import bn, conv, fc, flatten, gap, leaky_relu, maxpool, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402
from tr.task.predict import predict  # noqa: E402
from tr.task.torch_io import load_torch, save_torch, to_torch_state_dict  # noqa: E402

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


def _task(bp, hwc, train_steps=0, device="cpu", lr=0.1):
    rng = np.random.default_rng(3)
    n = max(train_steps, 1) * BATCH
    x = rng.standard_normal((n, *hwc)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x[:BATCH], y[:BATCH]), BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device(device).quiet().model(bp)
            .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(lr)).total_epochs(1).data(feeder)).compile()
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
    assert np.isfinite(a).all() and np.isfinite(b).all()  # (NaN == NaN would pass assert_allclose)
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
    # ResNet-50 at batch 2 normalises 2 values per channel in its last stage (1x1 maps): one SGD step blows its
    # weights up and the logits are NaN on both sides. lr 0 still moves the BN statistics the export must carry.
    task = _task(bp, hwc, train_steps=1, device=device, lr=0.0 if name == "resnet50" else 0.1)
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


def test_save_torch_file_loads_with_torch(tmp_path):
    bp, hwc, model = _cnn()
    task = _task(bp, hwc, train_steps=1)
    save_torch(task, model, str(tmp_path / "cnn.pt"))
    model.load_state_dict(torch.load(tmp_path / "cnn.pt", weights_only=True))
    x = _batch(hwc)
    _close(_torch_logits(model, x), task.predict(x))


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_plan_predicts_what_torch_computes_in_fp32(amp):
    bp, hwc, model = _cnn()
    x = np.random.default_rng(3).standard_normal((BATCH, *hwc)).astype(np.float32)
    feeder = ArrayFeeder((x, np.zeros(BATCH, np.int32)), (x, np.zeros(BATCH, np.int32)), BATCH, shuffle=False,
                         num_classes=CLASSES, dtype="bfloat16" if amp == "bf16" else "float32")
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH).amp(amp)).device("cpu").quiet()
            .model(bp).optimizer(SGD()).total_epochs(1).data(feeder)).compile()
    task.load_torch(_randomize(model))  # the 16-bit working weights are refreshed from the loaded masters
    ref = _torch_logits(model, x)
    # BF16 keeps 8 bits of mantissa to FP16's 11: its logits are ~8x farther from FP32's
    tol = 2e-2 if amp == "fp16" else 8e-2
    np.testing.assert_allclose(task.predict(x), ref, atol=tol * float(np.abs(ref).max()))
    back = task.to_torch(_cnn()[2])  # the FP32 masters out again, unchanged by the 16-bit plan
    for k, w in model.state_dict().items():
        if k.endswith("weight"):  # (the conv bias is not tr's: a BN follows it)
            assert torch.equal(back[k], w), k


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


# --- what shapes cannot show: the layers, and non-finite values ------------------------------------------------

GAP_HWC = (8, 8, 3)
GAP_BP = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2), conv(8, 3, 1, 1), leaky_relu(), gap(), fc(CLASSES))


def _gap_torch(**replace):
    """GAP_BP in torch; ``replace``: module index -> another module (same weight shapes, so only the layer
    comparison can tell)."""
    nn = torch.nn
    layers = [nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2, 2),
              nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.LeakyReLU(0.01), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
              nn.Linear(8, CLASSES)]
    for i, m in replace.items():
        layers[int(i[1:])] = m
    return _randomize(nn.Sequential(*layers))


class _Functional(torch.nn.Module):
    """GAP_BP with its activations and pools as functions in forward (``act``: the second activation)."""

    def __init__(self, act=torch.nn.functional.leaky_relu):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(3, 8, 3, 1, 1), torch.nn.BatchNorm2d(8)
        self.conv2, self.fc = torch.nn.Conv2d(8, 8, 3, 1, 1, bias=False), torch.nn.Linear(8, CLASSES)
        self.act = act

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(self.act(self.conv2(x)).mean((2, 3)))


@pytest.fixture(scope="module")
def gap_task():
    return _task(GAP_BP, GAP_HWC, train_steps=1)


def test_same_layers_load_also_as_functions(gap_task):
    x = _batch(GAP_HWC)
    for model in (_gap_torch(), _randomize(_Functional())):
        load_torch(gap_task, model)
        _close(predict(gap_task, x), _torch_logits(model, x))
        model.load_state_dict(to_torch_state_dict(gap_task, model))
    model = _gap_torch().train()
    load_torch(gap_task, model)
    assert all(m.training for m in model.modules())  # the comparison's eval() run leaves the flags as they were


NN = torch.nn
REFUSED = {  # a change that keeps every weight shape, and what the error says
    "sigmoid for relu": (dict(m2=NN.Sigmoid()),
                         r"torch module '2' \(Sigmoid\) computes sigmoid where tr's layer 'relu' at model\[2\] "
                         r"computes relu"),
    "conv stride": (dict(m0=NN.Conv2d(3, 8, 3, 2, 1)),
                    r"torch module '0' \(Conv2d\) has stride=\(2, 2\) where tr's layer 'conv 8 k3 s1 p1' at "
                    r"model\[0\] has stride=\(1, 1\)"),
    "conv padding": (dict(m4=NN.Conv2d(8, 8, 3, 1, 0, bias=False)),
                     r"torch module '4' \(Conv2d\) has padding=\(0, 0\) where .*model\[4\] has padding=\(1, 1\)"),
    "conv dilation": (dict(m4=NN.Conv2d(8, 8, 3, 1, 2, dilation=2, bias=False)),
                      r"torch module '4' \(Conv2d\) has dilation=\(2, 2\) where .* has dilation=\(1, 1\)"),
    "conv padding mode": (dict(m4=NN.Conv2d(8, 8, 3, 1, 1, bias=False, padding_mode="reflect")),
                          r"torch module '4' \(Conv2d\) has padding_mode='reflect' where .* has padding_mode='zeros'"),
    "maxpool kernel": (dict(m3=NN.MaxPool2d(3, 2)),
                       r"torch module '3' \(MaxPool2d\) has kernel=\(3, 3\) where tr's layer 'maxpool k2 s2 p0' at "
                       r"model\[3\] has kernel=\(2, 2\)"),
    "maxpool ceil_mode": (dict(m3=NN.MaxPool2d(2, 2, ceil_mode=True)), r"'3' \(MaxPool2d\) has ceil_mode=True"),
    "bn eps": (dict(m1=NN.BatchNorm2d(8, eps=1e-3)),
               r"torch module '1' \(BatchNorm2d\) has eps=0.001 where tr's layer 'bn2d' at model\[1\] has eps=1e-05"),
    "bn momentum": (dict(m1=NN.BatchNorm2d(8, momentum=None)), r"'1' \(BatchNorm2d\) has momentum=None"),
    "leaky slope": (dict(m5=NN.LeakyReLU(0.2)), r"'5' \(LeakyReLU\) has negative_slope=0.2 where .* has "
                                                r"negative_slope=0.01"),
    "missing activation": (dict(m2=NN.Identity()),
                           r"torch module '3' \(MaxPool2d\) computes a max pool where tr's layer 'relu' at model\[2\]"),
    "extra activation": (dict(m6=NN.Sequential(NN.ReLU(), NN.AdaptiveAvgPool2d(1))),
                         r"torch module '6.0' \(ReLU\) computes relu where tr's layer 'gap' at model\[6\]"),
    "pool for gap": (dict(m6=NN.AdaptiveMaxPool2d(1)), r"'6' \(AdaptiveMaxPool2d\) computes adaptive_max_pool2d"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_other_layers_are_refused_naming_the_module(gap_task, case):
    change, message = REFUSED[case]
    model = _gap_torch(**change)
    before = gap_task.weights()
    with pytest.raises(ConfigError, match=message):
        load_torch(gap_task, model)
    with pytest.raises(ConfigError, match=message):
        to_torch_state_dict(gap_task, model)
    after = gap_task.weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    load_torch(gap_task, model.state_dict())  # a bare state_dict has no layers: matched by shapes alone


def test_functional_layers_are_compared_too(gap_task):
    with pytest.raises(ConfigError, match=r"the torch model's forward \(_Functional\) computes relu where tr's layer "
                                          r"'leaky_relu' at model\[5\] computes leaky_relu"):
        load_torch(gap_task, _Functional(act=torch.relu))

    class Broken(_Functional):
        def forward(self, x):
            raise RuntimeError("needs a dict")

    with pytest.raises(ConfigError, match=r"could not run on a zero batch .*\[1, 3, 8, 8\]: RuntimeError: needs a dict"
                                          r".*state_dict\(\)"):
        load_torch(gap_task, Broken())


def test_non_finite_weights_are_refused_both_ways(gap_task, tmp_path):
    before = gap_task.weights()
    state = _gap_torch().state_dict()
    state["0.weight"][1, 0, 2, 2] = float("nan")
    with pytest.raises(DataError, match=r"torch tensor '0.weight' holds 1 non-finite value\(s\) \(the first, nan, at "
                                        r"index \(1, 0, 2, 2\)\)"):
        load_torch(gap_task, state)
    state = _gap_torch().state_dict()
    state["8.bias"] = torch.full((CLASSES,), 1e39, dtype=torch.float64)  # past float32: Inf in tr
    with pytest.raises(DataError, match=r"'8.bias' holds 10 non-finite"):
        load_torch(gap_task, state)
    state = _gap_torch().state_dict()
    state["1.running_var"][3] = -0.5
    with pytest.raises(DataError, match=r"'1.running_var' holds a negative variance \(-0.5\)"):
        load_torch(gap_task, state)
    after = gap_task.weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # tr -> torch: an Inf in tr's conv weight
    conv_w = next(i.tensor for i in gap_task.program.inits
                  if i.tensor.region.name in ("param/first_conv", "param/deep_conv"))
    be = gap_task.backend
    saved = be.read(conv_w).copy()
    bad = saved.copy()
    bad.reshape(-1)[5] = np.inf
    be.write(conv_w, bad)
    try:
        with pytest.raises(DataError, match=rf"tr's layer L\d+ \(conv\) tensor '{conv_w.name}' \(for torch's "
                                            r"'0.weight'\) holds 1 non-finite value\(s\) \(the first, inf"):
            to_torch_state_dict(gap_task, _gap_torch().state_dict())
        with pytest.raises(DataError, match="'0.weight'"):
            save_torch(gap_task, _gap_torch(), str(tmp_path / "m.pt"))
        assert not (tmp_path / "m.pt").exists()
    finally:
        be.write(conv_w, saved)


def test_a_model_of_linears_on_flat_rows_is_compared_too():
    """A torch MLP without nn.Flatten takes [n, H*W*C] rows: the comparison runs it on one."""
    task = _task(seq(flatten(), fc(16), relu(), fc(CLASSES)), (4, 4, 1))
    nn = torch.nn
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, CLASSES))
    load_torch(task, model)
    x = _batch((4, 4, 1))
    with torch.no_grad():
        _close(predict(task, x), model.eval()(torch.from_numpy(x.reshape(BATCH, -1))).numpy())
    with pytest.raises(ConfigError, match=r"torch module '1' \(Tanh\) computes tanh where tr's layer 'relu'"):
        load_torch(task, nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, CLASSES)))
    with pytest.raises(ConfigError, match=r"torch module '3' \(Softmax\) computes softmax after tr's last layer"):
        load_torch(task, nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, CLASSES), nn.Softmax(1)))


def test_odd_state_dict_values_are_refused_naming_them_or_converted(gap_task):
    before = gap_task.weights()
    for value, message in (("weights", r"'8.bias' is a str, not a tensor"), ([0.0] * CLASSES, "'8.bias' is a list"),
                           (torch.zeros(CLASSES, dtype=torch.complex64), r"'8.bias' is a torch.complex64 tensor")):
        state = _gap_torch().state_dict()
        state["8.bias"] = value
        with pytest.raises(DTypeError, match=message):
            load_torch(gap_task, state)
    state = _gap_torch().state_dict()
    state["0.bias"] = torch.ones(1)  # the conv bias tr folds into the BN: one per channel, not broadcast
    with pytest.raises(ShapeError, match=r"'0.bias' has shape \(1,\), tr's layer L\d+ \(conv\) folds a conv bias of "
                                         r"shape \(8,\)"):
        load_torch(gap_task, state)
    after = gap_task.weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    half = _gap_torch().to(torch.bfloat16)  # numpy has no bfloat16: loaded through float32, exactly
    load_torch(gap_task, half)
    x = _batch(GAP_HWC)
    _close(predict(gap_task, x), _torch_logits(half.float(), x))
