"""The strongest PyTorch twin of the seed's MNIST MLP run: everything on the GPU, the whole step one CUDA graph.

What a skilled PyTorch user does when the data set fits the GPU (issue [11]'s reference, 8.4-8.6 epochs/s):
* MNIST's 60,000 + 10,000 digits live on the device as uint8; each epoch's order is ``torch.randperm`` there;
* the augmentation runs on the batch on the device: Pad(2) + RandomCrop(28) + RandomRotation(20) +
  RandomScale(0.8, 1.2) as ONE affine map per sample (``F.affine_grid`` + ``F.grid_sample``, bilinear, zeros
  outside: the chain's geometric steps composed, one gather per output pixel), MNIST normalisation, then
  RandomErasing(0.5) (torchvision's area 0.02-0.33 and log-uniform ratio 0.3-3.3, filled with 0 after
  normalising) as a mask;
* the step (gather, augmentation, forward under autocast FP16, label-smoothed cross-entropy, backward,
  GradScaler, fused AdamW with ``capturable=True``, the LR from a device-resident cosine table indexed by a
  device step counter) is captured once as a CUDA graph and replayed: no host work per step but the replay;
* validation on the resident test set, its accuracy read back once per epoch.

Configuration as benchmarks/mlp_mnist.py: MLP 784-1024-512-256-10, batch 200, AdamW wd 1e-4 on weights, cosine
from 1e-3 with 5 % warm-up, label smoothing 0.1, 100 epochs. ``--device cpu`` runs the same step eagerly (no
graph) for a smoke test.

    python benchmarks/mnist_torch_gpu.py --epochs 100 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "mnist"
BATCH, BASE_LR, WD, LS, WARMUP_FRACTION = 200, 1e-3, 1e-4, 0.1, 0.05
MEAN, STD = 0.1307, 0.3081


def mnist_tensors(device):
    import torch

    from tr.data import MNIST

    ds = MNIST(DATA)
    tr, va = ds.load("train"), ds.load("val")
    to = lambda a, dt: torch.as_tensor(np.array(a), dtype=dt, device=device)  # noqa: E731  (a writable copy)
    return (to(tr.images[..., 0], torch.uint8), to(tr.labels, torch.int64),
            to(va.images[..., 0], torch.uint8), to(va.labels, torch.int64))


def augment(x_u8, gen=None):
    """The seed's MNIST chain on a (n, 28, 28) uint8 batch on its device: normalised float32 (n, 1, 28, 28)."""
    import torch
    import torch.nn.functional as F

    n, dev = x_u8.shape[0], x_u8.device
    r = torch.rand(n, 6, device=dev, generator=gen)
    # Pad(2) + RandomCrop(28): a shift of -2..2 px; RandomRotation(20); RandomScale(0.8, 1.2): one affine map
    # (output -> input, normalised coordinates, align_corners=False: 1 px = 2/28)
    shift = (torch.floor(r[:, :2] * 5) - 2) * (2.0 / 28)
    ang = (r[:, 2] * 40 - 20) * (math.pi / 180)
    scale = 0.8 + 0.4 * r[:, 3]
    cos, sin = torch.cos(ang) / scale, torch.sin(ang) / scale
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, (n, 1, 28, 28), align_corners=False)
    x = F.grid_sample(x_u8[:, None].float() * (1 / 255), grid, mode="bilinear", padding_mode="zeros",
                      align_corners=False)
    x = (x - MEAN) / STD
    # RandomErasing(0.5): area 0.02-0.33 of the image, log-uniform ratio 0.3-3.3, value 0
    area = 784 * (0.02 + 0.31 * r[:, 4])
    logr = math.log(0.3) + (math.log(3.3) - math.log(0.3)) * r[:, 5]
    h = torch.sqrt(area * torch.exp(logr)).round().clamp(1, 28)
    w = torch.sqrt(area / torch.exp(logr)).round().clamp(1, 28)
    r2 = torch.rand(n, 3, device=dev, generator=gen)
    top = torch.floor(r2[:, 0] * (29 - h))
    left = torch.floor(r2[:, 1] * (29 - w))
    ys = torch.arange(28, device=dev, dtype=torch.float32)
    inside = ((ys[None, :, None] >= top[:, None, None]) & (ys[None, :, None] < (top + h)[:, None, None])
              & (ys[None, None, :] >= left[:, None, None]) & (ys[None, None, :] < (left + w)[:, None, None]))
    erase = (r2[:, 2] < 0.5)[:, None, None] & inside
    return x.masked_fill(erase[:, None], 0.0)


def lr_table(epochs: int, steps: int, device):
    import torch

    total, warm = epochs * steps, round(epochs * WARMUP_FRACTION) * steps
    s = np.arange(total + 1, dtype=np.float64)
    cos = 1e-6 + (BASE_LR - 1e-6) * (1 + np.cos(np.pi * (s - warm) / max(1, total - warm))) / 2
    return torch.as_tensor(np.where(s < warm, BASE_LR * s / max(1, warm), cos), dtype=torch.float32, device=device)


