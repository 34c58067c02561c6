"""The processes of test_checkpoint_resume.py.

    python checkpoint_worker.py resume KIND CKPT OUT.npz [DEVICE]
                                                           configure KIND as the test did (on DEVICE: cpu, the
                                                           default, or cuda), resume CKPT, train the remaining
                                                           epochs, write every state tensor and the epoch metrics
                                                           to OUT.npz
    python checkpoint_worker.py writer CKPT                save versions 1, 2, ... of a checkpoint at CKPT forever
                                                           (the crash test kills it with SIGKILL mid-save)

KIND "mlp": an MLP with dropout on a slice of the bundled MNIST through the native pipeline
(PREPROCESSOR_SETTING, random crops); "cnn": a small CNN with batch norm under AMP (dynamic loss scale).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MNIST_DIR = Path(__file__).resolve().parents[1] / "data" / "mnist"
BATCH, N_TRAIN, N_VAL, EPOCHS = 16, 40, 12, 4


def configure_pipeline() -> None:
    from tr.core.norm import NormMode
    from tr.data import MNIST, PREPROCESSOR_SETTING, ArrayDataset, Pad, RandomCrop, reset_preprocessor_settings

    reset_preprocessor_settings()
    val = MNIST(MNIST_DIR).load("val")
    n = N_TRAIN
    ds = ArrayDataset((val.images[:n], val.labels[:n]), (val.images[n:n + N_VAL], val.labels[n:n + N_VAL]),
                      name="mnist-slice", num_classes=10)
    PREPROCESSOR_SETTING.dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST) \
        .train_transforms(Pad(2), RandomCrop(28))


def make_task(kind: str, device: str = "cpu"):
    """The task of ``kind`` on ``device``, configured and not compiled (the same in every process)."""
    from tr.algo.optimizer import SGD, AdamW
    from tr.algo.scheduler import CosineAnnealingLR
    from tr.core.settings import Settings
    from tr.graph.blueprint import bn, conv, dropout, fc, flatten, maxpool, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    if kind == "mlp":
        configure_pipeline()
        return (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device(device).quiet()
                .model(seq(fc(32), relu(), dropout(0.2), fc(10)))
                .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(CosineAnnealingLR(0.05))
                .total_epochs(EPOCHS))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N_TRAIN + N_VAL, 8, 8, 1)).astype(np.float16)
    y = (np.arange(len(x)) % 3).astype(np.int32)
    feeder = ArrayFeeder((x[:N_TRAIN], y[:N_TRAIN]), (x[N_TRAIN:], y[N_TRAIN:]), BATCH, seed=4, dtype=np.float16,
                         num_classes=3)
    s = Settings().manual_seed(9).global_batch_size(BATCH).amp().loss_scaling("dynamic", growth_interval=2)
    return (DeepLearningTask(s).device(device).quiet().data(feeder)
            .model(seq(conv(4, 3, 1, 1), bn(), relu(), maxpool(2), flatten(), fc(3)))
            .optimizer(AdamW().weight_decay(1e-3)).scheduler(CosineAnnealingLR(3e-3).warmup(1))
            .total_epochs(EPOCHS))


def arena_state(task) -> dict[str, np.ndarray]:
    """Every state tensor the checkpoint holds, and the rest of the trained state a test compares."""
    from tr.task.checkpoint import state_tensors

    return {t.name: task.backend.read(t) for t in state_tensors(task.program)}


def metrics(result) -> np.ndarray:
    return np.array([[r.epoch, r.train_loss, r.lr, r.val_loss, r.top1, r.top5, r.skipped_steps]
                     for r in result.history], dtype=np.float64)


def writer(path: str) -> None:
    from tr.core.dtype import DType
    from tr.task import checkpoint_files

    first = version = int(checkpoint_files.read(path)[0]["version_of_test"]) if Path(path).exists() else 0
    while True:
        version += 1
        arr = np.full((256, 1024), version, np.float32)  # 1 MiB: a save takes long enough to be cut
        checkpoint_files.write(path, {"w": (arr, DType.FP32)}, {"version_of_test": version})
        if version == first + 1:  # the parent times its kill from here, not from the interpreter's start
            print("saving", flush=True)


def main(argv: list[str]) -> int:
    if argv[0] == "writer":
        writer(argv[1])
        return 0
    _, kind, ckpt, out, *device = argv
    task = make_task(kind, *device).resume(ckpt)
    result = task.run()
    np.savez(out, metrics=metrics(result), epochs_done=task._epochs_done,
             **{f"s:{k}": v for k, v in arena_state(task).items()})
    task._feeder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
