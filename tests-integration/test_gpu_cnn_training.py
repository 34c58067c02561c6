"""VGG16-BN and ResNet-50 (examples/models.py, 10 classes) trained for 20 steps on the CUDA backend against the
CPU backend from the same weights and batches at a small resolution, FP32 and AMP, and byte-identical reruns on
the GPU. GPU-only (skipped without a device).

Tolerances: the losses of the two backends agree within 1e-3 relative in FP32 (cuDNN's convolutions and
numpy's sum in different orders, and BN renormalises every layer) and 3e-2 in AMP (FP16 activations rounded
at different points); the weights after 20 SGD steps within 2e-3 (FP32) and 2e-2 (AMP) of their scale.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import FC, BluePrint, fc, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
STEPS, BATCH, RES, CLASSES = 20, 4, 32, 10
LR = 1e-4  # small: 20 steps of a deep net on random labels stay near-linear, so rounding does not grow chaotically


def _model(name):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.models import MODELS

    layers = MODELS[name].root.layers
    assert isinstance(layers[-1], FC)
    return BluePrint(seq(*layers[:-1], fc(CLASSES)), name=name, num_classes=CLASSES)


def _task(name, device, amp):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((STEPS * BATCH, RES, RES, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    dt = np.float16 if amp else np.float32
    feeder = ArrayFeeder((x.astype(dt), y), None, BATCH, shuffle=False, num_classes=CLASSES, dtype=dt)
    s = Settings().manual_seed(11).global_batch_size(BATCH).amp(amp)
    t = (DeepLearningTask(s).device(device).quiet().model(_model(name))
         .optimizer(SGD().momentum(0.9).nesterov(True).weight_decay(1e-4))
         .scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(feeder))
    losses = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50"])
def test_cnn_cuda_matches_cpu_over_20_steps(name, amp):
    cpu, lc = _task(name, "cpu", amp)
    gpu, lg = _task(name, "cuda", amp)
    cpu.compile().run()
    gpu.compile().run()
    assert gpu.backend.name == "cuda" and len(lg) == len(lc) == STEPS
    assert np.all(np.isfinite(lg))
    np.testing.assert_allclose(lg, lc, rtol=3e-2 if amp else 1e-3, atol=1e-4)
    for pc, pg in zip(cpu.parameters(), gpu.parameters()):
        for a, b in zip(pc, pg):
            scale = max(1.0, float(np.abs(a).max()))
            assert float(np.abs(a - b).max()) <= (2e-2 if amp else 2e-3) * scale


@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50"])
def test_two_cuda_runs_are_byte_identical(name):
    a, la = _task(name, "cuda", amp=True)
    b, lb = _task(name, "cuda", amp=True)
    a.compile().run()
    b.compile().run()
    assert la == lb
    wa, wb = a.weights(), b.weights()
    assert all(wa[k].tobytes() == wb[k].tobytes() for k in wa)
