"""ResNet-50 on ImageNet (or any class folder or DTS pack) with the recipe torchvision's reference scripts train it
with ("How to train state-of-the-art models using TorchVision's latest primitives"): SGD with Nesterov momentum,
linear warm-up then cosine, label smoothing 0.1, Mixup 0.2 / CutMix 1.0, TrivialAugmentWide, no weight decay on
norms and biases, an EMA of the weights, stochastic depth off (torchvision's ResNet has none; ``--drop-path`` adds
timm's), AMP; FFCV's progressive resizing on request (``--progressive``).

    python examples/imagenet_resnet50.py --data /data/imagenet                 # train/ and val/ class folders
    python examples/imagenet_resnet50.py --data packed/imagenet --amp bf16     # a pack (tr-dts pack ...)
    python examples/imagenet_resnet50.py --data photos --device cpu --epochs 1 --batch 8 --resolution 64 \\
        --workers 2 --amp off                                                   # a small CPU run
    python examples/imagenet_resnet50.py --data /data/imagenet --epochs 88 --progressive 160 65 76 \\
        --resolution 192                                                        # FFCV's rn50 88-epoch ramp

Defaults follow torchvision's recipe where it is stated per image (the learning rate is scaled with the batch:
0.5 at 1024, as its 8 GPUs x 128); its 600 epochs are yours to ask for. One difference: tr validates at the
final training side (one transfer buffer holds one sample shape), where torchvision trains at 176 and tests at
224. ``--out DIR`` writes metrics, plots and a
checkpoint every epoch there (and resumes from it with ``--resume``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.models import resnet_net  # noqa: E402
from tr.algo.loss import CrossEntropyLoss  # noqa: E402
from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import CosineAnnealingLR  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402
from tr.core.norm import NormMode  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.data import PreprocessorSettings  # noqa: E402
from tr.data.transforms import (  # noqa: E402
    CenterCrop,
    RandAugment,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    TrivialAugmentWide,
)
from tr.graph.blueprint import BluePrint  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.devices import cuda_devices  # noqa: E402
from tr.task.pipeline import feeder_from_preprocessor  # noqa: E402

AMP = {"off": False, "fp16": True, "bf16": "bf16"}
AUGMENT = {"ta_wide": lambda: (TrivialAugmentWide(),), "ra": lambda: (RandAugment(num_ops=2, magnitude=9),),
           "none": lambda: ()}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = ap.add_argument
    add("--data", required=True, type=Path, help="class folders (train/ and val/ of them) or a DTS pack's folder")
    add("--epochs", type=int, default=90)
    add("--batch", type=int, default=256, help="global batch size")
    add("--lr", type=float, help="peak learning rate (default 0.5 * batch / 1024)")
    add("--momentum", type=float, default=0.9)
    add("--weight-decay", type=float, default=2e-5, help="on conv and fc weights; none on BN and biases")
    add("--warmup-epochs", type=int, default=5, help="linear warm-up from 1 %% of the peak rate, stepped per batch")
    add("--label-smoothing", type=float, default=0.1)
    add("--mixup", type=float, default=0.2, help="Mixup alpha (0: off)")
    add("--cutmix", type=float, default=1.0, help="CutMix alpha (0: off)")
    add("--ema", type=float, default=0.9999, help="EMA decay per step, validated alongside (0: off)")
    add("--drop-path", type=float, default=0.0, help="stochastic depth rate (timm's drop_path_rate)")
    add("--auto-augment", choices=tuple(AUGMENT), default="ta_wide",
        help="TrivialAugmentWide, RandAugment(2, 9) or none, after the crop and flip")
    add("--resolution", type=int, default=224, help="the training crop (the final one with --progressive) and the "
        "validation centre crop")
    add("--val-resize", type=int, help="the validation images' short side before the crop (default resolution / "
        "0.875)")
    add("--progressive", type=int, nargs=3, metavar=("MIN_RES", "START_RAMP", "END_RAMP"),
        help="FFCV's progressive resizing: train at MIN_RES up to epoch START_RAMP (counted from 0), ramp to "
             "--resolution by END_RAMP (multiples of 32)")
    add("--amp", choices=tuple(AMP), help="default: bf16 on CUDA, off on the CPU")
    add("--device", choices=("auto", "cuda", "cpu"), default="auto")
    add("--workers", type=int, default=8, help="decode and augmentation threads")
    add("--device-decode", action="store_true", help="decode and augment the JPEGs on the GPU (nvJPEG)")
    add("--seed", type=int, default=0)
    add("--out", type=Path, help="metrics, plots and a checkpoint every epoch here")
    add("--keep-checkpoints", type=int, default=1, help="the newest checkpoints kept in --out")
    add("--resume", action="store_true", help="resume from --out's last checkpoint")
    a = ap.parse_args(argv)
    if a.resume and a.out is None:
        raise ConfigError("--resume needs --out (the run's folder)")
    if a.val_resize is not None and a.val_resize < a.resolution:
        raise ConfigError(f"--val-resize {a.val_resize} is below --resolution {a.resolution}: nothing to crop")
    return a


def on_cuda(device: str) -> bool:
    return device == "cuda" or (device == "auto" and cuda_devices()[0] > 0)


def build(a: argparse.Namespace) -> DeepLearningTask:
    amp = AMP[a.amp] if a.amp else ("bf16" if on_cuda(a.device) else False)
    settings = Settings().manual_seed(a.seed).global_batch_size(a.batch).amp(amp)
    if a.progressive:
        min_res, start, end = a.progressive
        settings.progressive_resizing(min_res, a.resolution, start, end)
    val_resize = a.val_resize if a.val_resize is not None else round(a.resolution / 0.875)
    pre = (PreprocessorSettings().dataset("imagenet", a.data).preprocess_workers(a.workers)
           .normalization(NormMode.IMAGENET)
           .train_transforms(RandomResizedCrop(a.resolution), RandomHorizontalFlip(), *AUGMENT[a.auto_augment]())
           .val_transforms(Resize(val_resize), CenterCrop(a.resolution)))
    if a.device_decode:
        pre.device_decode(True)
    classes = pre.open_dataset().num_classes
    model = BluePrint(resnet_net(num_classes=classes, drop_path=a.drop_path), name="resnet50", num_classes=classes)
    lr = a.lr if a.lr is not None else 0.5 * a.batch / 1024
    task = (DeepLearningTask(settings).device(a.device).model(model)
            .loss(CrossEntropyLoss().label_smoothing(a.label_smoothing))
            .optimizer(SGD().momentum(a.momentum).nesterov(True).weight_decay(a.weight_decay))
            .scheduler(CosineAnnealingLR(lr).warmup(a.warmup_epochs).warmup_start_factor(0.01).step_by_batch())
            .total_epochs(a.epochs).data(feeder_from_preprocessor(settings, pre=pre)))
    if a.mixup > 0 or a.cutmix > 0:
        task.mixup(mixup_alpha=a.mixup, cutmix_alpha=a.cutmix)
    if a.ema > 0:
        task.ema(a.ema, validate=True)
    if a.out is not None:
        task.log_to(a.out).checkpoint_every(1, a.out / "checkpoints", keep_last=a.keep_checkpoints)
    return task


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    task = build(a)
    if a.resume:
        saved = sorted((a.out / "checkpoints").glob("epoch-*"))
        if not saved:
            raise ConfigError(f"--resume: no checkpoint (epoch-NNNN) in {a.out / 'checkpoints'}")
        task.resume(saved[-1])  # (compiles the task as the saved run was)
    else:
        task.compile()
    result = task.run()
    best = "not validated" if result.best_top1 is None else f"{result.best_top1:.2%} (epoch {result.best_epoch})"
    print(f"resnet50: best top-1 {best} after {a.epochs} epoch(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
