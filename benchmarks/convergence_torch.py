"""The PyTorch twins of benchmarks/convergence.py: the same architectures, recipe and augmentation as tr's runs.

What each twin shares with its tr run (and how):

* the architecture: built here from the same ``Arch`` value the tr BluePrint is built from (convergence.py),
  parameter counts compared before anything trains; ResNet-50 is torchvision's (the blocks of tr's resnet50);
* the initialisation scheme: tr's own policy (tr.algo.init.Initializer's defaults: truncated-normal convs,
  Kaiming-uniform fc weights, zero biases, BN gamma 1 and beta 0), drawn by torch's RNG from the same
  distributions (each framework its own draws: the mean over seeds absorbs them);
* the update rule: ``TrSGD`` applies tr.algo.update's SGD rule (decoupled weight decay, w <- w(1 - lr wd) - lr
  (b m + g) with Nesterov): torch.optim.SGD couples the decay into the momentum buffer, which decays ~1/(1 - b)
  = 10x harder at the same setting; weights decayed, BN parameters and biases not (tr's group traits);
* the LR: tr's own table (the scheduler's ``prepare(...).table()``, what tr writes into its arena), one value
  a step, indexed by the global step as tr's lr_lookup is (skipped steps count);
* AMP: torch.autocast(float16) + GradScaler with tr's defaults (init 65536, growth interval 2000); every
  skipped step is counted (the scale halved) and its loss left out of the epoch's mean, as tr does;
* data: MNIST padded to 32x32 once, resident on the device, a new order per epoch from its own generator and
  RandomCrop(32, padding=2) as an exact integer crop on the device (tr: the same chain on its device); the image
  folder through torchvision's ImageFolder + DataLoader with RandomResizedCrop + flip (tr: its JPEG pipeline).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from cudnn_libraries import pin_cudnn_sublibraries
from torch import nn

# --- models ------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """tr's block("basic", out, stride): 3x3(stride)-BN-ReLU-3x3-BN, identity or 1x1(stride)+BN shortcut, ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                                  nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.shortcut(x) + self.stem(x))


def build_model(arch: Any) -> nn.Module:
    """The torch module of ``arch`` (convergence.Arch), layer for layer the BluePrint convergence.blueprint makes."""
    if arch.name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(num_classes=arch.classes)
    layers: list[nn.Module] = []
    c = arch.in_channels
    if arch.name == "vgg_bn":
        for width, convs in arch.stages:
            for _ in range(convs):
                layers += [nn.Conv2d(c, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
                c = width
            layers.append(nn.MaxPool2d(2, 2))
        side = arch.side >> len(arch.stages)
        return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c * side * side, arch.classes))
    if arch.name == "resnet_small":
        layers += [nn.Conv2d(c, arch.width, 3, 1, 1, bias=False), nn.BatchNorm2d(arch.width), nn.ReLU(inplace=True)]
        c = arch.width
        for width, blocks, stride in arch.stages:
            for i in range(blocks):
                layers.append(BasicBlock(c, width, stride if i == 0 else 1))
                c = width
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, arch.classes))
    raise ValueError(f"no torch twin for architecture {arch.name!r}")


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def tr_init_(model: nn.Module, first_conv_channels: int | None = None) -> None:
    """Fill ``model`` from tr's default initialisation policy. ``first_conv_channels``: the input channels tr's
    first conv has (tr pads RGB to 4 channels under AMP: its fan-in, hence its scale, counts them)."""
    from tr.algo.init import Initializer, InitKind, fans

    policy = Initializer()
    conv_spec, fc_spec = policy.spec_for("conv"), policy.spec_for("fc")
    first = True
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                o, i, kh, kw = m.weight.shape
                c = first_conv_channels if first and first_conv_channels else i  # (KRSC: C per group)
                _fill(m.weight, conv_spec, *fans((o, kh, kw, c)), InitKind)
                first = False
            elif isinstance(m, nn.Linear):
                _fill(m.weight, fc_spec, *fans(tuple(m.weight.shape)), InitKind)
            elif isinstance(m, nn.BatchNorm2d):
                m.reset_parameters()  # gamma 1, beta 0, running mean 0 and variance 1: tr's
                continue
            else:
                continue
            if m.bias is not None:
                m.bias.zero_()


