"""A 3-layer MLP trained for 50 steps in tr (CPU backend) and in torch from identical weights and batches:
the loss agrees at every step and the final weights agree (FP32; tolerances below)."""

import numpy as np
import pytest
import torch

from tr.algo.optimizer import SGD, AdamW
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

STEPS, BATCH, IN, CLASSES = 50, 16, 20, 5


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((STEPS * BATCH, 1, 1, IN)).astype(np.float32)
    w = rng.standard_normal((IN, CLASSES))
    y = (x.reshape(-1, IN) @ w).argmax(1).astype(np.int32)
    return x, y


def _tr_task(opt, lr):
    x, y = _data()
    feeder = ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES)
    s = Settings().manual_seed(5).global_batch_size(BATCH)
    task = (DeepLearningTask(s).device("cpu").quiet()
            .model(seq(fc(32, True), relu(), fc(24, True), relu(), fc(CLASSES, True)))
            .optimizer(opt).scheduler(ConstantLR().base_lr(lr)).total_epochs(1).data(feeder))
    return task, x, y


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_mlp_50_steps_match_torch(opt_name):
    lr = 0.05 if opt_name == "sgd" else 1e-3
    opt = SGD().momentum(0.9).weight_decay(0.0) if opt_name == "sgd" else AdamW().weight_decay(1e-2)
    task, x, y = _tr_task(opt, lr)
    task.compile()
    params = task.parameters()  # [(weight [out,1,1,in], bias [1,1,1,out]) per fc layer], FP32 copies
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, 32), torch.nn.ReLU(), torch.nn.Linear(32, 24), torch.nn.ReLU(),
        torch.nn.Linear(24, CLASSES)).double()
    with torch.no_grad():
        for lin, (w, b) in zip([m for m in model if isinstance(m, torch.nn.Linear)], params):
            lin.weight.copy_(torch.from_numpy(w.reshape(lin.out_features, lin.in_features)))
            lin.bias.copy_(torch.from_numpy(b.reshape(-1)))
    if opt_name == "sgd":
        topt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
        nodecay = [p for n, p in model.named_parameters() if n.endswith("bias")]
        topt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-2}, {"params": nodecay, "weight_decay": 0}],
                                 lr=lr)
    losses = []
    task.on_step(lambda k, result: losses.append(float(result[0])))
    task.run()
    assert len(losses) == STEPS
    for k in range(STEPS):
        xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH].reshape(BATCH, IN)).double()
        yb = torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long()
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        topt.step()
        assert losses[k] == pytest.approx(loss.item(), rel=1e-4, abs=1e-5), f"step {k}"
    for lin, (w, _b) in zip([m for m in model if isinstance(m, torch.nn.Linear)], task.parameters()):
        np.testing.assert_allclose(w.reshape(lin.out_features, lin.in_features), lin.weight.detach().numpy(),
                                   rtol=1e-3, atol=1e-4)
