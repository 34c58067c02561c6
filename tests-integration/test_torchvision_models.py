"""MobileNetV2 and EfficientNet-B0 (examples/models.py: depthwise convs, linear bottlenecks, identity skips;
EfficientNet's squeeze-excitation and SiLU) against torchvision.models.mobilenet_v2 / efficientnet_b0 from
identical weights and batches, tr on the CPU backend in float32.

These nets are badly conditioned in float32 at test sizes (BN over 4-16 values in the last stages): torch's own
float32 run leaves its float64 run by 1e-2 in some layers' first gradients and by 10-20 % in the loss within
50 steps (MobileNetV2, measured at 32-96 px, batch 4-16). So tr is held to torch's float32 accuracy, both
measured against torch's float64 run: the first step's gradients, layer by layer, and the 50 steps' losses.
How far each float32 run lands depends on the batch and on the CPU's kernels (OpenBLAS's and oneDNN's blocking):
on an AVX-512 EPYC, over the batches of data seeds 0-4, tr's worst layer was 0.68-2.94x torch's for EfficientNet-B0
(0.05-1.78x for MobileNetV2), tr the closer of the two on 2 of 5; this test's batch (seed 3) gives the 2.94x
(0.0118 against 0.0040, a pointwise conv of the last stage), within 2x on the first machines. Hence a bound of
4x on the worst layer beside 3x on the median: a factor that rounding alone moves, not a loss of accuracy.
EfficientNet-B0 is torchvision's with stochastic_depth_prob=0, tr's default (its stochastic depth:
test_cnn_stochastic_depth.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import BluePrint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models import efficientnet_b0_net, mobilenet_v2_net  # noqa: E402

STEPS, BATCH, RES, CLASSES, LR = 50, 4, 32, 10, 0.01
NETS = {  # name: (tr's layers, torchvision's model, parameter modules)
    "mobilenet_v2": (lambda: mobilenet_v2_net(CLASSES, dropout_p=0.0),
                     lambda: torchvision.models.mobilenet_v2(num_classes=CLASSES, dropout=0.0), 105),
    "efficientnet_b0": (lambda: efficientnet_b0_net(CLASSES, dropout_p=0.0),
                        lambda: torchvision.models.efficientnet_b0(num_classes=CLASSES, dropout=0.0,
                                                                   stochastic_depth_prob=0.0), 131),
}


def _param_modules(tm):
    return [m for m in tm.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.Linear))]


def _load(tm, params, count: int) -> None:
    mods = _param_modules(tm)
    assert len(mods) == len(params) == count
    with torch.no_grad():
        for m, p in zip(mods, params):
            if isinstance(m, torch.nn.Conv2d):  # KRSC [K, R, S, C/g] -> [K, C/g, R, S]; an se's fc [K,1,1,C] too
                m.weight.copy_(torch.from_numpy(p[0].transpose(0, 3, 1, 2).copy()))
                if m.bias is not None:  # torchvision's squeeze-excitation: 1x1 convs with bias = tr's fcs
                    m.bias.copy_(torch.from_numpy(p[1].reshape(-1)))
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.from_numpy(p[0].reshape(-1)))
                m.bias.copy_(torch.from_numpy(p[1].reshape(-1)))
            else:
                m.weight.copy_(torch.from_numpy(p[0].reshape(m.out_features, m.in_features)))
                m.bias.copy_(torch.from_numpy(p[1].reshape(-1)))


def _data(steps: int):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((steps * BATCH, RES, RES, 3)).astype(np.float32)
    return x, rng.integers(0, CLASSES, steps * BATCH).astype(np.int32)


def _task(name, x, y, opt, lr):
    bp = BluePrint(NETS[name][0](), name=f"{name}_32", input_shape=(RES, RES, 3), num_classes=CLASSES)
    return (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device("cpu").quiet()
            .model(bp).optimizer(opt).scheduler(ConstantLR().base_lr(lr)).total_epochs(1)
            .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES))).compile()


def _torch(name, dtype, params):
    tm = NETS[name][1]().to(dtype)
    _load(tm, params, NETS[name][2])
    return tm.train()


def _loss(tm, x, y, k, dtype):
    xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH]).to(dtype).permute(0, 3, 1, 2)
    return torch.nn.functional.cross_entropy(tm(xb), torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long())


@pytest.mark.parametrize("name", list(NETS))
def test_first_step_gradients_are_as_close_to_float64_as_torch_float32(name):
    x, y = _data(1)
    task = _task(name, x, y, SGD().momentum(0.0), 1.0)  # plain SGD, lr 1: the update is the gradient
    start = [tuple(a.copy() for a in p) for p in task.parameters()]
    task.run()
    tr_grads = [s[0] - e[0] for s, e in zip(start, task.parameters())]
    grads = {}
    for dt in (torch.float64, torch.float32):
        tm = _torch(name, dt, start)
        _loss(tm, x, y, 0, dt).backward()
        grads[dt] = [m.weight.grad.double().numpy() for m in _param_modules(tm)]
    errs_tr, errs_32 = [], []
    for m, g_tr, g64, g32 in zip(_param_modules(tm), tr_grads, grads[torch.float64], grads[torch.float32]):
        g_tr = g_tr.transpose(0, 3, 1, 2) if isinstance(m, torch.nn.Conv2d) else g_tr.reshape(g64.shape)
        scale = np.abs(g64).max()
        errs_tr.append(np.abs(g_tr - g64).max() / scale)
        errs_32.append(np.abs(g32 - g64).max() / scale)
    assert max(errs_tr) <= 4 * max(errs_32), (max(errs_tr), max(errs_32))  # (the CPU's kernels: the docstring)
    assert np.median(errs_tr) <= 3 * np.median(errs_32) + 1e-6, (np.median(errs_tr), np.median(errs_32))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETS))
def test_50_steps_stay_within_torch_float32_s_distance_from_float64(name):
    x, y = _data(STEPS)
    task = _task(name, x, y, SGD().momentum(0.9), LR)
    start = [tuple(a.copy() for a in p) for p in task.parameters()]
    losses: list[float] = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    ref = {}
    for dt in (torch.float64, torch.float32):
        tm = _torch(name, dt, start)
        opt = torch.optim.SGD(tm.parameters(), lr=LR, momentum=0.9)
        ref[dt] = []
        for k in range(STEPS):
            opt.zero_grad()
            loss = _loss(tm, x, y, k, dt)
            loss.backward()
            opt.step()
            ref[dt].append(loss.item())
    tr_, f64, f32 = np.array(losses), np.array(ref[torch.float64]), np.array(ref[torch.float32])
    dev_tr, dev_32 = np.abs(tr_ - f64) / f64, np.abs(f32 - f64) / f64
    assert dev_tr[0] <= 4 * dev_32[0] + 1e-5, (dev_tr[0], dev_32[0])  # the forward from the same weights
    assert dev_tr.max() <= 4 * dev_32.max() + 1e-3, (dev_tr.max(), dev_32.max())
    assert np.isfinite(task.parameters()[0][0]).all()
