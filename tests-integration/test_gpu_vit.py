"""ViT-B/16 (examples/models.py: torchvision's vit_b_16 layer for layer, 10 classes) on the CUDA backend against the
CPU backend at 32x32 (2x2 patches and the class token: 5 tokens, not a multiple of 8), batch 2, AdamW as the ViT
recipe has it. GPU-only.

Unlike the CNNs (test_gpu_cnn_training.py) a ViT's forward takes no relu or max-pool decision and normalises each
token over its 768 features, not a batch over a few values, so rounding does not tip it: FP32 is held over all 20
steps (every loss within 1e-3 of the CPU's, relative), not at the first loss only. BF16 (cuDNN's SDPA attention,
its deterministic backward) is held as test_gpu_bf16.py holds the CNNs: the first loss within twice BF16's own
spread on the CPU (the nearest and two random BF16 roundings of the images) plus 1 %, every loss finite; two CUDA
runs give the same bytes. The bounds are first choices (written 2026-12-05 without a GPU); the first GPU run
prints the measured differences.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests-integration"))
from test_gpu_cnn_training import bf16_rounded_at_random  # noqa: E402

from examples.models import vit_net  # noqa: E402
from tr.algo.optimizer import AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.bf16 import round_bf16  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import BluePrint  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

pytestmark = pytest.mark.gpu

RES, BATCH, CLASSES, STEPS, LR = 32, 2, 10, 20, 1e-5  # (1e-4: AdamW's loss 3.2, 4.0, 11.6 in 3 steps on the CPU)


def _task(device: str, amp: str | None, steps: int = STEPS, bf16_images: bool = False, rounding_seed=None):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((steps * BATCH, RES, RES, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, steps * BATCH).astype(np.int32)
    if bf16_images:  # an FP32 run on the BF16 run's images
        x = round_bf16(x)
    if rounding_seed is not None:
        x = bf16_rounded_at_random(x, rounding_seed)
    s = Settings().manual_seed(11).global_batch_size(BATCH)
    if amp:
        s = s.amp(amp)
    model = BluePrint(vit_net(16, 12, 768, 12, num_classes=CLASSES), name="vit_b_16", num_classes=CLASSES)
    t = (DeepLearningTask(s).device(device).quiet().model(model)
         .optimizer(AdamW().weight_decay(0.05)).scheduler(ConstantLR().base_lr(LR)).total_epochs(1)
         .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES,
                           dtype="bfloat16" if amp == "bf16" else "float32")))
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


def test_vit_b_16_cuda_follows_the_cpu_over_20_steps_in_fp32():
    cpu, lc = _task("cpu", None)
    gpu, lg = _task("cuda", None)
    cpu.compile().run()
    gpu.compile().run()
    assert gpu.backend.name == "cuda" and len(lg) == len(lc) == STEPS
    rel = np.abs(np.array(lg) - lc) / np.abs(lc)
    print("vit_b_16 FP32: relative loss differences by step", np.round(rel, 6).tolist())
    assert np.all(rel <= 1e-3), rel.tolist()
    wc, wg = cpu.weights(), gpu.weights()
    worst = max((float(np.linalg.norm(wg[k] - wc[k]) / max(np.linalg.norm(wc[k]), 1e-30)), k) for k in wc)
    print("vit_b_16 FP32: the weights after 20 steps, worst relative difference", worst)


def test_vit_b_16_bf16_first_loss_is_within_bf16s_spread_and_every_loss_finite():
    steps = 3
    gpu, lg = _task("cuda", "bf16", steps)
    cpu, lc = _task("cpu", "bf16", steps)
    ref, lf = _task("cpu", None, steps, bf16_images=True)
    run_g = gpu.compile().run()
    cpu.compile().run()
    ref.compile().run()
    assert np.all(np.isfinite(lg)) and run_g.skipped_steps == 0
    spread = abs(lc[0] - lf[0])
    for seed in range(2):
        t, losses = _task("cpu", "bf16", 1, rounding_seed=seed)
        t.compile().run()
        spread = max(spread, abs(losses[0] - lf[0]))
    print("vit_b_16 BF16 first loss: GPU", lg[0], "CPU", lc[0], "FP32", lf[0], "spread", spread)
    assert abs(lg[0] - lf[0]) <= 2 * spread + 1e-2 * abs(lf[0]), (lg[0], lc[0], lf[0], spread)


def test_two_cuda_bf16_vit_runs_are_byte_identical():
    a, la = _task("cuda", "bf16", 5)
    b, lb = _task("cuda", "bf16", 5)
    a.compile().run()
    b.compile().run()
    assert la == lb
    wa, wb = a.weights(), b.weights()
    assert [k for k in wa if wa[k].tobytes() != wb[k].tobytes()] == []
