"""A small Vision Transformer on the bundled MNIST, on the CPU (examples/models.py's vit_tiny_mnist: 7x7 patches,
16 tokens and a class token, width 64, 2 encoder blocks of 4 heads, MLP 128): AdamW without decay on norms,
biases and tokens, warm-up then cosine, label smoothing, global-norm clipping (the ViT recipe), a few epochs.

    python examples/vit_mnist.py            # 5 epochs
    python examples/vit_mnist.py --epochs 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.models import vit_tiny_mnist  # noqa: E402
from tr.algo.loss import CrossEntropyLoss  # noqa: E402
from tr.algo.optimizer import AdamW  # noqa: E402
from tr.algo.scheduler import CosineAnnealingLR  # noqa: E402
from tr.core.norm import NormMode  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.data import MNIST, PreprocessorSettings  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.pipeline import feeder_from_preprocessor  # noqa: E402


def build(epochs: int, workers: int = 2) -> DeepLearningTask:
    settings = Settings().manual_seed(123).global_batch_size(128)
    pre = PreprocessorSettings().dataset(MNIST(str(ROOT / "data" / "mnist"))).normalization(NormMode.MNIST) \
        .preprocess_workers(workers)
    return (DeepLearningTask(settings).device("cpu").model(vit_tiny_mnist)
            .loss(CrossEntropyLoss().label_smoothing(0.1)).optimizer(AdamW().weight_decay(0.05))
            .param_group("tokens", weight_decay=0.0)
            .scheduler(CosineAnnealingLR(2e-3).warmup(1).warmup_start_factor(0.1)).grad_clip(1.0, mode="norm")
            .total_epochs(epochs).data(feeder_from_preprocessor(settings, pre=pre)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    a = ap.parse_args()
    result = build(a.epochs).compile().run()
    print(f"best top-1 {result.best_top1:.4f} after {a.epochs} epoch(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