def run(epochs: int, device: str = "cuda", seed: int = 123, ema: float | None = None, amp_dtype: str = "fp16"
        ) -> dict:
    """``ema``: also keep an EMA of the parameters with this decay inside the captured step (after the
    optimizer, one ``_foreach_lerp_``) and validate it every epoch (best_ema_top1), as tr's task.ema.
    ``amp_dtype``: autocast's type, "fp16" (with GradScaler) or "bf16" (no loss scale)."""
    import copy

    import torch

    torch.manual_seed(seed)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    xtr, ytr, xva, yva = mnist_tensors(dev)
    n, steps = len(ytr), len(ytr) // BATCH  # drop_last, as the seed
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    decay = [p for nm, p in model.named_parameters() if nm.endswith("weight")]
    rest = [p for nm, p in model.named_parameters() if nm.endswith("bias")]
    lrs = lr_table(epochs, steps, dev)
    lr = lrs[0].clone()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr if cuda else BASE_LR, fused=cuda, capturable=cuda)
    low = torch.bfloat16 if amp_dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(device=dev.type, enabled=cuda and amp_dtype == "fp16")
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=LS)
    perm = torch.randperm(n, device=dev)
    step_t = torch.zeros((), dtype=torch.int64, device=dev)  # the step within the epoch
    global_t = torch.zeros((), dtype=torch.int64, device=dev)
    offs = torch.arange(BATCH, device=dev)
    loss_sum = torch.zeros((), device=dev)
    ema_model = copy.deepcopy(model) if ema is not None else None
    params = list(model.parameters())
    ema_params = list(ema_model.parameters()) if ema_model is not None else []

    def step() -> None:
        idx = perm.index_select(0, step_t * BATCH + offs)
        x, y = augment(xtr.index_select(0, idx)), ytr.index_select(0, idx)
        with torch.autocast(dev.type, dtype=low, enabled=cuda):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=False)
        if ema_params:
            with torch.no_grad():
                torch._foreach_lerp_(ema_params, params, 1.0 - ema)
        loss_sum.add_(loss.detach().float())
        step_t.add_(1)
        global_t.add_(1)
        lr.copy_(lrs.index_select(0, global_t.clamp(max=len(lrs) - 1)).reshape(()))
        if not cuda:
            for g in opt.param_groups:
                g["lr"] = float(lr)

    graph = None
    if cuda:
        # warm up on a side stream (allocates the optimizer state and grads), then capture the step
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    global_t.zero_()  # the warm-up steps do not count in the schedule (their LR was 0) ...
    lr.copy_(lrs[0])
    with torch.no_grad():  # ... nor in AdamW's moments and step count (zeroed in place: the graph holds them)
        for st in opt.state.values():
            for v in st.values():
                if torch.is_tensor(v):
                    v.zero_()
    with torch.no_grad():  # the EMA starts from the weights training starts from, as tr's
        for e, p in zip(ema_params, params):
            e.copy_(p)

    def evaluate(m) -> float:
        m.eval()
        with torch.no_grad(), torch.autocast(dev.type, dtype=low, enabled=cuda):
            logits = m(((xva[:, None].float() * (1 / 255)) - MEAN) / STD)
        m.train()
        return float((logits.argmax(1) == yva).float().mean())  # the one read-back of the epoch

    times, tops, ema_tops, losses = [], [], [], []
    # `epochs` epochs in all, as tr trains; the first is not timed (capture just done, pages coming in)
    for _epoch in range(epochs):
        t0 = time.perf_counter()
        perm.copy_(torch.randperm(n, device=dev))
        step_t.zero_()
        loss_sum.zero_()
        for _ in range(steps):
            graph.replay() if graph is not None else step()
        top1 = evaluate(model)
        if ema_model is not None:
            ema_tops.append(evaluate(ema_model))
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        tops.append(top1)
        losses.append(float(loss_sum) / steps)
    step_t.zero_()  # the step alone: another pass over the epoch's batches, without validation
    k = min(200, steps)
    t0 = time.perf_counter()
    for _ in range(k):
        graph.replay() if graph is not None else step()
    if cuda:
        torch.cuda.synchronize()
    step_us = (time.perf_counter() - t0) / k * 1e6
    timed = times[1:] or times
    return {"epochs_per_s": 1.0 / float(np.mean(timed)), "best_top1": max(tops), "epochs": epochs,
            "best_ema_top1": max(ema_tops) if ema_tops else None, "ema_decay": ema, "seed": seed,
            "step_us": step_us, "last_train_loss": losses[-1], "graph": graph is not None}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--ema", type=float, default=None, help="also an EMA of the weights with this decay")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    r = run(a.epochs, a.device, a.seed, a.ema)
    print(json.dumps(r))
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, **r}, indent=1) + "\n")


if __name__ == "__main__":
    main()
