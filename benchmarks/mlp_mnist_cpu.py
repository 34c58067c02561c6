"""Seconds per epoch of the MNIST MLP (no augmentation) on the CPU: tr's CPU backend vs PyTorch eager.

Same data (the bundled MNIST, normalised once), same batch (200), same model (784-1024-512-256-10, relu),
same optimizer (AdamW wd 1e-4 on weights only, lr 1e-3 constant), same epoch order (a fixed permutation
per epoch), training plus validation every epoch; compile time and the first (warm-up) epoch excluded.
Prints one JSON line per result.

    .venv/bin/python benchmarks/mlp_mnist_cpu.py --epochs 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "mnist"
BATCH = 200


def load():
    from tr.data import MNIST

    ds = MNIST(DATA)
    tr_, va = ds.load("train"), ds.load("val")

    def norm(s):
        return ((s.images.astype(np.float32) / 255 - 0.1307) / 0.3081).astype(np.float32)

    return (norm(tr_), tr_.labels.astype(np.int32)), (norm(va), va.labels.astype(np.int32))


def emit(framework: str, metric: str, value: float, **extra) -> None:
    print(json.dumps({"framework": framework, "workload": "mlp_mnist_cpu", "metric": metric, "value": round(value, 4),
                      "device": f"cpu x{os.cpu_count()} {platform.machine()}",
                      "date": datetime.date.today().isoformat(), **extra}), flush=True)


def bench_tr(train, val, epochs: int) -> None:
    from tr.algo.optimizer import AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    feeder = ArrayFeeder(train, val, BATCH, seed=1, num_classes=10)
    task = (DeepLearningTask(Settings().manual_seed(123).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(1024), relu(), fc(512), relu(), fc(256), relu(), fc(10)))
            .optimizer(AdamW().weight_decay(1e-4)).scheduler(ConstantLR().base_lr(1e-3))
            .total_epochs(epochs + 1).data(feeder)).compile()
    r = task.run()
    per_epoch = [h.seconds for h in r.history[1:]]
    emit("tr", "seconds_per_epoch", float(np.median(per_epoch)), top1=round(r.history[-1].top1, 4))


def bench_torch(train, val, epochs: int) -> None:
    import torch

    torch.manual_seed(123)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3)
    xt, yt = torch.from_numpy(train[0]), torch.from_numpy(train[1]).long()
    xv, yv = torch.from_numpy(val[0]), torch.from_numpy(val[1]).long()
    times, top1 = [], 0.0
    for epoch in range(epochs + 1):
        t0 = time.perf_counter()
        model.train()
        perm = torch.from_numpy(np.random.default_rng(epoch).permutation(len(yt)))
        for k in range(0, len(yt), BATCH):
            idx = perm[k:k + BATCH]
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for k in range(0, len(yv), BATCH):
                correct += (model(xv[k:k + BATCH]).argmax(1) == yv[k:k + BATCH]).sum().item()
        top1 = correct / len(yv)
        times.append(time.perf_counter() - t0)
    emit("pytorch-eager", "seconds_per_epoch", float(np.median(times[1:])), top1=round(top1, 4),
         threads=torch.get_num_threads())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (one more runs first as warm-up)")
    args = ap.parse_args()
    train, val = load()
    bench_tr(train, val, args.epochs)
    bench_torch(train, val, args.epochs)


if __name__ == "__main__":
    main()
