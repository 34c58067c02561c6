"""A plain script for test_use_gpu_relaunch.py: ``use_gpu("0,1")`` and nothing else about processes.

    python use_gpu_worker.py OUT_DIR

Run as one process, its compile() starts one process per device through tr's launcher (tr.task.devices); on a
machine without CUDA each trains on the CPU backend, and the two reduce their gradients with gloo. Every rank
writes OUT_DIR/rank<r>.npz: its final weights, its local batch and the epoch numbers it reported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dist_cpu_worker as worker  # noqa: E402  (the data and the model of the CPU data-parallel test)

from renaissance import GLOBAL_SETTING, SGD, ConstantLR, DeepLearningTask, Settings, fc, relu, seq  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402


def build(settings: Settings | None = None) -> DeepLearningTask:
    """The task (default: on GLOBAL_SETTING, as a user script has it)."""
    train_set, val_set = worker.data()
    feeder = ArrayFeeder(train_set, val_set, worker.GLOBAL_BATCH, seed=11, shuffle=True, num_classes=worker.CLASSES)
    return (DeepLearningTask(settings).quiet()
            .model(seq(fc(32, True), relu(), fc(24, True), relu(), fc(worker.CLASSES, True)))
            .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(ConstantLR(0.05))
            .total_epochs(worker.EPOCHS).data(feeder))


def main() -> int:
    out = Path(sys.argv[1])
    GLOBAL_SETTING.manual_seed(5).global_batch_size(worker.GLOBAL_BATCH).use_gpu("0,1")
    task = build().compile()  # the first process ends here, with the children's exit code
    result = task.run()
    rank = int(os.environ["RANK"])
    np.savez(out / f"rank{rank}.npz", batch=task._feeder.batch, epochs=[r.epoch for r in result.history],
             **{f"w:{k}": v for k, v in task.weights().items() if k.startswith("L")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
