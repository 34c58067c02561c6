"""Data-parallel scaling: tr (tr-run, NCCL inside the captured step) vs PyTorch DDP, eager and compiled.

Weak scaling: a FIXED batch per GPU (--batch-per-gpu); with N ranks the global batch is N times larger and
each rank trains on its 1/N share of the data set (padded so that every rank runs the same number of
steps, DistributedSampler's semantics on both sides), so an epoch has ~1/N the steps of one rank's. For
each world size N in --worlds, three frameworks train the same model on the same data:

- ``tr``: one process per GPU started by ``tr-run`` (``python -m tr.task.launch``); DeepLearningTask joins
  the world by itself; with the CUDA backend the gradients are all-reduced by NCCL inside the captured
  step graph (CPU backend: gloo). The data comes from an ArrayFeeder (the data set in host memory, already
  normalised, no augmentation): each step's batch is gathered on the host and copied to the device, the
  copy overlapping the previous step.
- ``ddp``: PyTorch DistributedDataParallel (NCCL on CUDA, gloo on the CPU), started by torchrun
  (``python -m torch.distributed.run --standalone``); each rank's data is resident on its GPU, so a step
  is an index gather on the device plus forward/backward/all-reduce/optimizer (autocast FP16 + GradScaler
  with AMP, fused AdamW on CUDA).
- ``ddp+compile``: the same with the model compiled, ``DDP(torch.compile(model))`` (``--compile-wrap outer``:
  ``torch.compile(DDP(model))``, which compiled nothing here, see pytorch/pytorch#140416; a run whose ranks
  compiled no graph is reported as failed, not as a compiled figure). ``--no-compile`` skips it.

The data paths differ: tr feeds from host memory, the PyTorch twin from device memory; the "step alone"
columns compare the devices' work like for like. With one rank tr runs no all-reduce at all (DDP still
runs its NCCL all-reduce); ``--tr-force-nccl`` puts tr's NCCL all-reduce in its one-rank step too.

Configuration (as benchmarks/mlp_mnist.py): the MNIST MLP 784-1024-512-256-10 (relu), AMP on CUDA (FP32 on
the CPU), batch 200 per GPU, AdamW wd 1e-4 on weights, cosine schedule from 1e-3 with 5 % warm-up,
label smoothing 0.1; no validation (training throughput only). ``--model vgg16_bn``: VGG16-BN at 32x32x3,
10 classes (CIFAR-10 shape, synthetic data: no CIFAR-10 is bundled), batch 128 per GPU; slow in tr (45x
PyTorch on one H200 when its convolutions were plain CUDA kernels, before they went through cuDNN), so use
--limit (benchmarks/vgg16_bn.py times the 224x224 step on one device).

What is timed, per rank: --epochs training epochs after --warmup-epochs (default 1) untimed ones; each
epoch's clock stops after a device synchronisation (tr: its epoch record, which ends with one; PyTorch:
torch.cuda.synchronize). Process start-up, data loading, compile/capture (tr) and torch.compile (it
happens in the warm-up epoch) are outside the clock. An epoch's time is the slowest rank's (the all-reduce
makes them wait for each other anyway). images/s = images trained per epoch (all ranks, padding included)
x timed epochs / the sum of those epoch times; epochs/s likewise. "Step alone": the training step relaunched
on one resident batch (tr: ``time_train_step``, the captured graph with its NCCL all-reduce; PyTorch: the
same eager/compiled step), every rank the same number of steps. Scaling efficiency for N = throughput(N) /
(N x throughput(1)) of the same framework.

    python benchmarks/scaling.py --worlds 1,2,4,8 --json scaling.json                   # GPUs
    python benchmarks/scaling.py --device cpu --worlds 1,2 --epochs 1 --limit 4000      # smoke test, ~1 min

Each rank writes its timings to a JSON file in a temporary directory; this process (not a rank) reads them,
prints one JSON line per (framework, world) and the tables, and writes everything to --json with the exact
command line. World sizes above the visible GPU count are skipped, with a message.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "mnist"
BASE_LR, WD, LS, WARMUP_FRACTION, SEED = 1e-3, 1e-4, 0.1, 0.05, 123
DEFAULT_BATCH = {"mlp": 200, "vgg16_bn": 128}
FRAMEWORKS = ("tr", "ddp", "ddp+compile")


# --- data (both frameworks, every rank: the same arrays) ----------------------------------------------------

def load_data(model: str, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Training images [N, H, W, C] float32, normalised, and int32 labels."""
    if model == "mlp":
        from tr.data import MNIST

        s = MNIST(DATA).load("train")
        x = ((s.images.astype(np.float32) / 255 - 0.1307) / 0.3081).astype(np.float32)
        y = s.labels.astype(np.int32)
    else:  # CIFAR-10-shaped synthetic data: the throughput does not depend on the pixel values
        n = limit or 50000
        rng = np.random.default_rng(SEED)
        x = rng.standard_normal((n, 32, 32, 3), dtype=np.float32)
        y = rng.integers(0, 10, n).astype(np.int32)
    if limit:
        x, y = x[:limit], y[:limit]
    return np.ascontiguousarray(x), y


