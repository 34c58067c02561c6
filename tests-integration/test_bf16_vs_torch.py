"""BF16 AMP (settings.amp("bf16")) on the CPU backend against torch's bfloat16 autocast (torch.autocast("cpu",
dtype=torch.bfloat16), FP32 parameters, no GradScaler), from identical weights and batches, for a small BN CNN, a
small residual net and an MLP:

- the first step's loss is torch's, and its weight gradients (read as (w0 - w1) / lr after one plain-SGD step) are
  torch's within BF16 rounding (1.5 % relative L2 a tensor: both round the same activations to BF16 at slightly
  different points, e.g. torch's autocast keeps BN's output in FP32 where tr rounds it);
- over 20 momentum-SGD steps the losses follow torch's (2 % relative a step) and tr's BF16 weights are no farther
  from an FP32 run than torch's BF16 weights are from theirs (1.5x and 1e-4: BF16's error, not a larger one);
- the plan really is BF16 (activations and working copies BF16, masters FP32, no loss scale, no loss-scale op),
  two runs are byte-identical, and a non-finite step is skipped with the weights untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cnn_resnet_vs_torch import BATCH, CLASSES, _cnn, _data, _load, _param_modules, _resnet  # noqa: E402

from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.dtype import DType  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import fc, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

STEPS, LR = 20, 0.05


def _mlp():
    bp = seq(fc(16), relu(), fc(CLASSES))
    tm = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 3, 16), torch.nn.ReLU(),
                             torch.nn.Linear(16, CLASSES))
    return bp, tm


MODELS = {"cnn": _cnn, "resnet": _resnet, "mlp": _mlp}


def _task(bp, x, y, amp, momentum: float = 0.9, steps: int = STEPS):
    feeder = ArrayFeeder((x[:steps * BATCH], y[:steps * BATCH]), None, BATCH, shuffle=False, num_classes=CLASSES,
                         dtype={"bf16": "bfloat16", True: "float16", False: "float32"}[amp])
    s = Settings().manual_seed(7).global_batch_size(BATCH).amp(amp)
    return (DeepLearningTask(s).device("cpu").quiet().model(bp).optimizer(SGD().momentum(momentum))
            .scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(feeder)).compile()


def _train(task) -> list[float]:
    losses: list[float] = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    return losses


def _torch_run(tm, x, y, bf16: bool, momentum: float = 0.9, steps: int = STEPS) -> list[float]:
    opt = torch.optim.SGD(tm.parameters(), lr=LR, momentum=momentum)
    tm.train()
    out = []
    for k in range(steps):
        xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH])
        yb = torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = tm(xb.to(torch.bfloat16) if bf16 else xb)
        loss = torch.nn.functional.cross_entropy(logits.float(), yb)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _weights(tm) -> list[np.ndarray]:
    """The torch model's weights in tr's layouts (KRSC convs, [in, out] FCs flattened as tr's)."""
    out = []
    for kind, m in _param_modules(tm):
        w = m.weight.detach().double().numpy()
        out.append(w.transpose(0, 2, 3, 1) if kind == "conv" else w)
    return out


def _tr_weights(task, tm) -> list[np.ndarray]:
    out = []
    for (kind, m), p in zip(_param_modules(tm), task.parameters()):
        out.append(p[0].astype(np.float64) if kind == "conv" else p[0].reshape(m.weight.shape).astype(np.float64))
    return out


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_first_step_is_torchs_bf16_autocast_step(name):
    bp, tm = MODELS[name]()
    x, y = _data()
    task = _task(bp, x, y, "bf16", momentum=0.0, steps=1)
    _load(tm, task.parameters())
    w0 = _weights(tm)
    losses = _train(task)
    theirs = _torch_run(tm, x, y, True, momentum=0.0, steps=1)
    assert losses[0] == pytest.approx(theirs[0], rel=2e-3)
    g_tr = [(a - b) / LR for a, b in zip(w0, _tr_weights(task, tm))]
    g_torch = [(a - b) / LR for a, b in zip(w0, _weights(tm))]
    for k, (a, b) in enumerate(zip(g_tr, g_torch)):
        assert np.linalg.norm(b) > 0, k
        assert _rel(a, b) < 1.5e-2, (k, _rel(a, b))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_20_steps_follow_torch_and_stay_as_close_to_fp32_as_torchs_bf16(name):
    make = MODELS[name]
    x, y = _data()
    runs = {}
    for amp in ("bf16", False):
        bp, tm = make()
        task = _task(bp, x, y, amp)
        _load(tm, task.parameters())
        losses = _train(task)
        theirs = _torch_run(tm, x, y, amp == "bf16")
        runs[amp] = (_tr_weights(task, tm), _weights(tm), losses, theirs)
    tr16, torch16, losses, theirs = runs["bf16"]
    np.testing.assert_allclose(losses, theirs, rtol=2e-2)
    tr32, torch32 = runs[False][:2]
    for k in range(len(tr16)):
        ours, their = _rel(tr16[k], tr32[k]), _rel(torch16[k], torch32[k])
        assert their > 0, k  # BF16 moved torch's weights: the comparison is not vacuous
        assert ours <= 1.5 * their + 1e-4, (k, ours, their)


def test_the_plan_is_bf16_without_a_loss_scale():
    bp, _ = _cnn()
    x, y = _data()
    task = _task(bp, x, y, "bf16")
    t = {d.name: d for d in task.program.tensors}
    assert t["data_a"].dtype is DType.BF16 and t["L0.w"].dtype is DType.FP32 and t["L0.w.grad"].dtype is DType.FP32
    assert t["L0.w.bf16"].dtype is DType.BF16 and "L0.w.fp16" not in t
    assert t["L0.w.grad16"].dtype is DType.BF16
    ops = {c.op for step in task.program.steps.values() for c in step.calls}
    assert "loss_scale_update" not in ops and "range_check_finite" in ops
    assert "loss_scale_tracker" not in t
    assert float(task.backend.read(t["loss_scale"]).reshape(-1)[0]) == 1.0
    fp16 = {d.name: d for d in _task(bp, x, y, True).program.tensors}  # amp(True): FP16 with its loss scale
    assert fp16["L0.w.fp16"].dtype is DType.FP16 and fp16["data_a"].dtype is DType.FP16


def test_two_bf16_runs_are_byte_identical():
    x, y = _data()
    out = []
    for _ in range(2):
        bp, _ = _resnet()
        task = _task(bp, x, y, "bf16")
        _train(task)
        out.append([a.tobytes() for p in task.parameters() for a in p])
    assert out[0] == out[1]


def test_a_non_finite_bf16_step_is_skipped():
    bp, tm = _mlp()
    x, y = _data()
    x = x.copy()
    x[2 * BATCH] = np.inf  # step 2's batch overflows
    task = _task(bp, x, y, "bf16", steps=3)
    before: list = []
    task.on_step(lambda k, r: before.append([a.copy() for p in task.parameters() for a in p]) if k == 1 else None)
    task.run()
    after = [a for p in task.parameters() for a in p]
    assert all(np.array_equal(a, b) for a, b in zip(before[0], after))


def test_bf16_refuses_a_loss_scale_and_a_float16_feeder():
    bp, _ = _mlp()
    x, y = _data()
    s = Settings().global_batch_size(BATCH).amp("bf16").loss_scaling("static")
    with pytest.raises(ConfigError, match=r"settings\.loss_scaling\(\): BF16 AMP has no loss scale"):
        (DeepLearningTask(s).device("cpu").quiet().model(bp).optimizer(SGD()).total_epochs(1)
         .data(ArrayFeeder((x, y), None, BATCH, dtype="bfloat16", num_classes=CLASSES))).compile()
    s = Settings().global_batch_size(BATCH).amp("bf16")
    with pytest.raises(ConfigError, match="ArrayFeeder stages FP16 samples, but settings.amp is 'bf16'.*'bfloat16'"):
        (DeepLearningTask(s).device("cpu").quiet().model(bp).optimizer(SGD()).total_epochs(1)
         .data(ArrayFeeder((x, y), None, BATCH, dtype="float16", num_classes=CLASSES))).compile()


def test_a_bf16_checkpoint_resumes_byte_identically(tmp_path):
    x, y = _data()

    def task(epochs):
        bp, _ = _resnet()
        feeder = ArrayFeeder((x[:4 * BATCH], y[:4 * BATCH]), None, BATCH, num_classes=CLASSES, dtype="bfloat16")
        return (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH).amp("bf16")).device("cpu")
                .quiet().model(bp).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(LR))
                .total_epochs(epochs).data(feeder))

    straight = task(3).compile()
    straight.run()
    first = task(2).compile()
    first.run()
    first.save(tmp_path / "ck")
    resumed = task(3).resume(tmp_path / "ck")
    resumed.run()
    a, b = straight.weights(), resumed.weights()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    fp16 = DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH).amp(True))
    with pytest.raises(ConfigError, match="settings.amp_dtype"):  # a BF16 checkpoint into an FP16 task
        bp, _ = _resnet()
        (fp16.device("cpu").quiet().model(bp).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(LR))
         .total_epochs(3).data(ArrayFeeder((x[:4 * BATCH], y[:4 * BATCH]), None, BATCH, num_classes=CLASSES,
                                           dtype="float16")).resume(tmp_path / "ck"))
