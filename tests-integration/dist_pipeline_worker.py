"""One rank of test_distributed_pipeline_cpu.py's runs: an MLP trained data-parallel on the CPU from the DEFAULT
feeder, the native pipeline configured through PREPROCESSOR_SETTING (a small MNIST subset, random crops).

    python dist_pipeline_worker.py OUT_DIR [--timeout S]

Reads its rank from the launcher's variables (tr-run sets them), trains with SGD momentum and writes
OUT_DIR/rank<r>.npz: the final weights, the loss of every step and the reported epoch metrics.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

MNIST_DIR = Path(__file__).resolve().parents[1] / "data" / "mnist"
# 72 training samples: 4.5 global batches (a smaller last step), divisible by the world sizes 1, 2 and 4, so
# the padding of a sharded epoch is empty and every world size sees the same samples; 13 validation samples
# (not divisible: validation is not padded, the task sums it over the ranks).
GLOBAL_BATCH, N_TRAIN, N_VAL, EPOCHS, CLASSES = 16, 72, 13, 2, 10
STEPS = -(-N_TRAIN // GLOBAL_BATCH)


def configure_pipeline() -> None:
    """PREPROCESSOR_SETTING as a user script sets it (reset first: one process may train several times)."""
    from tr.core.norm import NormMode
    from tr.data import MNIST, PREPROCESSOR_SETTING, ArrayDataset, Pad, RandomCrop, reset_preprocessor_settings

    reset_preprocessor_settings()
    val = MNIST(MNIST_DIR).load("val")
    n = N_TRAIN
    ds = ArrayDataset((val.images[:n], val.labels[:n]), (val.images[n:n + N_VAL], val.labels[n:n + N_VAL]),
                      name="mnist-subset", num_classes=CLASSES)
    PREPROCESSOR_SETTING.dataset(ds).preprocess_workers(1).normalization(NormMode.MNIST) \
        .train_transforms(Pad(2), RandomCrop(28))


def train(env=None, timeout_s: float | None = None, quiet: bool = True):
    """(task, result, per-step losses) of one run; ``env`` None: the launcher's (distributed() default)."""
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask

    configure_pipeline()
    s = Settings().manual_seed(5).global_batch_size(GLOBAL_BATCH)
    losses: list[float] = []
    task = (DeepLearningTask(s).device("cpu").quiet(quiet).distributed(env, timeout_s)
            .model(seq(fc(32, True), relu(), fc(CLASSES, True)))
            .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(ConstantLR().base_lr(0.05))
            .total_epochs(EPOCHS).on_step(lambda k, r: losses.append(float(r[0]))))
    task.compile()
    result = task.run()
    return task, result, losses


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--timeout", type=float, default=None)
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    task, result, losses = train(timeout_s=a.timeout)
    h = result.history
    np.savez(os.path.join(a.out, f"rank{rank}.npz"), losses=np.array(losses),
             train_loss=[r.train_loss for r in h], val_loss=[r.val_loss for r in h], top1=[r.top1 for r in h],
             top5=[r.top5 for r in h], **{f"w:{k}": v for k, v in task.weights().items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