def shard_info(n: int, world: int, batch: int) -> tuple[int, int]:
    """(samples per rank, steps per epoch): padded to a multiple of the world, the last batch partial."""
    per_rank = -(-n // world)
    return per_rank, -(-per_rank // batch)


def lr_factor(step: int, total: int, warm: int) -> float:
    """tr's CosineAnnealingLR with warm-up (linear, then cosine to 1e-6), as a factor of BASE_LR."""
    if step < warm:
        return step / warm
    p = (step - warm) / max(1, total - warm)
    return (1e-6 + (BASE_LR - 1e-6) * (1 + math.cos(math.pi * p)) / 2) / BASE_LR


def dist_env() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


# --- tr, one rank ------------------------------------------------------------------------------------------

def tr_model(model: str):
    from renaissance import cbr, dropout, fc, flatten, maxpool, relu, repeat, seq

    if model == "mlp":  # benchmarks/mlp_mnist.py's
        return seq(fc(1024, True), relu(), fc(512, True), relu(), fc(256, True), relu(), fc(10, True))
    stages = [seq(repeat(cbr(w, 3, s=1, p=1), n), maxpool(2, 2))
              for w, n in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))]
    return seq(*stages, flatten(), fc(4096), relu(), dropout(0.5), fc(4096), relu(), dropout(0.5), fc(10))


def worker_tr(a: argparse.Namespace) -> dict:
    from renaissance import AdamW, CosineAnnealingLR, CrossEntropyLoss, DeepLearningTask
    from tr.core.settings import Settings
    from tr.task.feeder import ArrayFeeder

    world = dist_env()[1]
    x, y = load_data(a.model, a.limit)
    dtype = np.float16 if a.amp else np.float32
    x = x.astype(dtype)
    epochs = a.warmup_epochs + a.epochs
    # the feeder gets the GLOBAL batch; the task shards it (rank's share, batch / world) when it joins the world
    feeder = ArrayFeeder((x, y), None, a.batch_per_gpu * world, seed=SEED, shuffle=True, dtype=dtype,
                         num_classes=10)
    s = Settings().amp(a.amp).manual_seed(SEED).global_batch_size(a.batch_per_gpu * world)
    task = (DeepLearningTask(s).device(a.device).quiet()
            .model(tr_model(a.model)).loss(CrossEntropyLoss().label_smoothing(LS))
            .optimizer(AdamW().weight_decay(WD)).total_epochs(epochs).data(feeder)
            .scheduler(CosineAnnealingLR().base_lr(BASE_LR).warmup(round(epochs * WARMUP_FRACTION))))
    t0 = time.perf_counter()
    task.compile()
    compile_s = time.perf_counter() - t0
    result = task.run()
    step_s = task.time_train_step(a.step_iters, warmup=min(10, a.step_iters))
    return {"epoch_seconds": [h.seconds for h in result.history], "train_loss": [h.train_loss for h in result.history],
            "steps_per_epoch": feeder.steps(True), "samples_per_epoch": feeder.num_samples(True),
            "batch": feeder.batch, "step_s": step_s, "compile_s": compile_s, "backend": task.backend.name,
            "distributed": task.group is not None, "launches_per_step": task.launches_per_step}


# --- PyTorch DDP, one rank ---------------------------------------------------------------------------------

