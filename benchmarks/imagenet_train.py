"""ResNet-50 (or VGG16-BN) trained end to end from a DTS pack of JPEGs, next to the same plan's step on a
resident batch, and where the time goes when the pipeline is the limit.

In one process, on one compiled plan (AMP, batch 256, 224x224, SGD Nesterov, label smoothing 0.1):

* ``pipeline alone``: the training chain with no trainer (JPEG decode by libjpeg-turbo in the native worker
  threads, only the window RandomResizedCrop(224) reads, flip, ImageNet normalisation to FP16 NHWC with 4
  channels), batches acquired and released: what the CPU side can deliver;
* ``end to end``: DeepLearningTask training from the pack (tr.data.DtsImages, FULLY: the pack mapped) with
  the same chain; the first epoch (capture, pages in) untimed, then --epochs timed epochs, images/s =
  samples / epoch seconds (the epoch record's clock: the last step synchronised);
* ``step alone``: the captured training step relaunched on the batch already in device buffer A
  (DeepLearningTask.time_train_step), the synthetic-batch rate of benchmarks/cnn.py.

Per timed epoch, tr.data.EpochTimes says where the time went: the share of the epoch the trainer waited in
acquire for a batch (the pipeline was the limit), the workers' busy share and their share blocked on a full
zone (the device was the limit).

The pack: tools/make_image_folder.py makes --make JPEGs (scikit-image's photographs, or an exported .npz in
$TR_IMAGE_SOURCES; short sides 300-500 px) when --images does not exist, and tr.data.dts.pack packs them at
--level.

    python benchmarks/imagenet_train.py --make 12800 --level 0 --epochs 3 --json auto
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(HERE))
LS, MOMENTUM, WD = 0.1, 0.9, 5e-5


def make_pack(images: Path, make: int, level: int, workers: int, baseline: bool = False) -> Path:
    from tr.data.dts import pack

    if not images.exists():
        from make_image_folder import make_image_folder

        t0 = time.perf_counter()
        make_image_folder(images, classes=10, per_class=max(1, make // 10), min_side=300, max_side=500, seed=0)
        print(f"made {make} JPEGs in {images} ({time.perf_counter() - t0:.0f} s)", flush=True)
    out = images.parent / f"{images.name}_dts{level}{'_baseline' if baseline else ''}"
    if not (out / "train.dts").exists():
        t0 = time.perf_counter()
        pack(images, out, level=level, workers=workers, baseline=baseline)
        print(f"packed {images} at level {level} into {out} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def chain(s, workers: int, device_decode: bool = False, interpolate_chroma: bool = False,
          cpu_share: float | str = "auto", seed: int = 0, refused: str = "cpu"):
    from tr.core.norm import NormMode
    from tr.data import RandomHorizontalFlip, RandomResizedCrop

    return (s.preprocess_workers(workers).normalization(NormMode.IMAGENET)
            .train_transforms(RandomResizedCrop(224), RandomHorizontalFlip()).pad_channels_to(4).seed(seed)
            .device_decode(device_decode, cpu_share=cpu_share, interpolate_chroma=interpolate_chroma,
                           refused=refused))


def pipeline_alone(ds, workers: int, batch: int, epochs: int) -> dict:
    from tr.data import Preprocessor, PreprocessorSettings, TransferStation

    s = chain(PreprocessorSettings().dataset(ds), workers).commit()
    with Preprocessor(s, TransferStation(batch, (224, 224, 4), "float16")) as pre:
        pre.epoch(0).close()
        n, t0 = 0, time.perf_counter()
        for e in range(1, epochs + 1):
            with pre.epoch(e) as run:
                for b in run.batches():
                    n += b.size
        dt = time.perf_counter() - t0
    return {"images_per_s": n / dt, "images": n, "seconds": dt}


def _schedule(sched, warmup: int):
    """The LR rises linearly over the first ``warmup`` epochs, step by step (0: none)."""
    return sched.warmup(warmup).step_by_batch() if warmup else sched


def end_to_end(a: argparse.Namespace, ds, classes: int) -> dict:
    from cnn import tr_model

    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.data import PREPROCESSOR_SETTING, reset_preprocessor_settings
    from tr.task.deep_learning import DeepLearningTask

    reset_preprocessor_settings()
    chain(PREPROCESSOR_SETTING.dataset(ds), a.workers, a.device_decode, a.interpolate_chroma,
          a.cpu_share if a.cpu_share == "auto" else float(a.cpu_share), a.seed, a.refused)
    settings = Settings().amp(True).manual_seed(a.seed).global_batch_size(a.batch).use_tf32(True)
    task = (DeepLearningTask(settings).device(a.device).quiet().model(tr_model(classes, a.model))
            .loss(CrossEntropyLoss().label_smoothing(LS))
            .optimizer(SGD().momentum(MOMENTUM).nesterov(True).weight_decay(WD))
            .scheduler(_schedule(ConstantLR().base_lr(a.lr), a.warmup))
            .total_epochs(a.epochs + 1).validate_every(a.epochs + 2))
    t0 = time.perf_counter()
    task.compile()
    compile_s = time.perf_counter() - t0
    first = task.run(1).history[-1]  # capture, pages in
    feeder = task.feeder
    samples = feeder.num_samples(True)  # what an epoch trains on
    epochs = []
    for _ in range(a.epochs):
        rec = task.run(1).history[-1]
        t = feeder.last_epoch_times()
        row = {"seconds": rec.seconds, "images_per_s": samples / rec.seconds, "train_loss": rec.train_loss,
               "skipped_steps": rec.skipped_steps}
        if t is not None:  # the CPU workers' accounts (the device decode has none: its feeder runs in the loop)
            row.update(trainer_waited=t.consumer_wait_s[0] / rec.seconds, workers_busy=t.busy_fraction(rec.seconds),
                       workers_blocked_on_zone=sum(t.wait_s) / (t.workers * rec.seconds),
                       us_per_sample=1e6 * sum(t.work_s) / max(1, sum(t.items)))
            print(f"end to end epoch: {row['images_per_s']:8.0f} images/s, trainer waited "
                  f"{100 * row['trainer_waited']:4.1f} %, workers busy {100 * row['workers_busy']:4.1f} %, blocked on "
                  f"a full zone {100 * row['workers_blocked_on_zone']:4.1f} %, {row['us_per_sample']:.0f} us/sample, "
                  f"loss {rec.train_loss:.3f}", flush=True)
        else:
            row.update(decoded_on_cpu=getattr(feeder, "cpu_decoded", None),
                       refused_by_nvjpeg=getattr(feeder, "hybrid_decoded", None),
                       cpu_share=getattr(feeder, "cpu_share", None), cpu_shared=getattr(feeder, "cpu_shared", None),
                       times=dict(getattr(feeder, "times", {})))
            print(f"end to end epoch (device decode): {row['images_per_s']:8.0f} images/s, "
                  f"{row['decoded_on_cpu']} refused files on the CPU, {row['refused_by_nvjpeg']} by nvJPEG's "
                  f"decoupled decoder and {row['cpu_shared']} more (share {row['cpu_share']}) "
                  f"decoded on the CPU, loss {rec.train_loss:.3f}; {row['times']}", flush=True)
        epochs.append(row)
    best = max(e["images_per_s"] for e in epochs)
    mean = samples * len(epochs) / sum(e["seconds"] for e in epochs)
    out = {"compile_s": compile_s, "first_epoch_s": first.seconds, "first_epoch_loss": first.train_loss,
           "first_epoch_skipped_steps": first.skipped_steps, "samples_per_epoch": samples,
           "epochs": epochs, "end_to_end_images_per_s": mean, "end_to_end_best_epoch_images_per_s": best,
           "calibration": getattr(feeder, "calibration", None)}  # (device decode: "auto"'s measurements, the probe)
    if a.quick:
        return out
    step_s = task.time_train_step(a.steps, 5)
    return {**out, "step_alone_images_per_s": a.batch / step_s, "step_alone_ms": 1e3 * step_s,
            "end_to_end_vs_step": mean / (a.batch / step_s)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_train_images"))
    ap.add_argument("--make", type=int, default=12800, help="JPEGs to generate when --images does not exist")
    ap.add_argument("--level", type=int, default=0, help="DTS level of the pack (0-3)")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--model", default="resnet50", choices=("resnet50", "vgg16_bn"))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (after one untimed)")
    ap.add_argument("--steps", type=int, default=30, help="launches of the step alone")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=0,
                    help="epochs of linear LR warmup, by batch (0: a constant LR from the first step)")
    ap.add_argument("--seed", type=int, default=0, help="the task's and the chain's seed")
    ap.add_argument("--quick", action="store_true",
                    help="training epochs only: no pipeline-alone and no step-alone rows (a stability sweep)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--device-decode", action="store_true",
                    help="decode the JPEGs on the device (PREPROCESSOR_SETTING.device_decode, issue [13])")
    ap.add_argument("--interpolate-chroma", action="store_true",
                    help="with --device-decode: both decoders interpolate chroma (the CPU pipeline's pixels)")
    ap.add_argument("--baseline", action="store_true",
                    help="pack with --baseline (progressive files re-coded losslessly: the engine takes all)")
    ap.add_argument("--refused", choices=("nvjpeg", "cpu", "auto"), default="cpu",
                    help="with --device-decode: who decodes the files the JPEG engine refuses (progressive); auto: "
                         "both timed in training, the faster kept")
    ap.add_argument("--cpu-share", default="auto", help="with --device-decode: the CPU's share, 0..1 or auto")
    ap.add_argument("--json", help="write the figures here, or 'auto' (benchmarks/results/)")
    a = ap.parse_args(argv)
    from tr.data import DtsImages, _native

    if not _native.jpeg_available():
        raise SystemExit("this tr-data build has no libjpeg-turbo: JPEG packs cannot be decoded")
    packed = make_pack(a.images, a.make, a.level, a.workers, a.baseline)
    ds = DtsImages(packed)
    alone = None if a.quick else pipeline_alone(ds, a.workers, a.batch, 2)
    if alone is not None:
        print(f"pipeline alone, {a.workers} workers: {alone['images_per_s']:.0f} images/s", flush=True)
    e2e = end_to_end(a, ds, ds.num_classes)
    losses = ", ".join(f"{e['train_loss']:.3f} ({e['skipped_steps']} skipped)" for e in e2e["epochs"])
    print(f"seed {a.seed}: losses {e2e['first_epoch_loss']:.3f} ({e2e['first_epoch_skipped_steps']} skipped), "
          f"{losses}", flush=True)
    if a.quick:
        print(f"{a.model} from a level-{a.level} DTS pack: end to end {e2e['end_to_end_images_per_s']:.0f} images/s",
              flush=True)
    else:
        print(f"{a.model} from a level-{a.level} DTS pack, {a.workers} workers: end to end "
              f"{e2e['end_to_end_images_per_s']:.0f} images/s "
              f"(best epoch {e2e['end_to_end_best_epoch_images_per_s']:.0f})"
              f", step alone {e2e['step_alone_images_per_s']:.0f} images/s ({e2e['step_alone_ms']:.1f} ms): "
              f"{100 * e2e['end_to_end_vs_step']:.1f} %; pipeline alone {alone['images_per_s']:.0f}", flush=True)
    if a.json:
        tag = ("_baseline" if a.baseline else "") + (
            ("_device_decode" + ("_interpolated" if a.interpolate_chroma else "")
             + (f"_refused_{a.refused}" if a.refused != "cpu" else "")) if a.device_decode else "")
        out = (HERE / "results" / f"imagenet_train_{a.model}_dts{a.level}{tag}_{date.today()}.json"
               if a.json == "auto" else Path(a.json))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": sys.argv, "model": a.model, "batch": a.batch, "level": a.level,
                                   "baseline": a.baseline, "seed": a.seed, "lr": a.lr,
                                   "warmup_epochs": a.warmup,
                                   "cpu_share_setting": a.cpu_share, "refused": a.refused,
                                   "workers": a.workers, "cores": len(os.sched_getaffinity(0)),
                                   "python": platform.python_version(), "images": len(ds.load("train")),
                                   "pipeline_alone": alone, **e2e}, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
