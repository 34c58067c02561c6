"""Preprocessing throughput: tr.data's native Preprocessor vs torchvision transforms in a torch DataLoader.

Two workloads, each with 1, 2 and all cores' worth of workers (same count on both sides):
- mnist_chain: the seed's MNIST chain Pad(2), RandomCrop(28), RandomRotation(20, fill 0),
  RandomScale(0.8, 1.2), RandomErasing(0.5), NormMode.MNIST -> FP32 (28x28x1). torchvision twin:
  v2 Pad, RandomCrop, RandomRotation(bilinear), RandomAffine(scale=(0.8, 1.2)) (its nearest RandomScale),
  ToDtype, Normalize, RandomErasing. Real MNIST from data/mnist when present, else random digits.
- imagenet_style: RandomResizedCrop(224), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), ImageNet
  normalisation to FP16, on synthetic 500x375 RGB images held in memory. torchvision twin: the same v2
  transforms on uint8 CHW tensors, ToDtype/Normalize, then .half().

Both sides deliver whole batches to the main process (tr: TransferStation acquire/release; torch:
DataLoader iteration with its default collation). Prints one JSON line per result.

    python benchmarks/preprocess.py [--quick] [--workers 1,2] [--workload mnist_chain]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

# Spinning BLAS threads in the main process would steal the cores the workers run on.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def n_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


DEVICE = f"cpu: {cpu_name()} ({n_cores()} cores)"


def emit(framework: str, workload: str, workers: int, value: float, **extra) -> None:
    rec = {
        "framework": framework,
        "workload": workload,
        "workers": workers,
        "metric": "images_per_s",
        "value": round(value, 1),
        "per_worker": round(value / workers, 1),
        "device": DEVICE,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    rec.update(extra)
    print(json.dumps(rec), flush=True)


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def mnist_data(n: int) -> tuple[np.ndarray, np.ndarray, str]:
    path = ROOT / "data" / "mnist"
    try:
        from tr.data import MNIST

        sp = MNIST(path).load("train")
        return np.array(sp.images[:n]), sp.labels[:n], "mnist-train"  # a writable copy (torch wants one)
    except Exception:  # no files: random digits of the same shape
        rng = np.random.default_rng(0)
        return rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int32), "random"


def imagenet_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    # smooth-ish synthetic photos: low-frequency colour fields plus noise
    base = rng.integers(0, 256, (n, 24, 32, 3), dtype=np.uint8).repeat(16, axis=1).repeat(16, axis=2)[:, :375, :500]
    noise = rng.integers(0, 32, (n, 375, 500, 3), dtype=np.uint8)
    return np.ascontiguousarray(base // 2 + noise), rng.integers(0, 1000, n).astype(np.int32)


# ------------------------------------------------------------------------------------------------
# tr
# ------------------------------------------------------------------------------------------------
def tr_chain(workload: str):
    import tr.data as d

    if workload == "mnist_chain":
        return [d.Pad(2), d.RandomCrop(28), d.RandomRotation(20, fill=0), d.RandomScale(0.8, 1.2), d.RandomErasing(0.5)]
    return [d.RandomResizedCrop(224), d.RandomHorizontalFlip(), d.ColorJitter(0.4, 0.4, 0.4)]


def measure(run_epoch, min_time: float) -> float:
    """images/s over whole epochs after one warm-up epoch, running epochs until min_time has passed."""
    run_epoch()
    n, t0 = 0, time.perf_counter()
    while True:
        n += run_epoch()
        dt_ = time.perf_counter() - t0
        if dt_ >= min_time:
            return n / dt_


def run_tr(workload: str, images, labels, workers: int, batch: int, min_time: float) -> float:
    import tr.data as d
    from tr.core.norm import NormMode

    norm = NormMode.MNIST if workload == "mnist_chain" else NormMode.IMAGENET
    dtype = "float32" if workload == "mnist_chain" else "float16"
    s = (
        d.PreprocessorSettings()
        .dataset(d.ArrayDataset((images, labels)))
        .preprocess_workers(workers)
        .normalization(norm)
        .train_transforms(*tr_chain(workload))
        .seed(1)
        .commit()
    )
    st = d.TransferStation(batch, s.sample_shape(), dtype)
    with d.Preprocessor(s, st) as pre:
        epoch = iter(range(10**9))

        def one_epoch() -> int:
            n = 0
            with pre.epoch(next(epoch)) as run:
                for k in run:
                    b = st.acquire(k)
                    n += b.size
                    st.release(k)
            return n

        return measure(one_epoch, min_time)


# ------------------------------------------------------------------------------------------------
# torchvision
# ------------------------------------------------------------------------------------------------
class _TorchSet:
    def __init__(self, images, labels, workload: str):
        self.images, self.labels, self.workload = images, labels, workload
        self.tf = None

    def _build(self):
        import torch
        from torchvision.transforms import v2

        if self.workload == "mnist_chain":
            self.tf = v2.Compose(
                [
                    v2.Pad(2),
                    v2.RandomCrop(28),
                    v2.RandomRotation(20, interpolation=v2.InterpolationMode.BILINEAR, fill=0),
                    v2.RandomAffine(degrees=0, scale=(0.8, 1.2), interpolation=v2.InterpolationMode.BILINEAR),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize([0.1307], [0.3081]),
                    v2.RandomErasing(0.5),
                ]
            )
        else:
            self.tf = v2.Compose(
                [
                    v2.RandomResizedCrop(224, antialias=True),
                    v2.RandomHorizontalFlip(),
                    v2.ColorJitter(0.4, 0.4, 0.4),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize(list(IMAGENET_MEAN), list(IMAGENET_STD)),
                    v2.ToDtype(torch.float16),
                ]
            )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        import torch

        if self.tf is None:
            self._build()
        x = torch.from_numpy(self.images[i]).permute(2, 0, 1)
        return self.tf(x), int(self.labels[i])


def run_torch(workload: str, images, labels, workers: int, batch: int, min_time: float) -> float:
    import torch

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        _TorchSet(images, labels, workload),
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        persistent_workers=True,
        prefetch_factor=4,
    )

    def one_epoch() -> int:
        return sum(x.shape[0] for x, _ in loader)

    return measure(one_epoch, min_time)  # the workers stop with the loader


# ------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer images and epochs")
    ap.add_argument("--workers", default="", help="comma-separated worker counts (default 1, 2, all cores)")
    ap.add_argument("--workload", default="", help="mnist_chain or imagenet_style (default both)")
    ap.add_argument("--framework", default="", help="tr or torchvision (default both)")
    args = ap.parse_args()

    counts = sorted({int(w) for w in args.workers.split(",")} if args.workers else {1, 2, n_cores()})
    workloads = [args.workload] if args.workload else ["mnist_chain", "imagenet_style"]
    frameworks = [args.framework] if args.framework else ["tr", "torchvision"]
    min_time = 1.0 if args.quick else 3.0
    for wl in workloads:
        if wl == "mnist_chain":
            images, labels, source = mnist_data(10000)
            batch = 256
        else:
            images, labels = imagenet_data(256 if args.quick else 512)
            source, batch = "synthetic-500x375", 64
        for w in counts:
            for fw in frameworks:
                run = run_tr if fw == "tr" else run_torch
                rate = run(wl, images, labels, w, batch, min_time)
                emit(fw, wl, w, rate, images=len(labels), data=source, batch=batch)


if __name__ == "__main__":
    main()
