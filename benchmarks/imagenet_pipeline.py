"""The ImageNet training chain on the CPU: JPEG decode + RandomResizedCrop(224) + flip + normalisation, images/s.

Rows, in one run, each over the same JPEG files:
* tr from an ImageNet-style folder (tr.data.ImageFolder: files in memory, decoded by libjpeg-turbo in the
  native worker threads, only the rows and iMCU columns RandomResizedCrop reads), writing FP16 NHWC with 4
  channels (the AMP input);
* tr from a DTS pack of the same folder (tr.data.DtsImages: the pack mapped, not copied);
* tr from a DTS pack made with ``--baseline`` (progressive files re-coded losslessly as baseline at packing:
  the same pixels, decoded ~2.5x faster);
* tr from the folder decoding every file whole (set_window_decode(False): the same bytes, what the window
  decode saves);
* tr from the folder with settings.jpeg_dct_scaling (libjpeg-turbo's 1/2, 1/4, 1/8 reductions where the crop is
  at least that much over 224 px: not the same bytes);
* tr from the folder with SDMP 2 and 4 (settings.sdmp_factor: each file decoded once per k epochs, the other
  epochs' samples computed from that decode and replayed: the same bytes; timed over 4 epochs, a whole
  number of groups);
* torchvision's ImageFolder + DataLoader (Pillow decode, transforms.RandomResizedCrop, RandomHorizontalFlip,
  ToTensor, Normalize; worker processes), the loader a PyTorch user runs.
Each row with 1 worker (one core) and with every core. The folder is made by tools/make_image_folder.py from
scikit-image's photographs when it does not exist (short sides 300-500 px, quality 75-95).

    python benchmarks/imagenet_pipeline.py --images /tmp/bench_images --make 2000 --json auto
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def tr_rate(ds, workers: int, batch: int, epochs: int, window: bool = True, sdmp: int = 1,
            dct: bool = False, chain: str = "train") -> tuple[float, int]:
    """chain "train": RandomResizedCrop(224) + flip; "val": Resize(256) + CenterCrop(224) (as training epochs)."""
    from tr.core.norm import NormMode
    from tr.data import (
        CenterCrop,
        Preprocessor,
        PreprocessorSettings,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        TransferStation,
        _native,
    )

    s = (PreprocessorSettings().dataset(ds).preprocess_workers(workers).normalization(NormMode.IMAGENET)
         .train_transforms(*((RandomResizedCrop(224), RandomHorizontalFlip()) if chain == "train"
                             else (Resize(256), CenterCrop(224))))
         .val_transforms(Resize(256), CenterCrop(224)).pad_channels_to(4).sdmp_factor(sdmp).seed(1)
         .jpeg_dct_scaling(dct))
    n = 0
    _native.set_window_decode(window)
    with Preprocessor(s, TransferStation(batch, (224, 224, 4), "float16")) as pre:
        with pre.epoch(0, True) as run:  # warm: pages in, threads up
            for _b in run.batches(0):
                pass
        t0 = time.perf_counter()
        for e in range(1, epochs + 1):
            with pre.epoch(e, True) as run:
                for b in run.batches(0):
                    n += len(b.valid_labels)
        dt = time.perf_counter() - t0
    _native.set_window_decode(True)
    return n / dt, n


def torchvision_rate(root: Path, workers: int, batch: int, epochs: int, chain: str = "train") -> tuple[float, int]:
    import torch
    from torchvision import datasets, transforms

    head = ([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()] if chain == "train"
            else [transforms.Resize(256), transforms.CenterCrop(224)])
    tf = transforms.Compose([*head,
                             transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    ds = datasets.ImageFolder(str(root), tf)
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                         persistent_workers=True, prefetch_factor=4)
    for _ in loader:  # warm: workers up, files in the page cache
        pass
    n, t0 = 0, time.perf_counter()
    for _ in range(epochs):
        for x, _y in loader:
            n += len(x)
    return n / (time.perf_counter() - t0), n


def interleaved_vs_torchvision(ds, base_ds, root: Path, batch: int, n: int, rate_of, tv_rate) -> dict:
    """n rounds of one-worker epochs, tr folder, tr baseline DTS pack, then torchvision, alternated so that the
    machine's drift (a single call's figure varies by ~15 % on the H200 machine) hits all alike; each ratio is
    the median of the rounds' ratios."""
    pairs = []
    for i in range(max(0, n)):
        t = rate_of(ds, 1, batch, 1)[0]
        b = rate_of(base_ds, 1, batch, 1)[0]
        v = tv_rate(root, 1, batch, 1)[0]
        pairs.append({"tr_folder": t, "tr_dts_baseline": b, "torchvision": v, "ratio": t / v,
                      "ratio_dts_baseline": b / v})
        print(f"round {i + 1}/{n}: tr folder {t:7.1f}, tr dts baseline {b:7.1f}, torchvision {v:6.1f} images/s; "
              f"{t / v:.2f}x, {b / v:.2f}x", flush=True)
    if not pairs:
        return {}
    med = lambda k: float(statistics.median(p[k] for p in pairs))  # noqa: E731
    out = {"pairs": pairs, "median_ratio": med("ratio"), "median_tr_folder": med("tr_folder"),
           "median_torchvision": med("torchvision"), "min_ratio": min(p["ratio"] for p in pairs),
           "max_ratio": max(p["ratio"] for p in pairs), "median_ratio_dts_baseline": med("ratio_dts_baseline"),
           "median_tr_dts_baseline": med("tr_dts_baseline"),
           "min_ratio_dts_baseline": min(p["ratio_dts_baseline"] for p in pairs),
           "max_ratio_dts_baseline": max(p["ratio_dts_baseline"] for p in pairs)}
    print(f"1 worker, {n} interleaved rounds: tr folder vs torchvision median ratio {out['median_ratio']:.2f}x "
          f"(range {out['min_ratio']:.2f}-{out['max_ratio']:.2f}x); tr dts baseline vs torchvision "
          f"{out['median_ratio_dts_baseline']:.2f}x (range {out['min_ratio_dts_baseline']:.2f}-"
          f"{out['max_ratio_dts_baseline']:.2f}x); medians {out['median_tr_folder']:.0f}, "
          f"{out['median_tr_dts_baseline']:.0f} and {out['median_torchvision']:.0f} images/s", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images"))
    ap.add_argument("--make", type=int, default=2000, help="images to generate when --images does not exist")
    ap.add_argument("--chain", choices=("train", "val"), default="train",
                    help="val: Resize(256) + CenterCrop(224) (run as training epochs: no CPVS cache) instead")
    ap.add_argument("--min-side", type=int, default=300, help="short sides of generated images: from")
    ap.add_argument("--max-side", type=int, default=500, help="short sides of generated images: to")
    ap.add_argument("--workers", default=f"1,{os.cpu_count()}", help="comma-separated worker counts")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per row (after one warm-up epoch)")
    ap.add_argument("--ab", type=int, default=4,
                    help="also time tr's window decode against whole decodes, interleaved this many times (1 worker)")
    ap.add_argument("--vs-torchvision", type=int, default=0, metavar="N",
                    help="also N interleaved one-worker rounds of tr folder, tr baseline DTS and torchvision (one "
                         "epoch each, after its warm-up): the per-core ratios as medians of N rounds")
    ap.add_argument("--no-table", action="store_true",
                    help="skip the table of rows (only the interleaved runs)")
    ap.add_argument("--json", help="write the figures here, or 'auto' (benchmarks/results/)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: the rows of the decode on the device, benchmarks/device_decode.py (issue [13])")
    a = ap.parse_args(argv)
    if a.device == "cuda":
        from device_decode import main as device_main

        extra = ["--json", a.json] if a.json else []
        device_main(["--images", str(a.images), "--make", str(a.make), "--min-side", str(a.min_side), "--max-side",
                     str(a.max_side), "--epochs", str(a.epochs), *extra])
        return
    workers = sorted({int(w) for w in a.workers.split(",")})
    if min(workers) < 1 or a.batch < 1 or a.epochs < 1:
        ap.error("--workers, --batch and --epochs must be >= 1")
    root = a.images / "train"
    if not root.exists():
        from make_image_folder import make_image_folder

        t0 = time.perf_counter()
        classes = 10
        make_image_folder(a.images, classes=classes, per_class=a.make // classes, min_side=a.min_side,
                          max_side=a.max_side, seed=0, val_per_class=2)
        print(f"made {a.make} images in {a.images} ({time.perf_counter() - t0:.0f} s)", flush=True)
    from tr.data import DtsImages, ImageFolder
    from tr.data.dts import pack

    packed = a.images.parent / (a.images.name + "_dts")
    if not (packed / "train.dts").exists():
        pack(a.images, packed, workers=os.cpu_count() or 1)
    packed_base = a.images.parent / (a.images.name + "_dts_baseline")
    if not (packed_base / "train.dts").exists():
        t0 = time.perf_counter()
        done = pack(a.images, packed_base, workers=os.cpu_count() or 1, baseline=True)
        print(f"packed {packed_base} with --baseline in {time.perf_counter() - t0:.1f} s "
              f"({done[0].recoded} progressive files re-coded)", flush=True)
    files = sorted(root.glob("*/*"))
    mb = sum(p.stat().st_size for p in files) / 2**20
    print(f"{len(files)} JPEGs, {mb:.0f} MiB, mean {mb * 1024 / max(1, len(files)):.0f} KiB; "
          f"{os.cpu_count()} cores ({platform.processor() or platform.machine()})", flush=True)
    folder_ds, dts_ds, base_ds = ImageFolder(a.images), DtsImages(packed), DtsImages(packed_base)
    rows = []
    rate_of, tv_rate = partial(tr_rate, chain=a.chain), partial(torchvision_rate, chain=a.chain)
    for w in workers if not a.no_table else ():
        for name, fn in (("tr folder", lambda w=w: rate_of(folder_ds, w, a.batch, a.epochs)),
                         ("tr folder, whole decode", lambda w=w: rate_of(folder_ds, w, a.batch, a.epochs, False)),
                         ("tr folder, DCT scaling", lambda w=w: rate_of(folder_ds, w, a.batch, a.epochs, dct=True)),
                         ("tr folder, SDMP 2", lambda w=w: rate_of(folder_ds, w, a.batch, 4, sdmp=2)),
                         ("tr folder, SDMP 4", lambda w=w: rate_of(folder_ds, w, a.batch, 4, sdmp=4)),
                         ("tr dts", lambda w=w: rate_of(dts_ds, w, a.batch, a.epochs)),
                         ("tr dts baseline", lambda w=w: rate_of(base_ds, w, a.batch, a.epochs)),
                         ("torchvision ImageFolder+DataLoader", lambda w=w: tv_rate(root, w, a.batch, a.epochs))):
            rate, n = fn()
            rows.append({"row": name, "workers": w, "images_per_s": rate, "images_per_s_per_worker": rate / w,
                         "images": n})
            print(f"{name:<36} workers {w:2d}: {rate:8.1f} images/s ({rate / w:7.1f} per worker)", flush=True)
    by = {(r["row"], r["workers"]): r["images_per_s"] for r in rows}
    for w in workers if not a.no_table else ():
        tv = by[("torchvision ImageFolder+DataLoader", w)]
        print(f"workers {w}: tr folder {by[('tr folder', w)] / tv:.2f}x torchvision, tr dts "
              f"{by[('tr dts', w)] / tv:.2f}x, tr dts baseline {by[('tr dts baseline', w)] / tv:.2f}x")
    ab = {"window": [], "whole": []}
    for _ in range(max(0, a.ab)):  # alternated, so drift of the machine hits both alike
        ab["whole"].append(rate_of(folder_ds, 1, a.batch, 1, False)[0])
        ab["window"].append(rate_of(folder_ds, 1, a.batch, 1, True)[0])
    if a.ab > 0:
        med = {k: float(sorted(v)[len(v) // 2]) for k, v in ab.items()}
        print(f"window decode vs whole decodes, 1 worker, {a.ab} interleaved runs: median {med['window']:.0f} vs "
              f"{med['whole']:.0f} images/s ({100 * (med['window'] / med['whole'] - 1):+.1f} %)")
    vs = interleaved_vs_torchvision(folder_ds, base_ds, root, a.batch, a.vs_torchvision, rate_of, tv_rate)
    if a.json:
        import torch
        import torchvision

        out = (HERE / "results" / f"imagenet_pipeline_cpu{os.cpu_count()}_{date.today()}.json"
               if a.json == "auto" else Path(a.json))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "command": sys.argv, "images": len(files), "mib": mb, "cores": os.cpu_count(),
            "machine": platform.machine(), "python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "batch": a.batch, "epochs": a.epochs,
            "chain": ("RandomResizedCrop(224) + RandomHorizontalFlip" if a.chain == "train" else
                      "Resize(256) + CenterCrop(224)") + " + normalise (tr: FP16 NHWC 4 channels; "
                     "torchvision: FP32 NCHW tensors)", "rows": rows, "window_vs_whole_decode_1_worker": ab,
            "tr_vs_torchvision_1_worker": vs},
            indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
