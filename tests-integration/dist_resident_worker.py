"""One rank of test_distributed_resident.py: device_augment (the digits and their augmentation in the arena,
the epoch's order and each rank's batches chosen on the device) trained data-parallel on the CPU backend.

    python dist_resident_worker.py OUT_DIR

Reads its rank from the launcher's variables (tr-run sets them) and writes OUT_DIR/rank<r>.npz: the final
weights, every step's dataset indices and the epochs' validation top-1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resident_chain import configure, digits  # noqa: E402

TRAIN, VAL, GLOBAL_BATCH, EPOCHS = 400, 100, 100, 2


def train(env=None):
    """(task, result, [indices of each step]) of one run; ``env`` None: the launcher's."""
    from renaissance import GLOBAL_SETTING, AdamW, ConstantLR, CrossEntropyLoss, DeepLearningTask, fc, relu, seq

    configure(digits(TRAIN, VAL))
    GLOBAL_SETTING.global_batch_size(GLOBAL_BATCH)
    seen: list[np.ndarray] = []
    box = []

    def hook(k, _r):
        p, be = box[0].program, box[0].backend
        seen.append(be.read(p.tensor(f"data_{'ab'[k % 2]}")).reshape(-1).copy())

    t = (DeepLearningTask().device("cpu").quiet().distributed(env, 60).model(seq(fc(64, True), relu(), fc(10, True)))
         .loss(CrossEntropyLoss()).total_epochs(EPOCHS).optimizer(AdamW()).scheduler(ConstantLR().base_lr(1e-3))
         .on_step(hook))
    box.append(t)
    t.compile()
    return t, t.run(), seen


def main() -> int:
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    task, result, seen = train()
    np.savez(os.path.join(out, f"rank{rank}.npz"), steps=np.stack(seen), top1=[r.top1 for r in result.history],
             **{f"w:{k}": v for k, v in task.weights().items() if k.startswith("L")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
