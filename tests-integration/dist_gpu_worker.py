"""One rank of test_distributed_gpu.py's runs: a small AMP CNN trained data-parallel on CUDA device LOCAL_RANK,
gradients all-reduced by NCCL inside the captured step.

    python dist_gpu_worker.py OUT_DIR [--die-rank R --die-at nccl|step]

Writes OUT_DIR/rank<r>.npz (final weights, loss of every step). ``--die-at nccl``: rank R exits (code 3)
where it would join the NCCL communicator, after the rendezvous; ``--die-at step``: rank R exits after its
third training step, while the others wait for it inside the step's all-reduce.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

STEPS, GLOBAL_BATCH, CLASSES, EPOCHS = 6, 32, 10, 2


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS * GLOBAL_BATCH, 8, 8, 3)).astype(np.float16)
    y = rng.integers(0, CLASSES, STEPS * GLOBAL_BATCH).astype(np.int32)
    return x, y


def train(env=None, on_step=None, epochs: int = EPOCHS):
    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.graph.blueprint import cbr, fc, flatten, maxpool, seq
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    x, y = data()
    losses: list[float] = []

    def step(k, r):
        losses.append(float(r[0]))
        if on_step is not None:
            on_step(k)

    feeder = ArrayFeeder((x, y), None, GLOBAL_BATCH, seed=11, num_classes=CLASSES, dtype=np.float16)
    task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(GLOBAL_BATCH).amp()).device("cuda")
            .quiet().distributed(env)
            .model(seq(cbr(8, 3, p=1), cbr(16, 3, p=1), maxpool(2, 2), cbr(16, 3, p=1), flatten(), fc(CLASSES, True)))
            .optimizer(SGD().momentum(0.9)).total_epochs(epochs).data(feeder).on_step(step))
    task.compile()
    task.run()
    return task, losses


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--die-at", choices=("nccl", "step"), default="step")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    dies = rank == a.die_rank
    if dies and a.die_at == "nccl":
        from tr.backend.cuda.nccl import NcclCollective

        def die(*_a, **_k):
            print(f"rank {rank} dies instead of joining NCCL", file=sys.stderr, flush=True)
            os._exit(3)

        NcclCollective.from_store = die  # type: ignore[method-assign]

    def maybe_die(k: int) -> None:
        if dies and a.die_at == "step" and k == 2:
            print(f"rank {rank} dies after step {k}", file=sys.stderr, flush=True)
            os._exit(3)

    task, losses = train(on_step=maybe_die, epochs=EPOCHS if a.die_rank < 0 else 50)
    np.savez(os.path.join(a.out, f"rank{rank}.npz"), losses=np.array(losses),
             **{f"w:{k}": v for k, v in task.weights().items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
