"""The seed's MNIST MLP example (Tech-Renaissance article 1), in tr.

    python examples/mlp_mnist.py --epochs 2 --device cpu [--log-dir runs/mnist]

Ends with one JSON line: best_top1, best_epoch, epochs, seconds, device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from renaissance import (
    GLOBAL_SETTING,
    PREPROCESSOR_SETTING,
    AdamW,
    CosineAnnealingLR,
    CrossEntropyLoss,
    DeepLearningTask,
    NormMode,
    Pad,
    RandomCrop,
    RandomErasing,
    RandomRotation,
    RandomScale,
    TrError,
    configure_logging,
    fc,
    relu,
    seq,
)
from tr.backend.registry import cuda_available

DATA = Path(__file__).resolve().parents[1] / "data" / "mnist"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    ap.add_argument("--workers", type=int, default=8, help="preprocessing threads")
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                    help="mixed precision (default: on when training on a GPU, as the seed does)")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--log-dir", type=Path, default=None,
                    help="write metrics.csv, metrics.jsonl, PNG plots and TensorBoard scalars here (log_to)")
    args = ap.parse_args(argv)
    configure_logging("INFO")
    on_gpu = args.device == "cuda" or (args.device == "auto" and cuda_available())
    amp = on_gpu if args.amp is None else args.amp

    GLOBAL_SETTING \
        .amp(amp) \
        .manual_seed(123) \
        .global_batch_size(200) \
        .input_resolution(28)

    PREPROCESSOR_SETTING \
        .dataset("mnist", str(args.data)) \
        .preprocess_workers(args.workers) \
        .normalization(NormMode.MNIST) \
        .train_transforms(
            Pad(2), RandomCrop(28), RandomRotation(20.0, 0),
            RandomScale(0.8, 1.2), RandomErasing(0.5)) \
        .commit()

    mlp = seq(
        fc(1024, True), relu(),
        fc(512, True), relu(),
        fc(256, True), relu(),
        fc(10, True),
    )

    task = DeepLearningTask() \
        .device(args.device) \
        .model(mlp) \
        .loss(CrossEntropyLoss().label_smoothing(0.1)) \
        .total_epochs(args.epochs) \
        .optimizer(AdamW().weight_decay(1e-4)) \
        .scheduler(CosineAnnealingLR().base_lr(0.001).warmup(round(args.epochs * 0.05)).step_by_batch())

    if args.log_dir is not None:
        task.log_to(args.log_dir)
    task.compile()
    result = task.run()
    best = None if result.best_top1 is None else round(result.best_top1, 4)  # None: nothing was validated
    print(json.dumps({"best_top1": best, "best_epoch": result.best_epoch,
                      "epochs": result.epochs, "seconds": round(result.seconds, 2),
                      "device": task.backend.name}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TrError as e:  # a clear one-line message for bad input (no device, missing data, bad settings)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
