"""A small Vision Transformer (examples/models.py's vit_net: patch embedding, class token, position embedding,
pre-norm encoder blocks of multi-head attention and a GELU MLP, final LayerNorm, class-token head) on the CPU
backend against torchvision's VisionTransformer of the same sizes, from tr's initial weights copied into torch
(tr.task.torch_io; the gradients compared tensor by tensor in torch's layout):

- the parameter count is torchvision's (and vit_b_16's is torchvision's 86,567,656);
- the first step's loss and every weight gradient (read as (w0 - w1) / lr after one plain-SGD step) against torch
  in float64, held to torch FP32's own distance from float64 (3x, plus 1e-6 of the tensor's norm);
- 50 momentum-SGD steps: tr's losses against torch float64 within 3x torch FP32's distance from it.
Measured (CPU, 2026-12-05): the first step's worst gradient 1.09e-5 from float64 relative (torch FP32: 1.10e-5),
the 50 steps' worst loss 2.5e-6 from float64 (torch FP32: 2.4e-6).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.models import vit_b_16, vit_net  # noqa: E402
from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.compiler import arch_plan  # noqa: E402
from tr.graph.spec import CompileSpec  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402
from tr.task.torch_io import to_torch_state_dict  # noqa: E402

torchvision = pytest.importorskip("torchvision")
IMAGE, PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES, BATCH, LR = 16, 4, 2, 32, 4, 2, 5, 4, 0.05


def _twin():
    return torchvision.models.VisionTransformer(image_size=IMAGE, patch_size=PATCH, num_layers=DEPTH,
                                                num_heads=HEADS, hidden_dim=WIDTH, mlp_dim=MLP * WIDTH,
                                                num_classes=CLASSES)


def _to_torch(task, *tms) -> dict[str, np.ndarray]:
    """tr's weights into the torch models (of any dtype); returns them by torch's name, in float64."""
    state = to_torch_state_dict(task, tms[0])
    for tm in tms:
        tm.load_state_dict(state)
    return _weights(state)


def _weights(state) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy() for k, v in state.items()}


def _data(steps: int):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((steps * BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, steps * BATCH).astype(np.int32)
    return x, y


def _task(steps: int, momentum: float):
    x, y = _data(steps)
    t = (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
         .model(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES)).optimizer(SGD().momentum(momentum))
         .scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(ArrayFeeder((x, y), None, BATCH, shuffle=False,
                                                                               num_classes=CLASSES))).compile()
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses, x, y


def _torch_run(tm, x, y, steps, momentum, dtype) -> list[float]:
    tm = tm.to(dtype)
    opt = torch.optim.SGD(tm.parameters(), lr=LR, momentum=momentum)
    out = []
    for k in range(steps):
        xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH]).to(dtype).permute(0, 3, 1, 2)
        yb = torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(xb), yb)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def test_the_parameter_counts_are_torchvisions():
    spec = CompileSpec(input_shape=(IMAGE, IMAGE, 3), num_classes=CLASSES, batch=2)
    assert arch_plan(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES), spec).num_params == sum(
        p.numel() for p in _twin().parameters())
    big = arch_plan(vit_b_16.root, CompileSpec(input_shape=(224, 224, 3), num_classes=1000, batch=2))
    assert big.num_params == 86_567_656  # torchvision.models.vit_b_16


def test_the_first_step_is_torchs():
    task, losses, x, y = _task(1, 0.0)
    tm64, tm32 = _twin(), _twin()
    w0 = _to_torch(task, tm64, tm32)
    task.run()
    l64 = _torch_run(tm64, x, y, 1, 0.0, torch.float64)
    l32 = _torch_run(tm32, x, y, 1, 0.0, torch.float32)
    assert abs(losses[0] - l64[0]) <= 3 * abs(l32[0] - l64[0]) + 1e-6
    w_tr = _weights(to_torch_state_dict(task, _twin()))
    w64, w32 = _weights(tm64.state_dict()), _weights(tm32.state_dict())
    assert w0.keys() == w_tr.keys() == w64.keys() and len(w0) == 4 + 12 * DEPTH + 4
    for k in w0:
        a, b, c = ((w0[k] - w[k]) / LR for w in (w_tr, w64, w32))
        ref = np.linalg.norm(b)
        assert ref > 0, k
        assert np.linalg.norm(a - b) <= 3 * np.linalg.norm(c - b) + 1e-6 * ref + 1e-7, (k, np.linalg.norm(a - b), ref)


def test_50_steps_follow_torch():
    task, losses, x, y = _task(50, 0.9)
    tm64, tm32 = _twin(), _twin()
    _to_torch(task, tm64, tm32)
    task.run()
    l64 = np.array(_torch_run(tm64, x, y, 50, 0.9, torch.float64))
    l32 = np.array(_torch_run(tm32, x, y, 50, 0.9, torch.float32))
    ours, theirs = np.abs(np.array(losses) - l64), np.abs(l32 - l64)
    print("tr vs float64", ours.max(), "torch FP32 vs float64", theirs.max())
    assert ours.max() <= 3 * theirs.max() + 1e-6


def test_the_mnist_demo_compiles_with_the_vit_recipe():
    """examples/vit_mnist.py (5 epochs reach 97.19 % on the CPU: benchmarks/RESULTS.md) builds its task: AdamW with
    the tokens undecayed, warm-up and cosine, label smoothing, global-norm clipping."""
    sys.path.insert(0, str(ROOT / "examples"))
    import vit_mnist

    task = vit_mnist.build(1, workers=1).compile()
    assert task.program.variants["train"].batch == 128
    ops = {c.op for s in task.program.steps.values() for c in s.calls}
    assert {"attention_fwd", "tokens_fwd", "token_pick_fwd", "clip_grad_norm"} <= ops
    task.feeder.close()
