"""The seed's MNIST MLP benchmark on one GPU: tr vs PyTorch, same configuration, one script run.

Configuration (both frameworks): AMP, batch 200, AdamW wd 1e-4 (weights only), cosine schedule from 1e-3
with 5 warmup epochs (of 100), label smoothing 0.1, Pad(2) RandomCrop(28) RandomRotation(20)
RandomScale(0.8, 1.2) RandomErasing(0.5), MNIST normalisation, validation every epoch. First tr with
``device_augment`` (``tr-device``: the data set in the arena, the chain inside the captured step, no workers).
Then, for each worker count (default 8 then 16), both frameworks train on CPU workers; tr for --epochs,
PyTorch for --torch-epochs (its epochs/s is steady after the first epoch, which is excluded). The PyTorch
twin uses torchvision transforms, a DataLoader with pin_memory and persistent workers, torch.autocast + GradScaler.
The strongest twin, ``pytorch-gpu`` (benchmarks/mnist_torch_gpu.py: the data set and its augmentation on
the GPU, fused capturable AdamW, the whole step one CUDA graph), trains --gpu-twin-epochs once, after the
worker-count rows (it uses no workers). Compile / warm-up time is excluded. Prints one JSON line per result.

    python benchmarks/mlp_mnist.py --epochs 100 --torch-epochs 4 --workers 8,16 --gpu-twin-epochs 100
    python benchmarks/mlp_mnist.py --workers '' --gpu-twin-epochs 100 --json out.json   # tr-device vs the twin
    python benchmarks/mlp_mnist.py --workers '' --gpu-twin-epochs 100 --amp-dtype bf16  # BF16 on both sides
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "mnist"
sys.path.insert(0, str(Path(__file__).resolve().parent))
BATCH, BASE_LR, WD, LS, WARMUP_FRACTION = 200, 1e-3, 1e-4, 0.1, 0.05


def emit(framework, metric, value, **extra):
    try:
        import torch

        dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:
        dev = "?"
    print(json.dumps({"framework": framework, "workload": "mlp_mnist", "metric": metric,
                      "value": round(float(value), 4), "device": dev,
                      "date": datetime.date.today().isoformat(), **extra}), flush=True)


def run_tr(epochs: int, workers: int, device: str, device_augment: bool = False, seed: int = 123,
           ema: float | None = None, fc_gain: float | None = None, amp_dtype: str = "fp16") -> dict:
    """tr end to end. ``device_augment``: the data set in the arena, the chain inside the captured step
    (PREPROCESSOR_SETTING.device_augment; ``workers`` then only loads the files). ``ema``: also keep an EMA of
    the weights with this decay (task.ema) and validate it every epoch (best_ema_top1). ``fc_gain``: the FC
    weights' Kaiming-uniform gain (tr's default sqrt(2); 1/sqrt(3) is torch.nn.Linear's weight init, bound
    1/sqrt(fan_in); tr's biases start at 0 either way)."""
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
        fc,
        relu,
        reset_global_settings,
        seq,
    )
    from tr.data import reset_preprocessor_settings

    reset_global_settings()
    reset_preprocessor_settings()
    GLOBAL_SETTING.amp(amp_dtype).manual_seed(seed).global_batch_size(BATCH).input_resolution(28)
    PREPROCESSOR_SETTING.dataset("mnist", str(DATA)).preprocess_workers(workers).normalization(NormMode.MNIST) \
        .train_transforms(Pad(2), RandomCrop(28), RandomRotation(20.0, 0), RandomScale(0.8, 1.2),
                          RandomErasing(0.5)).device_augment(device_augment).commit()
    task = DeepLearningTask().device(device).quiet() \
        .model(seq(fc(1024, True), relu(), fc(512, True), relu(), fc(256, True), relu(), fc(10, True))) \
        .loss(CrossEntropyLoss().label_smoothing(LS)).total_epochs(epochs) \
        .optimizer(AdamW().weight_decay(WD)) \
        .scheduler(CosineAnnealingLR().base_lr(BASE_LR).warmup(round(epochs * WARMUP_FRACTION)))
    if ema is not None:
        task.ema(ema)
    if fc_gain is not None:
        from tr.algo import Initializer

        task.initializer(Initializer().gain(fc_gain))
    t0 = time.perf_counter()
    task.compile()
    compile_s = time.perf_counter() - t0
    result = task.run()
    step_us = task.time_train_step(200) * 1e6
    host_us = task.host_us_per_step(200)
    steps = task.feeder.steps(True)
    epoch_ms = 1e3 * result.seconds / result.epochs
    return {"epochs_per_s": result.epochs / result.seconds, "best_top1": result.best_top1,
            "best_ema_top1": result.best_ema_top1, "ema_decay": ema, "fc_gain": fc_gain, "epochs": result.epochs,
            "seconds": result.seconds, "step_us": step_us,
            "host_us_per_step": host_us, "compile_s": compile_s, "device_augment": device_augment,
            "launches_per_step": task.launches_per_step, "backend": task.backend.name,
            # where an epoch goes: its training steps on the device alone, and the rest (validation, the
            # host's waits, epoch boundaries)
            "epoch_ms": epoch_ms, "train_steps_ms": steps * step_us / 1e3,
            "rest_ms": epoch_ms - steps * step_us / 1e3}


