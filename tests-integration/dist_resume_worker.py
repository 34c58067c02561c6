"""One rank of test_distributed_resume.py's runs: an MLP with dropout trained data-parallel on the CPU.

    python dist_resume_worker.py straight OUT CKDIR CKPT  train all EPOCHS with checkpoint_every(1, CKDIR,
                                                       keep_last=EPOCHS, keep_best="val_loss") (every rank takes
                                                       part, rank 0 writes), saving CKPT after HALF epochs (every
                                                       rank calls save); write OUT/rank<r>.npz
    python dist_resume_worker.py plain OUT             train all EPOCHS in one run(), no checkpoint and no save
                                                       (what "straight" must equal); write OUT/rank<r>.npz
    python dist_resume_worker.py resume OUT CKPT...    for each CKPT: resume it in a new task, train the rest,
                                                       write OUT/<i>/rank<r>.npz (i: the CKPT's position)
    python dist_resume_worker.py rank0_saves CKPT      train one epoch, then only rank 0 calls save (a bug in a
                                                       user's script): rank 0 must fail naming rank 1
    python dist_resume_worker.py rank1_other_data CKPT resume CKPT with rank 1's data changed (its own shard's
                                                       fingerprint refuses it): every rank must fail at once

Each .npz holds every state tensor of the checkpoint (``s:<name>``), this rank's dropout stream, the epoch
metrics and the best value its checkpoint policy holds. The ranks' dropout streams differ (each draws its own
masks), which is what a resume must restore.
"""

from __future__ import annotations

import os
import sys

import numpy as np

STEPS, GLOBAL_BATCH, IN, CLASSES, EPOCHS, HALF, VAL = 4, 16, 12, 4, 4, 2, 13


def make_task(data_seed: int = 7):
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import CosineAnnealingLR
    from tr.core.settings import Settings
    from tr.graph.blueprint import dropout, fc, relu, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    rng = np.random.default_rng(data_seed)
    w = rng.standard_normal((IN, CLASSES))
    x = rng.standard_normal((STEPS * GLOBAL_BATCH + VAL, 1, 1, IN)).astype(np.float32)
    y = (x.reshape(-1, IN) @ w).argmax(1).astype(np.int32)
    n = STEPS * GLOBAL_BATCH
    feeder = ArrayFeeder((x[:n], y[:n]), (x[n:], y[n:]), GLOBAL_BATCH, seed=11, shuffle=True, num_classes=CLASSES)
    return (DeepLearningTask(Settings().manual_seed(5).global_batch_size(GLOBAL_BATCH)).device("cpu").quiet()
            .distributed(None, 60.0)
            .model(seq(fc(32, True), relu(), dropout(0.3), fc(24, True), relu(), dropout(0.2), fc(CLASSES, True)))
            .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(CosineAnnealingLR(0.05))
            .total_epochs(EPOCHS).data(feeder))


def dump(task, result, out: str) -> None:
    from tr.task.checkpoint import state_tensors

    rank = int(os.environ["RANK"])
    metrics = np.array([[r.epoch, r.train_loss, r.lr, r.val_loss, r.top1, r.top5] for r in result.history])
    best = np.nan if task.config.task.checkpoints is None else task.config.task.checkpoints._best
    np.savez(os.path.join(out, f"rank{rank}.npz"), metrics=metrics, epochs_done=task._epochs_done, best=best,
             **{f"s:{t.name}": task.backend.read(t) for t in state_tensors(task.program)})


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "straight":
        out, every, ckpt = argv[1:4]
        task = make_task().checkpoint_every(1, every, keep_last=EPOCHS, keep_best="val_loss").compile()
        first = task.run(HALF)
        task.save(ckpt)  # a save between epochs changes nothing: the run goes on as an unbroken one
        rest = task.run()
        first.history += rest.history
        dump(task, first, out)
    elif mode == "plain":
        task = make_task().compile()
        dump(task, task.run(), argv[1])
    elif mode == "rank1_other_data":
        make_task(data_seed=8 if os.environ["RANK"] == "1" else 7).resume(argv[1]).run()
    elif mode == "rank0_saves":
        task = make_task().compile()
        task.run(1)
        if os.environ["RANK"] == "0":
            task.save(argv[1])
    else:
        for i, ckpt in enumerate(argv[2:]):
            out = os.path.join(argv[1], str(i))
            os.makedirs(out, exist_ok=True)
            task = make_task().resume(ckpt)
            dump(task, task.run(), out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
