"""The seed's VGG16-BN training step on one device: tr vs PyTorch eager vs PyTorch + torch.compile, one run.

What is timed, on every side: the full training step (forward, loss, backward, optimizer update, AMP loss
scaling when on) on one resident synthetic batch, i.e. the batch is already on the device and the same batch
is used every step; no data pipeline, no validation. ``--warmup`` steps first (not timed), then ``--steps``
steps between two device synchronisations. Compile / capture time is excluded and reported separately.

Configuration (both frameworks; the seed's VGG16-BN ImageNet config, SEED_SYSTEM.md section 14): batch 256
per GPU, AMP (FP16 autocast + dynamic loss scaling), SGD momentum 0.9 nesterov, weight decay 1e-4 on conv/fc
weights only (not on BN parameters or biases), label smoothing 0.1, constant learning rate ``--lr`` (the
schedule does not change the cost of a step), input [N, R, R, 3] random normal images (FP16 under AMP,
as tr's pipeline delivers them, else FP32) and random labels from a fixed seed.

* tr: the ``vgg16_bn`` BluePrint of examples/models.py (its last fc follows ``--classes``; the input shape
  is the feeder's sample shape), trained for one epoch of ``--tr-batches`` batches on an ArrayFeeder (so the
  step graphs are compiled, captured and run once), then ``DeepLearningTask.time_train_step``: launches
  of the captured full-batch step graph on device buffer A.
* PyTorch eager: ``torchvision.models.vgg16_bn(num_classes=classes)`` as is (its convs keep their biases,
  13 small extra bias-adds and bias gradients that tr's model lacks), channels_last, ``torch.autocast``
  FP16 + ``GradScaler``, ``SGD(momentum=0.9, nesterov=True)`` (fused on CUDA: no host sync in
  GradScaler.step), ``CrossEntropyLoss(label_smoothing=0.1)``, cudnn.benchmark. At a resolution other
  than 224 its AdaptiveAvgPool2d(7) would resample the last feature map to 7x7 (25088 features) while
  tr's flatten gives 512*(R/32)^2: the twin then drops the pool and sizes the first Linear to match tr.
* PyTorch + torch.compile (the model; the optimizer step stays eager), modes from ``--compile-mode``
  (comma-separated, e.g. ``default,max-autotune``); the first step's time (compile included) is reported
  as compile_s; a compile failure is reported, not fatal.

FP32 runs (``--no-amp``): tr's convs and GEMMs compute in FP32 unless ``--tf32``; PyTorch's TF32 switches
(cuDNN's is on by default) are set to the same value.

    python benchmarks/vgg16_bn.py --json vgg16_bn.json                       # H200: batch 256, AMP, 224
    python benchmarks/vgg16_bn.py --compile-mode default,max-autotune --json vgg16_bn.json
    python benchmarks/vgg16_bn.py --device cpu --resolution 32 --batch 8 --steps 2 --warmup 1 \\
        --classes 10 --no-compile                                            # CPU smoke test
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MOMENTUM, WD, LS, SEED = 0.9, 1e-4, 0.1, 123


# --- data ------------------------------------------------------------------------------------------

def synthetic(n: int, res: int, classes: int, dtype: np.dtype, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n random normal images [n, res, res, 3] and n random labels in [0, classes), from ``seed``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, res, res, 3), dtype=np.float32).astype(dtype, copy=False)
    y = rng.integers(0, classes, n, dtype=np.int32)
    return x, y


# --- tr --------------------------------------------------------------------------------------------

def tr_model(classes: int):
    """examples/models.py's vgg16_bn with its last fc(1000) replaced by fc(classes)."""
    sys.path.insert(0, str(ROOT))
    from examples.models import vgg16_bn
    from tr.graph.blueprint import FC, BluePrint, fc, seq

    layers = vgg16_bn.root.layers
    if not (isinstance(layers[-1], FC) and layers[-1].out == 1000):
        raise SystemExit(f"examples/models.py's vgg16_bn no longer ends in fc(1000): {layers[-1]!r}")
    return BluePrint(seq(*layers[:-1], fc(classes)), name="vgg16_bn", num_classes=classes)


