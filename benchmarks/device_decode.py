"""The ImageNet training chain with the JPEG decode on the device (issue [13]): decoded + augmented images/s.

Rows, in one run, over the same JPEG files (tools/make_image_folder.py: scikit-image's photographs, short sides
--min-side..--max-side, some progressive, some 4:4:4):

* ``tr device decode``: PREPROCESSOR_SETTING.device_decode(True) feeding a DeepLearningTask whose model is one fc on
  the input (its step is a small GEMM, timed alone too, so the epoch is the pipeline's time): per batch the host
  plans the geometry and stages the compressed bytes, nvJPEG decodes each crop's region on the transfer stream (the
  hardware engine; libjpeg-turbo for what it refuses, or in the "refused to nvJPEG's decoupled decoder" rows
  nvJPEG's CPU-Huffman decoder), and the transfer graph's image_resample resizes, flips and normalises to FP16 NHWC
  with 4 channels. From the folder, the DTS pack and the DTS pack made with --baseline (progressive files re-coded:
  the hardware engine takes them); the "GPU-hybrid backend" row forces the backend a GPU without a JPEG engine gets
  (nvJPEG's decoupled API for every file). The CPU's share of each batch (libjpeg-turbo on all cores but two,
  alongside nvJPEG) is measured at compile ("auto") except in the baseline pack's --shares rows: 0 (nvJPEG alone), 1
  (libjpeg-turbo alone, the CPU pipeline's pixels); the "refused auto" row times the decoupled decoder against
  libjpeg-turbo for the refusals in its first batches and keeps the faster. The first epoch (capture, caches)
  untimed; images/s = samples / epoch seconds. Chroma replicated (device_decode's default, nvJPEG's engine at full
  speed) except in the "interpolated chroma" row (both decoders interpolate, as the CPU pipeline). The last tr row
  adds ColorJitter(0.4, 0.4, 0.4, 0.1) after the crop (image_jitter in the transfer graph).
* ``torchvision nvJPEG``: torchvision.io.decode_jpeg of batches of files on the GPU (nvJPEG), whole images, then
  per image torchvision.transforms.v2 RandomResizedCrop(224, antialias) and RandomHorizontalFlip on the GPU,
  stacked and normalised to FP16: what a PyTorch user who decodes on the GPU runs; and the decode alone. From
  the folder's files, and from the baseline pack's (no progressive file: the hardware engine takes each).
* ``DALI``: NVIDIA DALI's ResNet-50 training pipeline (benchmarks/dali_twin.py: readers.file, the "mixed"
  image_random_crop decoder with the hardware engine taking ``hw_decoder_load`` of each batch, antialiased resize,
  crop_mirror_normalize to FP16 HWC with 4 channels), from the folder and from the baseline pack's files written
  as a folder; at DALI's default load 0.65 and at 0.9 (with --device cpu: DALI's CPU decoder, a smoke test). Run
  where DALI is installed (--no-dali to leave it out).
* ``tr CPU pipeline``: tr.data's worker pipeline on every core (benchmarks/imagenet_pipeline.py's tr row, [10]),
  from the folder and from the baseline pack (the files each tr device row reads).

    python benchmarks/device_decode.py --images /tmp/tr_bench_images --make 2000 --json auto   # H200
    python benchmarks/device_decode.py --device cpu --make 40 --batch 8 --epochs 1 --no-torchvision   # smoke test
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
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def tr_device_rate(ds, device: str, batch: int, epochs: int, size: int, backend: str, jitter: bool = False,
                   share: float | str = "auto", interpolate: bool = False, refused: str = "cpu") -> dict:
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.norm import NormMode
    from tr.core.settings import Settings
    from tr.data import (
        PREPROCESSOR_SETTING,
        ColorJitter,
        RandomHorizontalFlip,
        RandomResizedCrop,
        reset_preprocessor_settings,
    )
    from tr.graph.blueprint import fc, seq
    from tr.task.deep_learning import DeepLearningTask

    reset_preprocessor_settings()
    chain = [RandomResizedCrop(size)] + ([ColorJitter(0.4, 0.4, 0.4, 0.1)] if jitter else []) + [RandomHorizontalFlip()]
    PREPROCESSOR_SETTING.dataset(ds).normalization(NormMode.IMAGENET).seed(1).pad_channels_to(4) \
        .train_transforms(*chain).device_decode(True, backend, cpu_share=share, interpolate_chroma=interpolate,
                                             refused=refused)
    task = (DeepLearningTask(Settings().amp(True).manual_seed(1).global_batch_size(batch)).device(device).quiet()
            .model(seq(fc(ds.num_classes))).optimizer(SGD()).scheduler(ConstantLR(0.01))
            .total_epochs(epochs + 1))
    t0 = time.perf_counter()
    task.compile()
    compile_s = time.perf_counter() - t0
    feeder = task.feeder
    task.run(1)  # capture done; caches and the decoders' first batches
    samples = feeder.num_samples(True)
    rates, cpu, shared, hybrid, times = [], [], [], [], []
    for _ in range(epochs):
        rec = task.run(1).history[-1]
        rates.append(samples / rec.seconds)
        cpu.append(feeder.cpu_decoded)
        shared.append(feeder.cpu_shared)
        hybrid.append(getattr(feeder, "hybrid_decoded", 0))
        times.append({"epoch_s": rec.seconds, **{k: round(v, 4) for k, v in feeder.times.items()}})
    step_s = task.time_train_step(20, 5)
    dec = getattr(feeder, "_decoder", None)
    decoders = [dec.backend] if dec is not None else ["libjpeg-turbo (CPU backend)"]
    if dec is not None and dec.decoupled:
        decoders.append(f"decoupled: {dec.decoupled}")
    return {"images_per_s": max(rates), "epochs_images_per_s": rates, "samples": samples, "compile_s": compile_s,
            "decoders": decoders, "decoded_on_cpu_per_epoch": cpu, "cpu_share_per_epoch": shared,
            "cpu_share": feeder.cpu_share, "cpu_share_setting": share, "cpu_threads": feeder.cpu_threads,
            "interpolate_chroma": interpolate, "refused": refused, "refused_by_nvjpeg_per_epoch": hybrid,
            "refused_probe": getattr(feeder, "calibration", {}).get("refused_probe"),
            "side_bytes": getattr(feeder, "side_bytes", 0),
            "calibration": feeder.calibration, "step_alone_ms": 1e3 * step_s, "times": times}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def torchvision_rate(root: Path | list[bytes], batch: int, epochs: int, size: int, augment: bool,
                     jitter: bool = False) -> dict:
    """``root``: a folder of class folders, or the files' bytes (the baseline pack's)."""
    import torch
    import torchvision
    from torchvision.transforms import v2

    if isinstance(root, Path):
        data = [torchvision.io.read_file(str(p)) for p in _files(root)]
    else:
        data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in root]
    crop = v2.Compose([v2.RandomResizedCrop(size, antialias=True),
                       *([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)] if jitter else []), v2.RandomHorizontalFlip()])
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255
    g = torch.Generator().manual_seed(0)

    def epoch() -> int:
        order = torch.randperm(len(data), generator=g).tolist()
        n = 0
        for k in range(0, len(order) - batch + 1, batch):
            imgs = torchvision.io.decode_jpeg([data[i] for i in order[k:k + batch]], device="cuda",
                                              mode=torchvision.io.ImageReadMode.RGB)
            if augment:
                x = torch.stack([crop(im) for im in imgs]).float()
                x = ((x - mean) / std).to(torch.float16).contiguous(memory_format=torch.channels_last)
            n += len(imgs)
        torch.cuda.synchronize()
        return n

    epoch()  # warm: nvJPEG's handles and buffers
    n, t0 = 0, time.perf_counter()
    for _ in range(epochs):
        n += epoch()
    dt = time.perf_counter() - t0
    return {"images_per_s": n / dt, "images": n}


def dali_rows(root: Path, based, a: argparse.Namespace) -> dict[str, dict]:
    """DALI's pipeline over the folder and over the baseline pack's files (written as class folders)."""
    from dali_twin import dali_rate, dali_version, write_files

    version = dali_version()
    if version is None:
        print("DALI is not installed: no DALI rows", flush=True)
        return {}
    base = based.load("train")
    files = [base.encoded_bytes(i) for i in range(len(base))]
    labels = [int(c) for c in base.labels]
    base_root = write_files(files, labels, a.images.parent / (a.images.name + "_baseline_files"))
    rows = {}
    for what, where in (("", root), (", baseline files", base_root)):
        for load in (0.65, 0.9) if a.device == "cuda" else (0.0,):
            name = (f"DALI {version} mixed decoder, hw_decoder_load {load}{what}" if a.device == "cuda" else
                    f"DALI {version} CPU decoder{what}")
            try:  # (an optional twin: its failure is recorded, the run goes on)
                rows[name] = dali_rate(where, a.batch, a.epochs, a.size, a.device, load)
            except Exception as e:  # noqa: BLE001
                rows[name] = {"error": f"{type(e).__name__}: {e}"}
                print(f"{name:<34} failed: {rows[name]['error'][:2000]}", flush=True)
                continue
            print(f"{name:<34} {rows[name]['images_per_s']:9.0f} images/s", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images"))
    ap.add_argument("--make", type=int, default=2000, help="images to generate when --images does not exist")
    ap.add_argument("--min-side", type=int, default=300)
    ap.add_argument("--max-side", type=int, default=500)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--nvjpeg", choices=("auto", "hardware", "gpu"), default="auto", help="tr's first nvJPEG backend")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per row (after one untimed)")
    ap.add_argument("--shares", default="0,auto,1", help="the CPU shares of the DTS baseline rows (0: nvJPEG alone, "
                    "1: libjpeg-turbo alone, auto: measured at compile)")
    ap.add_argument("--no-torchvision", action="store_true")
    ap.add_argument("--no-cpu-pipeline", action="store_true")
    ap.add_argument("--no-dali", action="store_true")
    ap.add_argument("--json", help="write the figures here, or 'auto' (benchmarks/results/)")
    a = ap.parse_args(argv)
    if not a.images.exists():
        from make_image_folder import make_image_folder

        make_image_folder(a.images, classes=10, per_class=max(1, a.make // 10), min_side=a.min_side,
                          max_side=a.max_side, seed=0)
    root = a.images / "train" if (a.images / "train").exists() else a.images  # (class folders, or train/ of them)
    from tr.data import DtsImages, ImageFolder
    from tr.data.dts import pack

    packed, based = a.images.parent / (a.images.name + "_dts"), a.images.parent / (a.images.name + "_dts_baseline")
    if not (packed / "train.dts").exists():
        pack(a.images, packed, workers=os.cpu_count() or 1)
    if not (based / "train.dts").exists():
        pack(a.images, based, workers=os.cpu_count() or 1, baseline=True)
    files = _files(root)
    mib = sum(p.stat().st_size for p in files) / 2**20
    print(f"{len(files)} JPEGs, {mib:.0f} MiB; batch {a.batch}, {a.size}x{a.size}, FP16 NHWC", flush=True)
    rows: dict[str, dict] = {}
    shares = [s if s == "auto" else float(s) for s in a.shares.split(",")]
    # (name, data set, ColorJitter, CPU share, interpolated chroma, who decodes the engine's refusals, backend)
    # (name, data set, ColorJitter, CPU share, interpolated chroma, who decodes the engine's refusals, backend)
    nv = ", refused to nvJPEG's decoupled decoder"
    runs = [("tr device decode, folder", ImageFolder(a.images), False, "auto", False, "cpu", a.nvjpeg),
            (f"tr device decode, folder{nv}", ImageFolder(a.images), False, "auto", False, "nvjpeg", a.nvjpeg),
            ("tr device decode, folder, refusals' decoder timed (refused auto)", ImageFolder(a.images), False, "auto",
             False, "auto", a.nvjpeg),
            ("tr device decode, DTS", DtsImages(packed), False, "auto", False, "cpu", a.nvjpeg),
            (f"tr device decode, DTS{nv}", DtsImages(packed), False, "auto", False, "nvjpeg", a.nvjpeg)]
    if a.device == "cuda":  # what a GPU without a JPEG engine gets
        runs += [("tr device decode, folder, GPU-hybrid backend", ImageFolder(a.images), False, "auto", False,
                  "cpu", "gpu")]
    runs += [(f"tr device decode, DTS baseline, CPU share {s}", DtsImages(based), False, s, False, "cpu", a.nvjpeg)
             for s in shares]
    runs += [("tr device decode, DTS baseline, interpolated chroma", DtsImages(based), False, "auto", True, "cpu",
              a.nvjpeg),
             ("tr device decode, DTS baseline, ColorJitter", DtsImages(based), True, "auto", False, "cpu", a.nvjpeg)]
    for name, ds, jit, share, interp, refused, backend in runs:
        rows[name] = tr_device_rate(ds, a.device, a.batch, a.epochs, a.size, backend, jit, share, interp, refused)
        r = rows[name]
        print(f"{name:<34} {r['images_per_s']:9.0f} images/s ({', '.join(r['decoders'])}; CPU share "
              f"{r['cpu_share']} of {r['cpu_threads']} threads; the engine's refusals by libjpeg-turbo "
              f"{r['decoded_on_cpu_per_epoch']}, by nvJPEG's decoupled decoder {r['refused_by_nvjpeg_per_epoch']} "
              f"an epoch; step alone {r['step_alone_ms']:.2f} ms; last epoch {r['times'][-1]})", flush=True)
    if a.device == "cuda" and not a.no_torchvision:
        for name, aug, jit in (("torchvision nvJPEG + v2 crop on the GPU", True, False),
                               ("torchvision nvJPEG + v2 crop + ColorJitter on the GPU", True, True),
                               ("torchvision nvJPEG decode alone", False, False)):
            rows[name] = torchvision_rate(root, a.batch, a.epochs, a.size, aug, jit)
            print(f"{name:<34} {rows[name]['images_per_s']:9.0f} images/s", flush=True)
        base = DtsImages(based).load("train")
        base_files = [base.encoded_bytes(i) for i in range(len(base))]
        for name, aug in (("torchvision nvJPEG + v2 crop on the GPU, baseline files", True),
                          ("torchvision nvJPEG decode alone, baseline files", False)):
            rows[name] = torchvision_rate(base_files, a.batch, a.epochs, a.size, aug)
            print(f"{name:<34} {rows[name]['images_per_s']:9.0f} images/s", flush=True)
    if not a.no_dali:
        rows.update(dali_rows(root, DtsImages(based), a))
    if not a.no_cpu_pipeline:
        from imagenet_pipeline import tr_rate

        workers = os.cpu_count() or 1
        for what, ds in (("", ImageFolder(a.images)), (", DTS baseline", DtsImages(based))):  # (each tr row's files)
            rate, n = tr_rate(ds, workers, a.batch if a.batch <= 64 else 64, a.epochs)
            name = f"tr CPU pipeline, {workers} workers{what}"
            rows[name] = {"images_per_s": rate, "images": n}
            print(f"{name:<34} {rate:9.0f} images/s", flush=True)
    if a.json:
        out = (HERE / "results" / f"imagenet_device_decode_{a.device}_{date.today()}.json" if a.json == "auto"
               else Path(a.json))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": sys.argv, "images": len(files), "mib": mib, "batch": a.batch,
                                   "size": a.size, "device": a.device, "python": platform.python_version(),
                                   "cores": os.cpu_count(), "rows": rows}, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