def _fill(w: torch.Tensor, spec: Any, fan_in: int, fan_out: int, kinds: Any) -> None:
    if spec.kind is kinds.TRUNC_NORMAL:
        b = spec.bound(fan_in, fan_out)
        nn.init.trunc_normal_(w, 0.0, spec.std(fan_in, fan_out), -b, b)
    elif spec.kind in (kinds.KAIMING_UNIFORM, kinds.XAVIER_UNIFORM):
        b = spec.bound(fan_in, fan_out)
        nn.init.uniform_(w, -b, b)
    elif spec.kind in (kinds.KAIMING_NORMAL, kinds.XAVIER_NORMAL):
        nn.init.normal_(w, 0.0, spec.std(fan_in, fan_out))
    else:
        nn.init.constant_(w, spec.fill_value)


# --- the optimizer -----------------------------------------------------------------------------------


class TrSGD(torch.optim.Optimizer):
    """tr.algo.update's SGD_MOMENTUM / SGD_NESTEROV: m <- b m + g; w <- w(1 - lr wd) - lr m, or with Nesterov
    w <- w(1 - lr wd) - lr (b m + g) (the new m). ``weight_decay`` per param group (0 for bias-like ones)."""

    def __init__(self, groups: list[dict], lr: float, momentum: float, nesterov: bool) -> None:
        super().__init__(groups, {"lr": lr, "momentum": momentum, "nesterov": nesterov, "weight_decay": 0.0})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # noqa: ARG002 (torch's signature)
        for g in self.param_groups:
            params = [p for p in g["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            bufs = [self.state[p].setdefault("m", torch.zeros_like(p)) for p in params]
            b, lr, wd = g["momentum"], g["lr"], g["weight_decay"]
            torch._foreach_mul_(bufs, b)
            torch._foreach_add_(bufs, grads)
            if wd:
                torch._foreach_mul_(params, 1.0 - lr * wd)
            if g["nesterov"]:
                torch._foreach_add_(params, torch._foreach_add(grads, bufs, alpha=b), alpha=-lr)
            else:
                torch._foreach_add_(params, bufs, alpha=-lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """tr's split: conv and fc weights decayed; BN gamma/beta and biases (tr's bias-like groups) not."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


# --- one training run ----------------------------------------------------------------------------------


@dataclass
class Trainer:
    """What one twin run trains with: the model, tr's rule, the loss scaler and tr's LR table."""

    model: nn.Module
    opt: TrSGD
    scaler: torch.amp.GradScaler
    loss_fn: nn.Module
    table: np.ndarray
    device: torch.device
    amp: bool
    step: int = 0
    skipped_at: list[int] | None = None

    @property
    def channels_last(self) -> bool:
        """NHWC where it pays: FP16 convolutions on CUDA (tensor cores); FP32 stays NCHW, cuDNN's best-covered."""
        return self.amp and self.device.type == "cuda"

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def train_step(self, x: torch.Tensor, y: torch.Tensor, loss_sum: torch.Tensor) -> bool:
        """One step at tr's LR for this global step; True if applied (False: non-finite gradients, skipped)."""
        lr = float(self.table[min(self.step, len(self.table) - 1)])
        for g in self.opt.param_groups:
            g["lr"] = lr
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.amp):
            loss = self.loss_fn(self.model(x), y)
        before = self.scaler.get_scale() if self.amp else 0.0
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        # a skipped step halves the scale (growth only doubles it); the FP32 twin never skips
        applied = not self.amp or self.scaler.get_scale() >= before
        if applied:
            loss_sum += loss.detach().float()
        else:
            self.skipped_at.append(self.step)
        self.step += 1
        return applied

    @torch.no_grad()
    def evaluate(self, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> tuple[float, float]:
        """(top-1, mean loss) over the validation batches, BN on its running statistics (as tr validates)."""
        self.model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        n = 0
        ls = self.loss_fn.label_smoothing
        for x, y in zip(xs, ys):
            with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.amp):
                logits = self.model(self.batch(x))
            logits = logits.float()
            correct += (logits.argmax(1) == y).sum()
            total += nn.functional.cross_entropy(logits, y, label_smoothing=ls, reduction="sum").double()
            n += len(y)
        self.model.train()
        return float(correct) / n, float(total) / n

    def run_epoch(self, epoch: int, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                  val: tuple[list[torch.Tensor], list[torch.Tensor]]) -> dict:
        """Train epoch ``epoch`` (from 0) on ``batches`` ((x, y) on the device), then validate: the epoch's record
        (tr's history fields: the train loss averaged over the applied steps, val top-1 and loss, seconds, the
        steps AMP skipped, the LR the epoch began with)."""
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=self.device)
        skipped_before, steps = len(self.skipped_at), 0
        for x, y in batches:
            self.train_step(self.batch(x), y, loss_sum)
            steps += 1
        skipped = len(self.skipped_at) - skipped_before
        top1, val_loss = self.evaluate(*val)
        applied = steps - skipped
        return {"epoch": epoch + 1, "train_loss": float(loss_sum) / applied if applied else math.nan,
                "val_top1": top1, "val_loss": val_loss, "seconds": time.perf_counter() - t0,
                "skipped_steps": skipped, "lr": float(self.table[min(epoch * steps, len(self.table) - 1)])}


def make_trainer(arch: Any, recipe: Any, amp: bool, table: np.ndarray, device: torch.device,
                 first_conv_channels: int | None = None) -> Trainer:
    model = build_model(arch).to(device)
    tr_init_(model, first_conv_channels)  # drawn where it lives (ResNet-50's 23.5 M on the GPU: no CPU pass)
    if amp and device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    opt = TrSGD(param_groups(model, recipe.weight_decay), float(table[0]), recipe.momentum, recipe.nesterov)
    # tr's dynamic loss scale: GradScaler's defaults (tr.core.ops INITIAL_LOSS_SCALE, DEFAULT_GROWTH_INTERVAL)
    scaler = torch.amp.GradScaler(device.type, init_scale=65536.0, growth_interval=2000, enabled=amp)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    return Trainer(model.train(), opt, scaler, loss_fn, table, device, amp, skipped_at=[])


def configure(device: torch.device) -> None:
    """FP32 is FP32 on both sides (tr's Settings.use_tf32 is off by default); cuDNN picks its fastest engines."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        pin_cudnn_sublibraries()



def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- MNIST -------------------------------------------------------------------------------------------

_RESIDENT: dict[tuple, tuple] = {}


def _mnist_on(data: Any, device: torch.device, pad: int, mean: float, std: float) -> tuple:
    """The padded train images (N, 32 + 2 pad, 32 + 2 pad) uint8 and the normalised val batches on the device,
    made once per process and data set."""
    key = (id(data), str(device), pad)
    if key not in _RESIDENT:
        x = torch.as_tensor(np.ascontiguousarray(data.train_x[..., 0]), device=device)
        xp = nn.functional.pad(x, (pad, pad, pad, pad))
        y = torch.as_tensor(data.train_y.astype(np.int64), device=device)
        xv = torch.as_tensor(np.ascontiguousarray(data.val_x[..., 0]), device=device)
        xv = ((xv.float() / 255.0 - mean) / std)[:, None]
        yv = torch.as_tensor(data.val_y.astype(np.int64), device=device)
        _RESIDENT.clear()  # one data set at a time
        _RESIDENT[key] = (xp, y, list(xv.split(1000)), list(yv.split(1000)))
    return _RESIDENT[key]


def random_crop(xp: torch.Tensor, side: int, gen: torch.Generator) -> torch.Tensor:
    """RandomCrop(side) of (B, side + 2p, side + 2p) images already padded by p: a uniform integer offset in
    0..2p per axis and sample (torchvision's and tr's draw), the pixels gathered exactly."""
    n, pad2 = xp.shape[0], xp.shape[1] - side
    off = torch.randint(0, pad2 + 1, (n, 2), device=xp.device, generator=gen)
    ar = torch.arange(side, device=xp.device)
    rows = (off[:, 0, None] + ar)[:, :, None]
    cols = (off[:, 1, None] + ar)[:, None, :]
    return xp[torch.arange(n, device=xp.device)[:, None, None], rows, cols]


def run_mnist(arch: Any, recipe: Any, amp: bool, seed: int, data: Any, table: np.ndarray, device: str,
              log: Any = print) -> dict:
    """One twin run on the padded MNIST: a record like convergence.run_tr_mnist's."""
    t_setup = time.perf_counter()
    dev = torch.device(device)
    configure(dev)
    torch.manual_seed(seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    xp, y, xv, yv = _mnist_on(data, dev, data.pad, data.mean, data.std)
    t = make_trainer(arch, recipe, amp, table, dev)
    n, b, side = len(y), recipe.batch, data.side
    steps = n // b  # drop_last, as tr's run
    params = count_params(t.model)
    _sync(dev)
    setup_s = time.perf_counter() - t_setup

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """An epoch: a new order, then each batch RandomCrop'ed and normalised."""
        perm = torch.randperm(n, device=dev, generator=gen)
        for k in range(steps):
            idx = perm[k * b:(k + 1) * b]
            yield ((random_crop(xp[idx], side, gen).float() / 255.0 - data.mean) / data.std)[:, None], y[idx]

    epochs = []
    for e in range(recipe.epochs):
        rec = t.run_epoch(e, batches(), (xv, yv))
        epochs.append(rec)
        log(f"  pytorch epoch {e + 1}: loss {rec['train_loss']:.4f}, top-1 {100 * rec['val_top1']:.2f} %, "
            f"{rec['seconds']:.1f} s, {rec['skipped_steps']} skipped")
    return {"params": params, "steps_per_epoch": steps, "setup_s": setup_s, "epochs": epochs,
            "skipped_at": t.skipped_at[:64], "loss_scale": t.scaler.get_scale() if amp else None}


# --- an image folder (ResNet-50) ----------------------------------------------------------------------

_VAL: dict[tuple, tuple] = {}


def _folder_val(root: Path, resize: int, res: int, mean: tuple, std: tuple, device: torch.device) -> tuple:
    """The val split through Resize + CenterCrop + normalisation, once per process, as device batches."""
    import torchvision
    from torchvision import transforms as T

    key = (str(root), resize, res, str(device))
    if key not in _VAL:
        tf = T.Compose([T.Resize(resize), T.CenterCrop(res), T.ToTensor(), T.Normalize(mean, std)])
        ds = torchvision.datasets.ImageFolder(str(root / "val"), transform=tf)
        xs = torch.stack([ds[i][0] for i in range(len(ds))]).to(device)
        ys = torch.as_tensor(ds.targets, dtype=torch.int64, device=device)
        _VAL.clear()
        _VAL[key] = (list(xs.split(256)), list(ys.split(256)))
    return _VAL[key]


def run_folder(arch: Any, recipe: Any, amp: bool, seed: int, folder: Any, table: np.ndarray, device: str,
               first_conv_channels: int | None, log: Any = print) -> dict:
    """One twin run on an image folder (folder.root/train, folder.root/val): torchvision's ImageFolder and
    DataLoader (folder.workers worker processes) with RandomResizedCrop(res) + RandomHorizontalFlip."""
    import torchvision
    from torchvision import transforms as T

    t_setup = time.perf_counter()
    dev = torch.device(device)
    configure(dev)
    torch.manual_seed(seed)
    tf = T.Compose([T.RandomResizedCrop(folder.resolution), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(folder.mean, folder.std)])
    train = torchvision.datasets.ImageFolder(str(folder.root / "train"), transform=tf)
    workers = folder.workers
    # spawn: a forked child of a process holding a CUDA context is not safe
    ctx = ("spawn" if dev.type == "cuda" else "fork") if workers > 0 else None
    loader = torch.utils.data.DataLoader(train, batch_size=recipe.batch, shuffle=True, drop_last=True,
                                         num_workers=workers, pin_memory=dev.type == "cuda",
                                         persistent_workers=workers > 0, multiprocessing_context=ctx,
                                         generator=torch.Generator().manual_seed(seed))
    xv, yv = _folder_val(folder.root, folder.val_resize, folder.resolution, folder.mean, folder.std, dev)
    t = make_trainer(arch, recipe, amp, table, dev, first_conv_channels)
    params = count_params(t.model)
    setup_s = time.perf_counter() - t_setup
    epochs = []
    loader_start_s = []  # iter(loader) a epoch: the first spawns the worker processes (each imports torch)
    for e in range(recipe.epochs):
        t_iter = time.perf_counter()
        it = iter(loader)
        loader_start_s.append(time.perf_counter() - t_iter)
        on_device = ((x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)) for x, y in it)
        rec = t.run_epoch(e, on_device, (xv, yv))
        epochs.append(rec)
        log(f"  pytorch epoch {e + 1}: loss {rec['train_loss']:.4f}, val top-1 {100 * rec['val_top1']:.2f} %, "
            f"{rec['seconds']:.1f} s, {rec['skipped_steps']} skipped")
    t_down = time.perf_counter()
    del on_device, it, loader  # stops the persistent workers (timed: the record accounts for the run's whole wall time)
    gc.collect()
    teardown_s = time.perf_counter() - t_down
    return {"params": params, "steps_per_epoch": len(train) // recipe.batch, "setup_s": setup_s,
            "loader_start_s": loader_start_s, "teardown_s": teardown_s, "epochs": epochs,
            "skipped_at": t.skipped_at[:64], "loss_scale": t.scaler.get_scale() if amp else None}