def run_tr(a: argparse.Namespace) -> dict:
    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.executor import scalar
    from tr.task.feeder import ArrayFeeder

    dtype = np.float16 if a.amp else np.float32
    n = a.batch * a.tr_batches
    x, y = synthetic(n, a.resolution, a.classes, dtype, SEED)
    feeder = ArrayFeeder((x, y), None, a.batch, seed=SEED, shuffle=False, drop_last=True, dtype=dtype,
                         num_classes=a.classes)
    settings = Settings().amp(a.amp).manual_seed(SEED).global_batch_size(a.batch).use_tf32(a.tf32)
    task = (DeepLearningTask(settings).device(a.device).quiet().model(tr_model(a.classes))
            .loss(CrossEntropyLoss().label_smoothing(LS))
            .optimizer(SGD().momentum(MOMENTUM).nesterov(True).weight_decay(WD))
            .scheduler(ConstantLR().base_lr(a.lr)).total_epochs(1).data(feeder))
    t0 = time.perf_counter()
    task.compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    epoch = task.run()  # one epoch of a.tr_batches steps: the captured graphs run once before timing
    epoch_s = time.perf_counter() - t0
    be, prog = task.backend, task.program
    skipped0 = int(scalar(be, prog, "skipped")[0])
    step_s = task.time_train_step(a.steps, a.warmup)
    skipped = int(scalar(be, prog, "skipped")[0]) - skipped0
    loss = float(scalar(be, prog, "result")[0])  # the last timed step's loss
    params = sum(int(np.prod(i.tensor.shape.dims)) for i in prog.inits
                 if i.kind in ("weight", "bias") or i.tensor.region.name in ("W_BN_WEIGHT", "W_BN_BIAS"))
    out = {"images_per_s": a.batch / step_s, "ms_per_step": step_s * 1e3, "compile_s": compile_s,
           "first_epoch_s": epoch_s, "first_epoch_steps": a.tr_batches, "first_epoch_train_loss":
           epoch.history[-1].train_loss, "arena_bytes": int(prog.layout.total_bytes),
           "arena_gib": prog.layout.total_bytes / 2**30, "launches_per_step": task.launches_per_step,
           "ops": prog.num_ops, "backend": be.name, "trainable_params": params,
           "skipped_steps_timed": skipped, "last_loss": loss}
    if a.host_steps > 0:
        out["host_us_per_step"] = task.host_us_per_step(a.host_steps)
    del task, be, prog
    gc.collect()
    return out


# --- PyTorch ---------------------------------------------------------------------------------------

def torch_model(a: argparse.Namespace, torch):
    import torchvision

    torch.manual_seed(SEED)
    model = torchvision.models.vgg16_bn(num_classes=a.classes)
    notes = ["torchvision.models.vgg16_bn as is: convs keep their biases (tr's have none)",
             "each framework's own weight init (torchvision's; tr's seed policy: truncated-normal convs, "
             "Kaiming-uniform fcs): the losses differ, the work per step does not"]
    side = a.resolution // 32  # five 2x2 max-pools, floor as both frameworks do
    if side != 7:
        model.avgpool = torch.nn.Identity()
        model.classifier[0] = torch.nn.Linear(512 * side * side, 4096)
        notes.append(f"resolution {a.resolution}: AdaptiveAvgPool2d(7) removed and the first Linear sized "
                     f"{512 * side * side}->4096, as tr's flatten gives")
    return model, notes


