"""The residual joins fused into the layernorms after them and the skip paths' gradients into the layernorms'
backward (tr.graph.passes.fuse_add_norm, LayerKind.adds_input_gradient) change no bit of a ViT's training: the fused
plan (no add_fwd, no accumulate) trains to the unfused plan's losses and weights byte for byte, in FP32 and under
FP16 and BF16 AMP, with stochastic depth and attention dropout drawing from the stream; on the CPU backend here, and
on CUDA in the gpu-marked test (the fused kernels compute the unfused ones' float operations in the same order). The
unfused plan is what the compiler emitted before the fusion: the pass and the kind's hook switched off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import tr.graph.passes as passes  # noqa: E402
from examples.models import vit_net  # noqa: E402
from tr.algo.optimizer import AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.layers.layernorm import LayerNormKind  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

IMAGE, PATCH, DEPTH, WIDTH, HEADS, CLASSES, BATCH, STEPS = 16, 4, 2, 32, 4, 5, 4, 6
FEED = {None: np.float32, "fp16": "float16", "bf16": "bfloat16"}


def _train(device: str, amp: str | None, fused: bool, monkeypatch, **model) -> tuple[list[float], dict, list[str]]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((STEPS * BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    s = Settings().manual_seed(7).global_batch_size(BATCH)
    if amp:
        s = s.amp(amp)
    if amp == "fp16":  # (test_vit_amp_vs_torch.py says why 1024)
        s = s.loss_scaling("dynamic", init=1024)
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(passes, "fuse_add_norm", lambda layers: list(layers))
            m.setattr(LayerNormKind, "adds_input_gradient", lambda self, layer: False)
        t = (DeepLearningTask(s).device(device).quiet()
             .model(vit_net(PATCH, DEPTH, WIDTH, HEADS, 2, CLASSES, **model))
             .optimizer(AdamW().weight_decay(0.05)).scheduler(ConstantLR().base_lr(1e-3)).total_epochs(1)
             .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES, dtype=FEED[amp])))
        t.compile()
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    t.run()
    return losses, t.weights(), [c.op for c in t.program.steps["train_a"].calls]


@pytest.mark.parametrize("amp", [None, "fp16", "bf16"], ids=["fp32", "fp16", "bf16"])
def test_the_fused_vit_trains_to_the_unfused_bytes_on_the_cpu(amp, monkeypatch):
    model = {"drop_path": 0.1, "attention_dropout": 0.1} if amp == "bf16" else {}
    lf, wf, ops_f = _train("cpu", amp, True, monkeypatch, **model)
    lu, wu, ops_u = _train("cpu", amp, False, monkeypatch, **model)
    assert len(ops_f) == len(ops_u) - 4 * DEPTH and "add_fwd" not in ops_f and "accumulate" not in ops_f
    assert len(lf) == STEPS and np.all(np.isfinite(lf)) and lf == lu
    assert wf.keys() == wu.keys()
    assert [k for k in wf if wf[k].tobytes() != wu[k].tobytes()] == []


@pytest.mark.gpu
@pytest.mark.parametrize("amp", [None, "bf16"], ids=["fp32", "bf16"])
def test_the_fused_vit_trains_to_the_unfused_bytes_on_cuda(amp, monkeypatch):
    lf, wf, _ = _train("cuda", amp, True, monkeypatch)
    lu, wu, _ = _train("cuda", amp, False, monkeypatch)
    assert lf == lu
    assert [k for k in wf if wf[k].tobytes() != wu[k].tobytes()] == []
