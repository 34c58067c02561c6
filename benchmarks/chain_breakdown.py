"""Where one core's time goes in the ImageNet training chain, tr against Pillow/torchvision, per image.

On the same JPEG files, one thread, each stage timed alone over every file (best of --repeat passes):

* ``tr decode``: libjpeg-turbo through tr.data (``_native.decode_jpeg``: the whole image, RGB);
* ``tr chain on pixels``: RandomResizedCrop(224) + flip + ImageNet normalisation to FP16 NHWC with 4 channels
  (tr.data.Compose, native) on the decoded image;
* ``tr pipeline``: what a worker does per sample (window decode + chain), from a 1-worker Preprocessor;
* ``pillow decode``: ``Image.open(...).convert("RGB")`` (Pillow's bundled libjpeg-turbo);
* ``torchvision chain on PIL``: RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize;
* ``torchvision.io.decode_jpeg``: torchvision's own libjpeg-turbo decode, for reference.

Also the CPU features the SIMD paths need (AVX2, F16C, AVX-512), whether tr's F16C conversion is on, and the
libjpeg-turbo versions, since a VM may hide features and the two libraries may differ in version.

    python benchmarks/chain_breakdown.py --images /tmp/tr_bench_images_2k --limit 500 --json out.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def best_us(fn, items, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for x in items:
            fn(x)
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best / len(items)


def cpu_flags() -> dict:
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {f: f in flags for f in ("sse4_2", "avx", "avx2", "f16c", "fma", "avx512f", "avx512bw", "bmi2")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images_2k"))
    ap.add_argument("--limit", type=int, default=500, help="files (the first, sorted)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    import numpy as np
    import torch
    from PIL import Image, features
    from torchvision import io as tvio
    from torchvision import transforms as T

    from tr.core.norm import NormMode
    from tr.data import (
        Compose,
        ImageFolder,
        Preprocessor,
        PreprocessorSettings,
        RandomHorizontalFlip,
        RandomResizedCrop,
        TransferStation,
        _native,
    )

    torch.set_num_threads(1)
    root = a.images / "train" if (a.images / "train").is_dir() else a.images
    files = sorted(root.glob("*/*"))[: a.limit]
    if not files:
        raise SystemExit(f"no files under {root}")
    blobs = [p.read_bytes() for p in files]
    rows: dict[str, float] = {}
    rows["tr decode"] = best_us(lambda b: _native.decode_jpeg(b, False), blobs, a.repeat)
    pixels = [_native.decode_jpeg(b, False) for b in blobs]
    chain = Compose([RandomResizedCrop(224), RandomHorizontalFlip()], NormMode.IMAGENET, "float16", pad_channels_to=4)
    rows["tr chain on pixels"] = best_us(lambda x: chain(x, seed=1, index=0), pixels, a.repeat)
    rows["pillow decode"] = best_us(lambda b: Image.open(io.BytesIO(b)).convert("RGB"), blobs, a.repeat)
    pils = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
    tv = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    rows["torchvision chain on PIL"] = best_us(tv, pils, a.repeat)
    tens = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    rows["torchvision.io.decode_jpeg"] = best_us(tvio.decode_jpeg, tens, a.repeat)
    # the worker's own figure: one worker, one epoch of these files, EpochTimes' work time per sample
    sub = Path(f"/tmp/chain_breakdown_{os.getpid()}")
    for p in files:
        d = sub / p.parent.name
        d.mkdir(parents=True, exist_ok=True)
        (d / p.name).write_bytes(p.read_bytes())
    s = (PreprocessorSettings().dataset(ImageFolder(sub)).preprocess_workers(1).normalization(NormMode.IMAGENET)
         .train_transforms(RandomResizedCrop(224), RandomHorizontalFlip()).pad_channels_to(4).seed(1).commit())
    for window in (True, False):
        _native.set_window_decode(window)
        with Preprocessor(s, TransferStation(64, (224, 224, 4), "float16")) as pre:
            pre.epoch(0).close()
            best = float("inf")
            for e in range(1, a.repeat + 1):
                with pre.epoch(e) as run:
                    for _b in run.batches():
                        pass
                t = run.times()
                best = min(best, 1e6 * sum(t.work_s) / max(1, sum(t.items)))
        rows["tr pipeline (window decode)" if window else "tr pipeline (whole decode)"] = best
    _native.set_window_decode(True)
    sizes = np.array([im.size for im in pils])
    info = {"files": len(files), "mean_kib": sum(map(len, blobs)) / len(blobs) / 1024,
            "mean_size_wh": sizes.mean(axis=0).round(1).tolist(), "cpu_flags": cpu_flags(),
            "tr_f16c": {"cpu_has_f16c": _native.cpu_has_f16c(), "f16c_enabled": _native.f16c_enabled()},
            "pillow": Image.__version__ if hasattr(Image, "__version__") else None,
            "pillow_libjpeg_turbo": features.version("libjpeg_turbo"), "torch": torch.__version__}
    print(json.dumps(info))
    for k, v in rows.items():
        print(f"{k:<30} {v:8.0f} us/image ({1e6 / v:6.0f} images/s)")
    tr_total = rows["tr pipeline (window decode)"]
    tv_total = rows["pillow decode"] + rows["torchvision chain on PIL"]
    print(f"per core: tr pipeline {1e6 / tr_total:.0f} images/s, Pillow decode + torchvision chain "
          f"{1e6 / tv_total:.0f} images/s ({tv_total / tr_total:.2f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, **info, "us_per_image": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
