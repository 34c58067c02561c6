"""One rank of test_distributed_cpu.py's runs: an MLP (no BN, no dropout) trained data-parallel on the CPU.

    python dist_cpu_worker.py OUT_DIR [--timeout S] [--die-rank R] [--accumulate K] [--tta]

Reads its rank from the launcher's variables (tr-run sets them), trains with SGD momentum and then with
AdamW (two tasks sharing the process's rank group), and writes OUT_DIR/rank<r>_<optimizer>.npz: the final
weights, the loss of every step and the reported epoch metrics. ``--die-rank R``: rank R exits at once
with code 3, before joining (a rank that dies during bootstrap). ``--accumulate K``: task.accumulate(K) (each
rank's micro-batch GLOBAL_BATCH / (world x K); test_accumulate.py). ``--tta``: task.tta(flip=True), whose mirror
of a 1x1 sample is the sample: the metrics must be the plain run's, summed on the host and reduced over the ranks.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

STEPS, GLOBAL_BATCH, IN, CLASSES, EPOCHS, VAL = 5, 16, 12, 4, 2, 13


def data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((IN, CLASSES))
    x = rng.standard_normal((STEPS * GLOBAL_BATCH + VAL, 1, 1, IN)).astype(np.float32)
    y = (x.reshape(-1, IN) @ w).argmax(1).astype(np.int32)
    n = STEPS * GLOBAL_BATCH
    return (x[:n], y[:n]), (x[n:], y[n:])


def train(opt_name: str, env=None, timeout_s: float | None = None, quiet: bool = True, accumulate: int = 1,
          tta: bool = False):
    """(task, result, per-step losses) of one run; ``env`` None: the launcher's (distributed() default)."""
    from tr.algo.optimizer import SGD, AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    train_set, val_set = data()
    if opt_name == "sgd":
        opt, lr = SGD().momentum(0.9).weight_decay(1e-4), 0.05
    else:
        opt, lr = AdamW().weight_decay(1e-2), 3e-3
    feeder = ArrayFeeder(train_set, val_set, GLOBAL_BATCH, seed=11, shuffle=True, num_classes=CLASSES)
    s = Settings().manual_seed(5).global_batch_size(GLOBAL_BATCH)
    losses: list[float] = []
    task = (DeepLearningTask(s).device("cpu").quiet(quiet).distributed(env, timeout_s)
            .model(seq(fc(32, True), relu(), fc(24, True), relu(), fc(CLASSES, True)))
            .optimizer(opt).scheduler(ConstantLR().base_lr(lr)).total_epochs(EPOCHS).data(feeder)
            .on_step(lambda k, r: losses.append(float(r[0]))))
    if accumulate > 1:
        task.accumulate(accumulate)
    if tta:
        task.tta(flip=True)
    task.compile()
    result = task.run()
    return task, result, losses


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--tta", action="store_true")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    if rank == a.die_rank:
        print(f"rank {rank} dies before joining", file=sys.stderr)
        return 3
    for opt_name in ("sgd", "adamw"):
        task, result, losses = train(opt_name, timeout_s=a.timeout, quiet=opt_name != "sgd", accumulate=a.accumulate,
                                      tta=a.tta)
        h = result.history
        np.savez(os.path.join(a.out, f"rank{rank}_{opt_name}.npz"), losses=np.array(losses),
                 train_loss=[r.train_loss for r in h], val_loss=[r.val_loss for r in h],
                 top1=[r.top1 for r in h], top5=[r.top5 for r in h],
                 **{f"w:{k}": v for k, v in task.weights().items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