def run_torch(epochs: int, workers: int, amp_dtype: str = "fp16") -> dict:
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2 as T

    torch.manual_seed(123)
    # shared-memory file descriptors run out in sandboxed containers with many workers
    torch.multiprocessing.set_sharing_strategy("file_system")
    dev = torch.device("cuda")
    norm = T.Normalize((0.1307,), (0.3081,))
    train_tf = T.Compose([T.ToImage(), T.Pad(2), T.RandomCrop(28), T.RandomRotation(20, fill=0),
                          T.RandomAffine(degrees=0, scale=(0.8, 1.2)), T.ToDtype(torch.float32, scale=True),
                          norm, T.RandomErasing(0.5)])
    val_tf = T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True), norm])
    root = _torchvision_root()
    train = datasets.MNIST(root, train=True, transform=train_tf, download=False)
    val = datasets.MNIST(root, train=False, transform=val_tf, download=False)
    # spawn: forked workers of a process that already holds a CUDA context crash in this sandbox
    kw = {"batch_size": BATCH, "num_workers": workers, "pin_memory": True, "persistent_workers": True,
          "multiprocessing_context": "spawn"}
    tl = torch.utils.data.DataLoader(train, shuffle=True, **kw)
    vl = torch.utils.data.DataLoader(val, shuffle=False, **kw)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                            lr=BASE_LR, fused=True)
    steps, total = len(tl), 100 * len(tl)
    warm = round(100 * WARMUP_FRACTION) * steps

    def lr_at(s):
        if s < warm:
            return s / warm
        p = (s - warm) / max(1, total - warm)
        return (1e-6 + (BASE_LR - 1e-6) * (1 + math.cos(math.pi * p)) / 2) / BASE_LR

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    low = torch.bfloat16 if amp_dtype == "bf16" else torch.float16  # bf16: no loss scale (a disabled scaler)
    scaler = torch.amp.GradScaler(enabled=amp_dtype == "fp16")
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=LS)
    times, best = [], 0.0
    for _ in range(epochs + 1):
        t0 = time.perf_counter()
        model.train()
        for x, y in tl:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=low):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=low):
            for x, y in vl:
                correct += (model(x.to(dev)).argmax(1) == y.to(dev)).sum().item()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        best = max(best, correct / len(val))
    # the training step alone, on one resident batch
    x, y = next(iter(tl))
    x, y = x.to(dev), y.to(dev)
    for i in range(220):
        if i == 20:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    step_us = (time.perf_counter() - t0) / 200 * 1e6
    del tl, vl  # stop the persistent workers before the next configuration
    return {"epochs_per_s": 1.0 / float(np.mean(times[1:])), "best_top1": best, "epochs": epochs,
            "step_us": step_us}


