"""Training with BCEWithLogitsLoss and MSELoss (tr.algo.onehot_loss): the small CNN of test_cnn_resnet_vs_torch.py
trained 50 steps in tr (CPU backend, FP32) and in torch (float64, binary_cross_entropy_with_logits / mse_loss
against the smoothed one-hot label) from identical weights and batches: the loss agrees at every step (relative
2e-4, as there) and the final weights within 1e-3. predict() gives each class's sigmoid as BCE's probabilities
and refuses probabilities for an MSE plan. On the GPU (gpu mark) the same training on the CUDA backend follows the
CPU's losses: FP32 within 1e-3 relative over the 50 steps, AMP (FP16 logits and gradients) within 2 % at its
first step, finite throughout."""

import numpy as np
import pytest
import torch
from test_cnn_resnet_vs_torch import BATCH, CLASSES, LR, STEPS, _cnn, _data, _load, _param_modules

from tr.algo.onehot_loss import BCEWithLogitsLoss, MSELoss
from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.predict import predict

LOSSES = {"bce": (BCEWithLogitsLoss, torch.nn.functional.binary_cross_entropy_with_logits),
          "mse": (MSELoss, torch.nn.functional.mse_loss)}


@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("name", list(LOSSES))
def test_50_steps_match_torch(name, ls):
    cls, torch_loss = LOSSES[name]
    bp, tm = _cnn()
    tm = tm.double()
    x, y = _data()
    feeder = ArrayFeeder((x, y), (x[:BATCH], y[:BATCH]), BATCH, shuffle=False, num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
            .model(bp).loss(cls().label_smoothing(ls)).optimizer(SGD().momentum(0.9))
            .scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(feeder)).compile()
    assert any(c.op == "onehot_loss_bwd" for step in task.program.steps.values() for c in step.calls)
    _load(tm, task.parameters())
    losses = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    topt = torch.optim.SGD(tm.parameters(), lr=LR, momentum=0.9)
    tm.train()
    for k in range(STEPS):
        xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH]).double()
        yb = torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long()
        target = torch.nn.functional.one_hot(yb, CLASSES).double() * (1 - ls) + ls / CLASSES
        topt.zero_grad()
        loss = torch_loss(tm(xb), target)
        loss.backward()
        topt.step()
        assert losses[k] == pytest.approx(loss.item(), rel=2e-4, abs=1e-5), f"step {k}"
    for (kind, m), p in zip(_param_modules(tm), task.parameters()):
        w = m.weight.detach().double().numpy()
        got = p[0].transpose(0, 3, 1, 2) if kind == "conv" else p[0].reshape(w.shape)
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4, err_msg=kind)
    batch = x[:BATCH]
    logits = predict(task, batch)
    if name == "bce":
        np.testing.assert_allclose(predict(task, batch, "probs"), 1 / (1 + np.exp(-logits)), rtol=1e-5)
    else:
        with pytest.raises(ConfigError, match="MSELoss gives scores, not probabilities"):
            predict(task, batch, "probs")


def _train(name, device, amp):
    x, y = _data()
    dt = np.float16 if amp else np.float32
    feeder = ArrayFeeder((x.astype(dt), y), None, BATCH, shuffle=False, num_classes=CLASSES, dtype=dt)
    s = Settings().manual_seed(7).global_batch_size(BATCH).amp(amp).loss_scaling("dynamic", init=1024.0)
    task = (DeepLearningTask(s).device(device).quiet().model(_cnn()[0]).loss(LOSSES[name][0]().label_smoothing(0.1))
            .optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(feeder))
    losses = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.compile().run()
    assert task.backend.name == device
    return np.array(losses)


@pytest.mark.gpu
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_cuda_training_follows_the_cpu(name, amp):
    cpu, gpu = _train(name, "cpu", amp), _train(name, "cuda", amp)
    assert len(gpu) == len(cpu) == STEPS and np.all(np.isfinite(gpu))
    if amp:
        assert gpu[0] == pytest.approx(cpu[0], rel=2e-2)
    else:
        np.testing.assert_allclose(gpu, cpu, rtol=1e-3)


def test_a_loss_of_another_kind_is_refused():
    with pytest.raises(ConfigError, match="loss must be a CrossEntropyLoss, BCEWithLogitsLoss or MSELoss"):
        DeepLearningTask(Settings()).loss(torch.nn.MSELoss())
