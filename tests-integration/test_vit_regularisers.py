"""The ViT recipe's regularisers through a compiled task on the CPU backend: examples/models.py's vit_net with
stochastic depth (drop_path, timm's linear decay over depth) and dropout on the attention probabilities.

- vit_net places drop_path(drop_path * i / (depth - 1)) at the end of both residual branches of block i (none in
  block 0) and passes attention_dropout to every attention; with both 0 it is torchvision's model, unchanged;
- a few training steps give the same bytes (losses, weights, the dropout stream) from the same seed, others from
  another seed; with the initial weights held, another dropout stream alone changes the training (the layers draw
  from it), and a model without the regularisers never reads it;
- inference ignores both: the validation step runs the plain model's ops, and predictions equal the plain model's
  from the same weights, without moving the stream;
- a checkpoint carries the stream: an epoch, a save and a resumed epoch give the bytes of two epochs in a row.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.models import vit_net  # noqa: E402
from tr.algo.optimizer import AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import (  # noqa: E402
    add2,
    attention,
    class_token,
    conv,
    fc,
    gelu,
    identity,
    layernorm,
    repeat,
    seq,
    tokens,
)
from tr.graph.compiler import arch_plan  # noqa: E402
from tr.graph.spec import CompileSpec  # noqa: E402
from tr.task.checkpoint import _has_dropout  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

IMAGE, PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES, BATCH, STEPS = 16, 4, 3, 32, 4, 2, 5, 8, 4


def _model(drop_path: float = 0.2, attention_dropout: float = 0.1):
    return vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES, drop_path=drop_path, attention_dropout=attention_dropout)


def _build(seed: int = 7, epochs: int = 1, **model) -> DeepLearningTask:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((STEPS * BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    return (DeepLearningTask(Settings().manual_seed(seed).global_batch_size(BATCH)).device("cpu").quiet()
            .model(_model(**model)).optimizer(AdamW().weight_decay(0.05)).scheduler(ConstantLR().base_lr(2e-3))
            .total_epochs(epochs).data(ArrayFeeder((x, y), None, BATCH, shuffle=True, num_classes=CLASSES)))


def _task(seed: int = 7, **model):
    t = _build(seed, **model).compile()
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


def _stream(task) -> bytes:
    return task.backend.read(task.program.named["dropout_seed"]).tobytes()


def _set_stream(task, value: int) -> None:
    task.backend.write(task.program.named["dropout_seed"], np.array([value], "<u8").view(np.int32).reshape(1, 1, 1, 2))


def _weights(task) -> bytes:
    return b"".join(np.ascontiguousarray(p).tobytes() for ps in task.parameters() for p in ps)


def _trained(seed: int = 7, stream: int | None = None, **model) -> tuple[list[float], bytes, bytes]:
    task, losses = _task(seed, **model)
    if stream is not None:
        _set_stream(task, stream)
    task.run()
    assert len(losses) == STEPS
    return losses, _weights(task), _stream(task)


def test_vit_net_decays_drop_path_linearly_over_depth():
    spec = CompileSpec(input_shape=(IMAGE, IMAGE, 3), num_classes=CLASSES, batch=2)
    layers = arch_plan(vit_net(PATCH, 4, WIDTH, HEADS, MLP, CLASSES, drop_path=0.3, attention_dropout=0.05),
                       spec).layers
    rates = [L.params["p"] for L in layers if L.kind == "drop_path"]
    assert rates == pytest.approx([0.1, 0.1, 0.2, 0.2, 0.3, 0.3])  # blocks 1..3, both branches; not block 0
    assert [L.params["dropout"] for L in layers if L.kind == "attention"] == [0.05] * 4
    # one block: timm's decay over depth is [0]
    assert not [L for L in arch_plan(vit_net(PATCH, 1, WIDTH, HEADS, MLP, CLASSES, drop_path=0.3), spec).layers
                if L.kind == "drop_path"]
    # the defaults are torchvision's model, the BluePrint written before the regularisers existed
    attend = seq(layernorm(1e-6), conv(3 * WIDTH, 1, bias=True), attention(HEADS), conv(WIDTH, 1, bias=True))
    mlp = seq(layernorm(1e-6), conv(MLP * WIDTH, 1, bias=True), gelu(), conv(WIDTH, 1, bias=True))
    before = seq(conv(WIDTH, PATCH, PATCH, bias=True), tokens(),
                 repeat(seq(add2(identity(), attend), add2(identity(), mlp)), DEPTH), layernorm(1e-6), class_token(),
                 fc(CLASSES))
    assert repr(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES)) == repr(before)


def test_training_is_reproducible_from_the_seed_and_draws_from_the_dropout_stream():
    first = _trained()
    assert first == _trained()  # losses, weights and the stream: the same bytes
    other_seed = _trained(seed=8)
    assert other_seed[0] != first[0] and other_seed[1] != first[1]
    # the same initial weights, another stream: the regularisers draw other masks
    task, _ = _task()
    start = _stream(task)
    moved = _trained(stream=12345)
    assert moved[0][0] != first[0][0] and moved[1] != first[1]
    # without them nothing reads the stream: it neither moves nor changes the training
    plain = _trained(drop_path=0.0, attention_dropout=0.0)
    plain_moved = _trained(stream=12345, drop_path=0.0, attention_dropout=0.0)
    assert plain[:2] == plain_moved[:2] and plain[2] == start
    assert plain[1] != first[1]


def test_inference_ignores_both():
    reg, _ = _task()
    plain, _ = _task(drop_path=0.0, attention_dropout=0.0)
    val_ops = [[(c.op, dict(c.attrs)) for c in t.program.steps["val_a"].calls] for t in (reg, plain)]
    assert val_ops[0] == val_ops[1]  # the plain model's inference ops
    train_ops = {c.op for c in reg.program.steps["train_a"].calls}
    assert {"drop_path_fwd", "drop_path_bwd"} <= train_ops
    assert _has_dropout(reg.program) and not _has_dropout(plain.program)  # (a checkpoint's rank streams)
    assert _weights(reg) == _weights(plain)  # the same initial weights (no parameter in either regulariser)
    x = np.random.default_rng(2).standard_normal((BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
    stream = _stream(reg)
    assert reg.predict(x).tobytes() == plain.predict(x).tobytes()
    assert _stream(reg) == stream  # inference draws nothing
    reg.run()
    after = reg.predict(x)
    assert after.tobytes() == reg.predict(x).tobytes() and _stream(reg) != stream


def test_a_resumed_run_continues_the_stream(tmp_path):
    straight = _build(epochs=2).compile()
    straight.run()
    first = _build(epochs=2).compile()
    first.run(1)
    first.save(tmp_path / "ck")
    resumed = _build(epochs=2).resume(tmp_path / "ck")
    resumed.run()
    assert _weights(resumed) == _weights(straight) and _stream(resumed) == _stream(straight)