def _torchvision_root() -> str:
    """torchvision's MNIST wants root/MNIST/raw/*-ubyte: unpack the bundled .gz files there once."""
    import gzip
    import shutil
    import tempfile

    root = Path(tempfile.gettempdir()) / "tr_bench_mnist"
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for gz in DATA.glob("*.gz"):
        out = raw / gz.stem
        if not out.exists():
            with gzip.open(gz) as f, open(out, "wb") as g:
                shutil.copyfileobj(f, g)
    return str(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--torch-epochs", type=int, default=4)
    ap.add_argument("--workers", default="8,16", help="worker counts of the CPU-pipeline rows ('' for none)")
    ap.add_argument("--tr-device-augment", action=argparse.BooleanOptionalAction, default=True,
                    help="also the tr row with the data set and its augmentation on the device (first)")
    ap.add_argument("--seeds", default="123", help="the tr-device row once per seed (comma-separated)")
    ap.add_argument("--ema", type=float, default=None,
                    help="tr-device rows and the GPU twin also keep an EMA of the weights with this decay and "
                         "validate it every epoch (best_ema_top1)")
    ap.add_argument("--fc-gain", type=float, default=None,
                    help="tr-device rows: the FC weights' Kaiming-uniform gain (default sqrt(2); 0.57735 = "
                         "torch.nn.Linear's init)")
    ap.add_argument("--twin-seeds", default="123", help="the GPU-resident twin once per seed (comma-separated)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--amp-dtype", choices=("fp16", "bf16"), default="fp16",
                    help="AMP's 16-bit type on every row: fp16 (loss-scaled) or bf16 (no loss scale)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-tr", action="store_true")
    ap.add_argument("--gpu-twin-epochs", type=int, default=100, help="0: skip the GPU-resident PyTorch twin")
    ap.add_argument("--json", help="also write every row to this file")
    args = ap.parse_args()
    rows: list[dict] = []

    def out(framework, metric, value, **extra):
        extra = {"amp_dtype": args.amp_dtype, **extra}
        rows.append({"framework": framework, "metric": metric, "value": value, **extra})
        emit(framework, metric, value, **extra)

    tr_rates = []
    for seed in (int(x) for x in args.seeds.split(",") if args.tr_device_augment and not args.skip_tr):
        r = run_tr(args.epochs, 1, args.device, device_augment=True, seed=seed, ema=args.ema,
                   fc_gain=args.fc_gain, amp_dtype=args.amp_dtype)
        tr_rates.append(r["epochs_per_s"])
        out("tr-device", "epochs_per_s", r["epochs_per_s"], seed=seed,
            **{k: v for k, v in r.items() if k != "epochs_per_s"})
    for w in (int(x) for x in args.workers.split(",") if x):
        r = None
        if not args.skip_tr:
            r = run_tr(args.epochs, w, args.device, amp_dtype=args.amp_dtype)
            tr_rates.append(r["epochs_per_s"])
            out("tr", "epochs_per_s", r["epochs_per_s"], workers=w,
                **{k: v for k, v in r.items() if k != "epochs_per_s"})
        if args.skip_torch:
            continue
        try:
            t = run_torch(args.torch_epochs, w, args.amp_dtype)
        except Exception as e:  # report and go on: the tr figures above stand on their own
            out("pytorch", "error", 0, workers=w, error=f"{type(e).__name__}: {e}")
            continue
        out("pytorch", "epochs_per_s", t["epochs_per_s"], workers=w,
            **{k: v for k, v in t.items() if k != "epochs_per_s"})
        if r is not None:
            out("tr/pytorch", "epochs_per_s_ratio", r["epochs_per_s"] / t["epochs_per_s"], workers=w)
    if args.gpu_twin_epochs > 0 and not args.skip_torch:
        from mnist_torch_gpu import run as run_gpu_twin

        twin_rates = []
        for seed in (int(x) for x in args.twin_seeds.split(",")):
            try:
                g = run_gpu_twin(args.gpu_twin_epochs, args.device, seed=seed, ema=args.ema, amp_dtype=args.amp_dtype)
            except Exception as e:
                out("pytorch-gpu", "error", 0, seed=seed, error=f"{type(e).__name__}: {e}")
                continue
            twin_rates.append(g["epochs_per_s"])
            out("pytorch-gpu", "epochs_per_s", g["epochs_per_s"], **{k: v for k, v in g.items() if k != "epochs_per_s"})
        if tr_rates and twin_rates:
            out("tr/pytorch-gpu", "epochs_per_s_ratio", max(tr_rates) / max(twin_rates))
    if args.json:
        Path(args.json).write_text(json.dumps({"command": sys.argv, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
