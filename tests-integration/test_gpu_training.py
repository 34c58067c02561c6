"""The MLP trained by DeepLearningTask on the CUDA backend against the CPU backend (same plan, same batches),
and determinism on the GPU. GPU-only (skipped without a device).

Tolerances: FP32 losses agree within 1e-4 relative over 50 steps (cuBLASLt and numpy BLAS sum in
different orders); AMP losses within 2e-2 relative (FP16 activations, different rounding points).
Final weights: AdamW moves an element by up to lr per step whatever its gradient's size, so elements whose
gradients are at rounding level can drift apart by a fraction of lr x steps (5e-2 here). Measured on the
H200: at most 5.3e-5 (FP32) on 5 of 24,576 elements and 7.2e-3 (AMP) on 1 of 32,768; bounds: 2e-4 (FP32) and
1e-2 (AMP) absolute. Validation top-1 of the two backends agrees within 1 % (500 samples).
"""

import numpy as np
import pytest

from tr.algo.optimizer import AdamW
from tr.algo.scheduler import CosineAnnealingLR
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

pytestmark = pytest.mark.gpu
STEPS, BATCH, IN, CLASSES = 50, 64, 96, 10


def _task(device, amp=False):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * BATCH, 1, 1, IN)).astype(np.float32)
    y = (x.reshape(-1, IN) @ rng.standard_normal((IN, CLASSES))).argmax(1).astype(np.int32)
    dt = np.float16 if amp else np.float32
    feeder = ArrayFeeder((x.astype(dt), y), (x[:500].astype(dt), y[:500]), BATCH, shuffle=False,
                         num_classes=CLASSES, dtype=dt)
    s = Settings().manual_seed(9).global_batch_size(BATCH).amp(amp)
    t = (DeepLearningTask(s).device(device).quiet()
         .model(seq(fc(256, True), relu(), fc(128, True), relu(), fc(CLASSES, True)))
         .optimizer(AdamW().weight_decay(1e-4)).scheduler(CosineAnnealingLR().base_lr(1e-3).step_by_batch())
         .total_epochs(1).data(feeder))
    losses = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


@pytest.fixture(scope="module")
def cuda_amp_run():
    """The AMP run on CUDA that both tests below check (against the CPU, and as the first of the two runs that
    must be byte-identical): the task, its losses and its result, run once."""
    gpu, lg = _task("cuda", True)
    return gpu, lg, gpu.compile().run()


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_cuda_matches_cpu_over_50_steps(amp, request):
    cpu, lc = _task("cpu", amp)
    rc = cpu.compile().run()
    if amp:
        gpu, lg, rg = request.getfixturevalue("cuda_amp_run")
    else:
        gpu, lg = _task("cuda", amp)
        rg = gpu.compile().run()
    assert gpu.backend.name == "cuda" and len(lg) == len(lc) == STEPS
    rel = 2e-2 if amp else 1e-4
    np.testing.assert_allclose(lg, lc, rtol=rel, atol=1e-4)
    for (wc, *_), (wg, *_) in zip(cpu.parameters(), gpu.parameters()):
        np.testing.assert_allclose(wg, wc, rtol=0, atol=1e-2 if amp else 2e-4)
    assert abs(rg.best_top1 - rc.best_top1) <= 0.01


def test_two_cuda_runs_are_byte_identical(cuda_amp_run):
    a = cuda_amp_run[0]
    b, _ = _task("cuda", amp=True)
    b.compile().run()
    wa, wb = a.weights(), b.weights()
    assert all(wa[k].tobytes() == wb[k].tobytes() for k in wa)