def torch_model(model: str):
    import torch.nn as nn

    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(),
                             nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    layers, c = [], 3
    for w, n in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(n):
            layers += [nn.Conv2d(c, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            c = w
        layers.append(nn.MaxPool2d(2, 2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
                         nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(4096, 10))


def worker_torch(a: argparse.Namespace, compiled: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, local = dist_env()
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        torch.backends.cuda.matmul.allow_tf32 = True  # as tr's default (settings.tf32) for FP32 matmuls
        torch.backends.cudnn.allow_tf32 = True
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(SEED)
    x, y = load_data(a.model, a.limit)
    n = len(y)
    # the whole data set resident on this rank's device (NCHW): a step gathers its batch there
    xd = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(dev)
    yd = torch.from_numpy(y).long().to(dev)
    model = torch_model(a.model).to(dev)
    if a.model == "vgg16_bn" and cuda:
        model = model.to(memory_format=torch.channels_last)
        xd = xd.contiguous(memory_format=torch.channels_last)
    # inner: DDP around the compiled module (its gradients all come at the end of the compiled backward, so
    # the buckets' all-reduces overlap less). outer: PyTorch's documented order, torch.compile(DDP(model)),
    # with DDPOptimizer splitting the graph at bucket boundaries. model.compile() in place under DDP compiled
    # nothing with torch 2.11 on CUDA: DDP runs the module under _inside_ddp_forward, which dynamo skips.
    if compiled and a.compile_wrap == "inner":
        net = DDP(torch.compile(model, mode=a.compile_mode, dynamic=False), device_ids=[local] if cuda else None)
    else:
        net = DDP(model, device_ids=[local] if cuda else None)
    if compiled and a.compile_wrap == "outer":
        net = torch.compile(net, mode=a.compile_mode, dynamic=False)
    decay = [p for name, p in model.named_parameters() if p.ndim > 1]
    rest = [p for name, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                            lr=BASE_LR, **({"fused": True} if cuda else {}))
    batch = a.batch_per_gpu
    per_rank, steps = shard_info(n, world, batch)
    epochs = a.warmup_epochs + a.epochs
    total, warm = epochs * steps, round(epochs * WARMUP_FRACTION) * steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warm))
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=LS)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=a.amp):
            loss = loss_fn(net(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    times, losses = [], []
    for epoch in range(epochs):
        sync()
        t0 = time.perf_counter()
        net.train()
        g = torch.Generator()
        g.manual_seed(SEED + epoch)  # DistributedSampler: same permutation everywhere, padded, rank::world
        perm = torch.randperm(n, generator=g)
        if per_rank * world > n:
            perm = torch.cat([perm, perm[:per_rank * world - n]])
        idx = perm[rank::world].to(dev, non_blocking=True)
        acc = torch.zeros((), device=dev)
        for k in range(steps):
            bi = idx[k * batch:(k + 1) * batch]
            loss = step(xd[bi], yd[bi])
            sched.step()
            acc += loss.detach() * len(bi)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(acc) / per_rank)
    # the step alone on one resident batch (full batch: a compiled model has seen that shape)
    bi = idx[:batch]
    xb, yb = xd[bi], yd[bi]
    for _ in range(min(10, a.step_iters)):
        step(xb, yb)
    sync()
    t0 = time.perf_counter()
    for _ in range(a.step_iters):
        step(xb, yb)
    sync()
    step_s = (time.perf_counter() - t0) / a.step_iters
    graphs: dict = {}
    if compiled:
        from torch._dynamo.utils import counters

        graphs = {"dynamo_graphs": int(counters["stats"]["unique_graphs"]),
                  "aot_graphs": int(counters["aot_autograd"]["ok"]),
                  "graph_breaks": int(sum(counters["graph_break"].values())),
                  "dynamo_counters": {k: dict(counters[k]) for k in ("frames", "stats", "aot_autograd")}}
    dist.barrier()
    dist.destroy_process_group()
    return {**graphs, "epoch_seconds": times, "train_loss": losses, "steps_per_epoch": steps,
            "samples_per_epoch": per_rank, "batch": batch, "step_s": step_s, "torch": torch.__version__,
            "compiled": compiled, "backend": "nccl" if cuda else "gloo", "threads": torch.get_num_threads()}


def worker_main(a: argparse.Namespace) -> int:
    rank, world, local = dist_env()
    out = worker_tr(a) if a.worker == "tr" else worker_torch(a, a.worker == "ddp+compile")
    out.update(rank=rank, world=world, local_rank=local, pid=os.getpid(), framework=a.worker)
    Path(a.out, f"rank{rank}.json").write_text(json.dumps(out))
    return 0


# --- the parent: launch, collect, report -------------------------------------------------------------------

def worker_args(a: argparse.Namespace) -> list[str]:
    out = ["--model", a.model, "--batch-per-gpu", str(a.batch_per_gpu), "--epochs", str(a.epochs),
           "--warmup-epochs", str(a.warmup_epochs), "--device", a.device, "--step-iters", str(a.step_iters),
           "--compile-mode", a.compile_mode, "--compile-wrap", a.compile_wrap, "--amp" if a.amp else "--no-amp"]
    return out + (["--limit", str(a.limit)] if a.limit else [])


def launch_command(framework: str, world: int, out: str, a: argparse.Namespace) -> list[str]:
    me = str(Path(__file__).resolve())
    tail = [me, "--worker", framework, "--out", out, *worker_args(a)]
    if framework == "tr" or a.torch_launcher == "tr-run":
        return [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", str(world), *tail]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), *tail]


def summarise(framework: str, world: int, ranks: list[dict], warmup: int) -> dict:
    steps = {r["steps_per_epoch"] for r in ranks}
    samples = {r["samples_per_epoch"] for r in ranks}
    if len(steps) != 1 or len(samples) != 1:
        raise RuntimeError(f"ranks ran different epochs: steps {sorted(steps)}, samples {sorted(samples)}")
    if framework == "ddp+compile" and min(max(r["aot_graphs"], r["dynamo_graphs"]) for r in ranks) == 0:
        raise RuntimeError("torch.compile compiled no graph on some rank (the figures would be eager's); "
                           "try the other --compile-wrap")
    per_epoch = np.array([r["epoch_seconds"] for r in ranks])  # [rank, epoch]
    timed = per_epoch[:, warmup:]
    slowest = timed.max(axis=0)
    images = world * samples.pop()
    step_s = max(r["step_s"] for r in ranks)
    batch = ranks[0]["batch"]
    return {"framework": framework, "world": world, "images_per_s": images * len(slowest) / slowest.sum(),
            "epochs_per_s": len(slowest) / slowest.sum(), "epoch_s": slowest.tolist(),
            "epoch_s_per_rank": per_epoch.tolist(), "rank_spread": float((timed.max(0) / timed.min(0)).max()),
            "warmup_epoch_s": per_epoch[:, :warmup].max(axis=0).tolist(), "images_per_epoch": images,
            "steps_per_epoch": steps.pop(), "batch_per_gpu": batch, "step_us": step_s * 1e6,
            "step_images_per_s": world * batch / step_s, "train_loss_last": ranks[0]["train_loss"][-1],
            **{k: ranks[0][k] for k in ("compile_s", "backend", "torch", "threads", "distributed", "aot_graphs",
                                        "dynamo_graphs", "graph_breaks") if k in ranks[0]}}


def run_one(framework: str, world: int, a: argparse.Namespace, env: dict) -> dict:
    env = dict(env)
    if framework == "tr" and a.tr_force_nccl:
        env["TR_FORCE_NCCL"] = "1"
    with tempfile.TemporaryDirectory(prefix="tr_scaling_") as out:
        cmd = launch_command(framework, world, out, a)
        t0 = time.perf_counter()
        # its own process group: on a timeout the launcher AND its ranks are killed (a rank left behind would
        # hold its GPU through the next measurement)
        p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            log, _ = p.communicate(timeout=a.timeout)
            rc: int | str = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            log, _ = p.communicate()
            rc = f"timeout after {a.timeout:g} s"
        wall = time.perf_counter() - t0
        files = sorted(Path(out).glob("rank*.json"))
        base = {"framework": framework, "world": world, "launch": shlex.join(cmd), "wall_s": round(wall, 1)}
        if rc != 0 or len(files) != world:
            tail = "\n".join(log.strip().splitlines()[-25:])
            return {**base, "error": f"exit {rc}, {len(files)}/{world} rank files", "log_tail": tail}
        ranks = sorted((json.loads(f.read_text()) for f in files), key=lambda r: r["rank"])
        if a.verbose:
            print(log, file=sys.stderr)
        try:
            return {**base, **summarise(framework, world, ranks, a.warmup_epochs)}
        except RuntimeError as e:
            return {**base, "error": str(e), "log_tail": "\n".join(log.strip().splitlines()[-25:]),
                    "ranks": [{k: v for k, v in r.items() if k not in ("train_loss",)} for r in ranks]}


def device_name(device: str) -> str:
    if device == "cpu":
        return f"cpu x{os.cpu_count()} {platform.machine()}"
    import torch

    return torch.cuda.get_device_name(0)


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no torch: tr alone could still run, but DDP could not
        return 0


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except Exception:
        return None


def print_tables(results: list[dict]) -> None:
    for fw in FRAMEWORKS:
        rows = [r for r in results if r["framework"] == fw]
        if not rows:
            continue
        print(f"\n{fw}")
        print(f"{'ranks':>5} {'images/s':>12} {'epochs/s':>9} {'efficiency':>10} {'step alone µs':>14} "
              f"{'step images/s':>14} {'step eff.':>9}")
        for r in rows:
            if "error" in r:
                print(f"{r['world']:>5}  failed: {r['error']}")
                continue
            eff = r.get("efficiency")
            seff = r.get("step_efficiency")
            print(f"{r['world']:>5} {r['images_per_s']:>12,.0f} {r['epochs_per_s']:>9.3f} "
                  f"{'-' if eff is None else f'{eff:.1%}':>10} {r['step_us']:>14,.1f} "
                  f"{r['step_images_per_s']:>14,.0f} {'-' if seff is None else f'{seff:.1%}':>9}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="1,2,4,8", help="world sizes (ranks = GPUs) to measure")
    ap.add_argument("--model", choices=("mlp", "vgg16_bn"), default="mlp")
    ap.add_argument("--batch-per-gpu", type=int, default=None, help="default 200 (mlp), 128 (vgg16_bn)")
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs")
    ap.add_argument("--warmup-epochs", type=int, default=1, help="untimed epochs first (torch.compile runs here)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                    help="mixed precision (default: on with --device cuda)")
    ap.add_argument("--limit", type=int, default=None, help="train on the first N samples only")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="any of " + ",".join(FRAMEWORKS))
    ap.add_argument("--no-compile", action="store_true", help="skip ddp+compile")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode for ddp+compile")
    ap.add_argument("--compile-wrap", choices=("inner", "outer"), default="inner",
                    help="inner: DDP(torch.compile(model)) (default); outer: torch.compile(DDP(model)), which "
                         "compiled nothing with torch 2.11 (CUDA) and 2.14 (CPU) here; a run that compiles no "
                         "graph is reported as failed")
    ap.add_argument("--tr-force-nccl", action="store_true",
                    help="TR_FORCE_NCCL=1 for tr: its NCCL all-reduce runs in the step with one rank too (as DDP's)")
    ap.add_argument("--torch-launcher", choices=("torchrun", "tr-run"), default="torchrun")
    ap.add_argument("--step-iters", type=int, default=None, help="steps timed alone (default 200 cuda, 5 cpu)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for one (framework, world) run")
    ap.add_argument("--json", type=Path, default=None, help="write every result here")
    ap.add_argument("--verbose", action="store_true", help="print the ranks' output")
    ap.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.batch_per_gpu = a.batch_per_gpu or DEFAULT_BATCH[a.model]
    a.amp = (a.device == "cuda") if a.amp is None else a.amp
    a.step_iters = a.step_iters or (200 if a.device == "cuda" else 5)
    if a.epochs < 1 or a.warmup_epochs < 1:
        ap.error("--epochs and --warmup-epochs must be >= 1 (the first epoch is never timed)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.worker:
        return worker_main(a)
    command = shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv)
    worlds = [int(w) for w in a.worlds.split(",")]
    frameworks = [f for f in a.frameworks.split(",") if not (a.no_compile and f == "ddp+compile")]
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        print(f"unknown framework(s) {bad}; choose from {FRAMEWORKS}", file=sys.stderr)
        return 2
    skipped = []
    if a.device == "cuda":
        gpus = visible_gpus()
        if gpus == 0:
            print("no CUDA device visible: use --device cpu for a smoke test", file=sys.stderr)
            return 2
        skipped = [w for w in worlds if w > gpus]
        for w in skipped:
            print(f"skipping world size {w}: only {gpus} GPU(s) visible", flush=True)
        worlds = [w for w in worlds if w <= gpus]
    elif max(worlds) > (os.cpu_count() or 1):
        print(f"note: {max(worlds)} CPU ranks on {os.cpu_count()} cores oversubscribe them", flush=True)
    env = dict(os.environ)
    results = []
    for world in worlds:
        # the same threads per rank for every framework (tr-run and torchrun would each pick their own)
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // world))
        for fw in frameworks:
            r = run_one(fw, world, a, env)
            r["omp_threads"] = int(env["OMP_NUM_THREADS"])
            results.append(r)
            line = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                    if k not in ("epoch_s_per_rank", "log_tail", "launch")}
            print(json.dumps(line), flush=True)
            if "error" in r:
                print(r["log_tail"], file=sys.stderr, flush=True)
    for r in results:
        one = next((b for b in results if b["framework"] == r["framework"] and b["world"] == 1 and "error" not in b),
                   None)
        if one is not None and "error" not in r:
            r["efficiency"] = r["images_per_s"] / (r["world"] * one["images_per_s"])
            r["step_efficiency"] = r["step_images_per_s"] / (r["world"] * one["step_images_per_s"])
    print_tables(results)
    report = {"command": command, "cwd": os.getcwd(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": device_name(a.device), "git_commit": git_commit(), "python": platform.python_version(),
              "host": platform.node(), "cpu_count": os.cpu_count(), "worlds_skipped": skipped,
              "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()
                         if k not in ("worker", "out")},
              "results": results}
    if a.json:
        a.json.write_text(json.dumps(report, indent=1, default=str))
        print(f"\nwrote {a.json}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