def run_torch(a: argparse.Namespace, mode: str | None) -> dict:
    """mode None: eager; else a torch.compile mode ("default", "max-autotune", ...)."""
    import torch

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model, notes = torch_model(a, torch)
    model = model.to(dev, memory_format=torch.channels_last).train()
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    fused = cuda and a.torch_fused
    opt = torch.optim.SGD([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                          lr=a.lr, momentum=MOMENTUM, nesterov=True, fused=fused or None,
                          foreach=None if fused else True)
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=LS)
    x, y = synthetic(a.batch, a.resolution, a.classes, np.float16 if a.amp else np.float32, SEED)
    xb = torch.from_numpy(x).permute(0, 3, 1, 2).to(dev).contiguous(memory_format=torch.channels_last)
    yb = torch.from_numpy(y).long().to(dev)
    net = model
    if mode is not None:
        torch._dynamo.reset()
        net = torch.compile(model, mode=None if mode == "default" else mode)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=a.amp):
            loss = loss_fn(net(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    out: dict = {"notes": notes, "optimizer": "SGD fused" if fused else "SGD foreach",
                 "trainable_params": sum(p.numel() for p in model.parameters())}
    sync()
    t0 = time.perf_counter()
    step()  # the first step: cudnn.benchmark's search, and for torch.compile the compile itself
    sync()
    out["first_step_s"] = time.perf_counter() - t0
    if mode is not None:
        out["compile_s"] = out["first_step_s"]
    for _ in range(a.warmup - 1):
        step()
    sync()
    scale0 = scaler.get_scale() if a.amp else 1.0
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - t0) / a.steps
    out.update(images_per_s=a.batch / dt, ms_per_step=dt * 1e3, last_loss=float(loss.detach().float()))
    if a.amp:  # GradScaler halves its scale per skipped step and grows only after 2000 clean steps
        out["skipped_steps_timed"] = round(math.log2(scale0 / scaler.get_scale()))
    if cuda:
        out["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    return out


def free_torch() -> None:
    """Release the last run's model, optimizer state and batch (all local to run_torch) on the device."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# --- the run ---------------------------------------------------------------------------------------

def environment(a: argparse.Namespace) -> dict:
    env: dict = {"command": [sys.executable, *sys.argv], "date": datetime.datetime.now().isoformat(timespec="seconds"),
                 "host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None
    except Exception:
        env["git_commit"] = None
    try:
        import torch
        import torchvision

        env.update(torch=torch.__version__, torchvision=torchvision.__version__, torch_cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
        if a.device == "cuda" and torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    except Exception as e:
        env["torch_error"] = f"{type(e).__name__}: {e}"
    if a.device == "cuda":
        try:
            env["nvidia_driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:
            env["nvidia_driver"] = None
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--resolution", type=int, default=224, help="input H = W (a multiple of 32)")
    ap.add_argument("--batch", type=int, default=256, help="batch per step (per GPU)")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                    help="FP16 mixed precision (default: on with --device cuda, off with --device cpu)")
    ap.add_argument("--tf32", action="store_true", help="FP32 runs: allow TF32 tensor cores on both sides")
    ap.add_argument("--steps", type=int, default=50, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before the timed ones")
    ap.add_argument("--lr", type=float, default=0.01, help="constant learning rate (both sides)")
    ap.add_argument("--tr-batches", type=int, default=2, help="batches in tr's one untimed epoch (>= 2: A and B)")
    ap.add_argument("--host-steps", type=int, default=20,
                    help="steps for tr's host_us_per_step (transfer + step launches); 0 skips it")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode(s), comma-separated: default, reduce-overhead, max-autotune, ...")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-torch-fused", dest="torch_fused", action="store_false",
                    help="PyTorch: foreach SGD instead of the fused one (CUDA)")
    ap.add_argument("--skip-tr", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--json", type=Path, help="write every figure and the environment here")
    a = ap.parse_args(argv)
    if a.device == "cpu" and a.amp:
        ap.error("--amp needs --device cuda (FP16 autocast on the CPU is neither the seed's config nor fast); "
                 "leave it out or pass --no-amp")
    a.amp_note = None
    if a.amp is None:
        a.amp = a.device == "cuda"
        if not a.amp:
            a.amp_note = "AMP off: --device cpu runs FP32"
    for name in ("resolution", "batch", "steps", "warmup", "tr_batches"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.resolution % 32:
        ap.error("--resolution must be a multiple of 32 (five 2x2 max-pools)")
    if a.classes < 2:
        ap.error("--classes must be >= 2")
    if a.tr_batches < 2:
        ap.error("--tr-batches must be >= 2 (the epoch must fill both staging buffers)")
    a.compile_modes = [] if a.no_compile else [m.strip() for m in a.compile_mode.split(",") if m.strip()]
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if a.amp_note:
        print(a.amp_note, flush=True)
    rows: list[tuple[str, dict]] = []
    results: dict = {}
    if not a.skip_tr:
        print("tr: compiling and running one epoch ...", flush=True)
        results["tr"] = r = run_tr(a)
        rows.append(("tr", r))
    if not a.skip_torch:
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        print("pytorch eager ...", flush=True)
        results["pytorch_eager"] = r = run_torch(a, None)
        rows.append(("pytorch eager", r))
        free_torch()
        for mode in a.compile_modes:
            key = f"pytorch_compile_{mode}"
            print(f"pytorch + torch.compile(mode={mode}) ...", flush=True)
            try:
                results[key] = r = run_torch(a, mode)
                rows.append((f"pytorch compile {mode}", r))
            except Exception as e:  # report it; the other rows stand on their own
                msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                results[key] = {"error": msg}
                rows.append((f"pytorch compile {mode}", {"error": msg}))
            free_torch()

    base = results.get("pytorch_eager", {}).get("images_per_s")
    print()
    print(f"VGG16-BN training step, {a.device}, batch {a.batch}, {a.resolution}x{a.resolution}x3, "
          f"{a.classes} classes, {'AMP' if a.amp else 'FP32' + (' (TF32)' if a.tf32 else '')}, "
          f"{a.steps} timed steps after {a.warmup}")
    print(f"{'framework':<32} {'images/s':>12} {'ms/step':>10} {'vs PyTorch eager':>17}")
    for name, r in rows:
        if "error" in r:
            print(f"{name:<32} {'failed':>12} {'':>10} {'':>17}  {r['error'][:80]}")
            continue
        vs = f"{(r['images_per_s'] / base - 1) * 100:+.2f} %" if base else "-"
        print(f"{name:<32} {r['images_per_s']:>12.2f} {r['ms_per_step']:>10.3f} {vs:>17}")
    if "tr" in results:
        t = results["tr"]
        print(f"tr: compile {t['compile_s']:.2f} s, arena {t['arena_gib']:.3f} GiB, "
              f"{t['launches_per_step']} launches/step, backend {t['backend']}, "
              f"skipped steps (timed) {t['skipped_steps_timed']}")
    for name, r in rows:
        if r.get("skipped_steps_timed"):
            print(f"warning: {name}: {r['skipped_steps_timed']} of the {a.steps} timed steps had non-finite "
                  f"gradients and skipped their update (try a lower --lr)")
        if "compile_s" in r and name != "tr":
            print(f"{name}: compile (first step) {r['compile_s']:.2f} s")
    if "pytorch_eager" in results:
        for n in results["pytorch_eager"]["notes"]:
            print(f"note: {n}")
    if a.json:
        config = {k: v for k, v in vars(a).items() if k not in ("json", "amp_note")}
        doc = {"workload": "vgg16_bn_train_step", "config": config, "amp_note": a.amp_note,
               "environment": environment(a), "results": results,
               "vs_pytorch_eager": {k: v["images_per_s"] / base for k, v in results.items()
                                    if base and "images_per_s" in v}}
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
