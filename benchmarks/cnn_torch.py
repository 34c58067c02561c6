"""The PyTorch twins of benchmarks/cnn.py: eager, CUDA-graphed (the whole step, or forward + backward) and
torch.compile'd training steps of torchvision's vgg16_bn / resnet50 / mobilenet_v2 / efficientnet_b0 / vit_b_16 on
one resident synthetic batch. vit_b_16 trains with fused AdamW (weight decay on weights only, as cnn.py's tr row),
capturable where the step is captured; its attention is torch's scaled_dot_product_attention (torchvision's encoder
calls MultiheadAttention with need_weights=False), flash attention under BF16 on Hopper.

Every variant: channels_last, ``torch.autocast`` FP16 + ``GradScaler`` (AMP), ``SGD(momentum=0.9,
nesterov=True)`` fused on CUDA (weight decay 1e-4 on conv/fc weights only, as tr), CrossEntropyLoss with label
smoothing 0.1, cudnn.benchmark. Variants:

* ``eager``: the usual loop body (zero_grad(set_to_none), autocast forward + loss, scaled backward,
  scaler.step, scaler.update).
* ``cuda_graph``: that whole body captured once with ``torch.cuda.graph`` after warm-up steps on a side
  stream (PyTorch's "whole network capture" recipe) and replayed. It is legitimate because nothing in it
  needs the host: the fused SGD takes GradScaler's scale and found-inf flag as device tensors
  (``_step_supports_amp_scaling``: no ``.item()`` in scaler.step), scaler.update is a device kernel, and
  autocast runs with ``cache_enabled=False`` as PyTorch requires under capture. Skipped steps (non-finite
  gradients) still skip on the device and halve the scale, as in eager.
* ``cuda_graph_fwd_bwd``: the fallback PyTorch's AMP notes give for optimizers whose step syncs: forward,
  loss and scaled backward captured, scaler.step + update eager after each replay.
* ``compile:<mode>``: ``torch.compile(model, mode)``; the optimizer step stays eager (fused). The first
  step's time (the compile included) is reported as compile_s.

Under FP16 the loss scale is calibrated before the first optimizer step (``calibrate_loss_scale``: backward passes
that only halve GradScaler's scale until the gradients are finite). The fused SGD of torch 2.11 advances its
momentum on a step GradScaler skips: the first steps' routine FP16 overflow wrote inf into the momentum, the next
applied step put it into the weights, and every later step's loss was NaN and skipped (every timed step of the
VGG16-BN and ResNet-50 twins, H200 and H100, 2026-12). tr skips such steps without touching its state; calibrating
first gives the twin the same start (the skipped steps of either side change no weight) and keeps the fastest
optimizer.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

MOMENTUM, WD, LS, SEED = 0.9, 1e-4, 0.1, 123
VARIANTS = ("eager", "cuda_graph", "cuda_graph_fwd_bwd")  # plus "compile:<mode>"


def torch_model(a: argparse.Namespace, torch: Any) -> tuple[Any, list[str]]:
    import torchvision

    torch.manual_seed(SEED)
    notes = ["each framework's own weight init (torchvision's; tr's seed policy: truncated-normal convs, "
             "Kaiming-uniform fcs): the losses differ, the work per step does not"]
    if a.model == "vgg16_bn":
        model = torchvision.models.vgg16_bn(num_classes=a.classes)
        notes.insert(0, "torchvision.models.vgg16_bn as is: its 13 convs keep their biases (tr's have none, a BN "
                        "follows each): 13 small bias-adds and bias gradients more")
        side = a.resolution // 32  # five 2x2 max-pools, floor as both frameworks do
        if side != 7:
            model.avgpool = torch.nn.Identity()
            model.classifier[0] = torch.nn.Linear(512 * side * side, 4096)
            notes.append(f"resolution {a.resolution}: AdaptiveAvgPool2d(7) removed and the first Linear sized "
                         f"{512 * side * side}->4096, as tr's flatten gives")
    elif a.model == "resnet50":
        model = torchvision.models.resnet50(num_classes=a.classes)
        notes.insert(0, "torchvision.models.resnet50 as is (v1.5: the stride on the 3x3 conv of each stage's "
                        "first bottleneck, 1x1 projection conv + BN shortcuts, bias-free convs, fc with bias, "
                        "zero_init_residual off): the same blocks as tr's resnet50 BluePrint")
    elif a.model == "mobilenet_v2":
        model = torchvision.models.mobilenet_v2(num_classes=a.classes)
        notes.insert(0, "torchvision.models.mobilenet_v2 as is (width 1.0, dropout 0.2, bias-free convs, fc with "
                        "bias): the layers of tr's mobilenet_v2 BluePrint (17 depthwise 3x3 convs)")
    elif a.model == "vit_b_16":
        model = torchvision.models.vit_b_16(num_classes=a.classes, image_size=a.resolution)
        notes.insert(0, "torchvision.models.vit_b_16 as is (patch 16, 12 blocks of width 768, 12 heads, MLP 3072, "
                        "LayerNorm eps 1e-6, class-token head with bias, dropout 0): tr's vit_b_16 layer for layer")
    elif a.model == "efficientnet_b0":
        model = torchvision.models.efficientnet_b0(num_classes=a.classes, stochastic_depth_prob=0.0)
        notes.insert(0, "torchvision.models.efficientnet_b0 with stochastic_depth_prob=0, as tr's efficientnet_b0 "
                        "BluePrint (efficientnet_b0_net(drop_path=0); both take torchvision's 0.2, the benchmark "
                        "compares them without; otherwise as is: SiLU, squeeze-excitation, dropout 0.2, fc with "
                        "bias): the layers of tr's efficientnet_b0 BluePrint")
    else:
        raise SystemExit(f"unknown model {a.model!r}")
    return model, notes


def run_torch(a: argparse.Namespace, variant: str) -> dict:
    """One PyTorch row: ``variant`` is one of VARIANTS or ``compile:<mode>``."""
    import torch
    from cnn import synthetic

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    graphed = variant.startswith("cuda_graph")
    if graphed and not cuda:
        raise RuntimeError("CUDA graphs need --device cuda")
    model, notes = torch_model(a, torch)
    model = model.to(dev, memory_format=torch.channels_last).train()
    vit = a.model.startswith("vit")
    # weights decay; biases, norms and (ViT) the class token and position embedding do not, as in tr
    undecayed = {"class_token", "encoder.pos_embedding"}
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.ndim > 1 and n not in undecayed]
    rest = [p for n, p in named if p.ndim <= 1 or n in undecayed]
    fused = cuda and a.torch_fused
    if graphed and not fused:
        raise RuntimeError("the CUDA-graphed step needs the fused optimizer (drop --no-torch-fused)")
    if vit:  # capturable: AdamW's step counters on the device, as capture needs
        from cnn import VIT_BETAS, VIT_WD

        opt = torch.optim.AdamW([{"params": decay, "weight_decay": VIT_WD}, {"params": rest, "weight_decay": 0.0}],
                                lr=a.lr, betas=VIT_BETAS, fused=fused or None, foreach=None if fused else True,
                                capturable=graphed)
    else:
        opt = torch.optim.SGD([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                              lr=a.lr, momentum=MOMENTUM, nesterov=True, fused=fused or None,
                              foreach=None if fused else True)
    bf16 = a.amp and a.amp_dtype == "bf16"  # autocast to bfloat16: no loss scale (a disabled scaler passes through)
    low = torch.bfloat16 if bf16 else torch.float16
    scaler = torch.amp.GradScaler(dev.type, init_scale=a.loss_scale_init or 65536.0, enabled=a.amp and not bf16)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=LS)
    x, y = synthetic(a.batch, a.resolution, a.classes, np.float16 if a.amp and not bf16 else np.float32, SEED)
    xb = torch.from_numpy(x).to(low if bf16 else None).permute(0, 3, 1, 2).to(dev).contiguous(
        memory_format=torch.channels_last)  # (bfloat16: the same nearest-even rounding as tr's staging)
    yb = torch.from_numpy(y).long().to(dev)
    net = model
    if variant.startswith("compile:"):
        mode = variant.split(":", 1)[1]
        torch._dynamo.reset()
        net = torch.compile(model, mode=None if mode == "default" else mode)
    elif variant not in VARIANTS:
        raise SystemExit(f"unknown PyTorch variant {variant!r}")

    def forward_backward(cache: bool = True) -> Any:
        with torch.autocast(dev.type, dtype=low, enabled=a.amp, cache_enabled=cache):
            loss = loss_fn(net(xb), yb)
        scaler.scale(loss).backward()
        return loss

    def eager_step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = forward_backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    scale_start = scaler.get_scale() if scaler.is_enabled() else 1.0
    out: dict = {"variant": variant, "notes": notes,
                 "optimizer": ("AdamW" if vit else "SGD") + (" fused" if fused else " foreach"),
                 "trainable_params": sum(p.numel() for p in model.parameters())}
    calibration_s = 0.0
    if scaler.is_enabled():  # (under torch.compile its first passes compile: counted in compile_s)
        t0 = time.perf_counter()
        out["loss_scale_calibration_passes"] = calibrate_loss_scale(scaler, opt, forward_backward)
        scale_start = scaler.get_scale()
        calibration_s = out["loss_scale_calibration_s"] = time.perf_counter() - t0
    step = eager_step
    sync()
    t0 = time.perf_counter()
    if graphed:
        step = capture(torch, variant, opt, scaler, forward_backward, eager_step, max(3, a.warmup))
        sync()
        out["capture_s"] = time.perf_counter() - t0  # warm-up steps, then the capture
        warm = a.warmup
    else:
        step()  # the first step: cudnn.benchmark's search, and for torch.compile the compile itself
        sync()
        out["first_step_s"] = time.perf_counter() - t0
        if variant.startswith("compile:"):
            out["compile_s"] = calibration_s + out["first_step_s"]
        warm = a.warmup - 1
    for _ in range(warm):
        loss = step()
    sync()
    scale0 = scaler.get_scale() if scaler.is_enabled() else 1.0
    if warm > 0:
        out["loss_after_warmup"] = float(loss.detach().float())
    if scaler.is_enabled():  # the steps skipped before timing (calibration, or a loss that diverged)
        out["skipped_steps_untimed"] = round(math.log2(scale_start / scale0))
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - t0) / a.steps
    out.update(images_per_s=a.batch / dt, ms_per_step=dt * 1e3, last_loss=float(loss.detach().float()))
    if scaler.is_enabled():  # GradScaler halves its scale per skipped step and grows only after 2000 clean steps
        out["skipped_steps_timed"] = round(math.log2(scale0 / scaler.get_scale()))
        out["loss_scale_end"] = scaler.get_scale()
    if cuda:
        out["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    return out


def calibrate_loss_scale(scaler: Any, opt: Any, forward_backward: Any, limit: int = 40) -> int:
    """Halve GradScaler's scale until one scaled backward gives finite gradients, with no optimizer step (the
    module docstring says why); the gradients are dropped after. Returns the backward passes it took."""
    for passes in range(1, limit + 1):
        opt.zero_grad(set_to_none=True)
        forward_backward()
        scaler.unscale_(opt)  # records this optimizer's found-inf, which update() reads
        before = scaler.get_scale()
        scaler.update()
        if scaler.get_scale() >= before:  # no overflow at this scale
            opt.zero_grad(set_to_none=True)
            return passes
    raise RuntimeError(f"the loss scale still overflows after {limit} halvings: the loss itself is not finite")


def capture(torch: Any, variant: str, opt: Any, scaler: Any, forward_backward: Any, eager_step: Any,
            warmup: int) -> Any:
    """Warm up on a side stream (cudnn.benchmark's search, the momentum buffers, GradScaler's tensors), capture,
    and return a step function that replays the graph (and, for cuda_graph_fwd_bwd, runs the optimizer)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            if variant == "cuda_graph":
                opt.zero_grad(set_to_none=True)
                forward_backward(cache=False)
                scaler.step(opt)
                scaler.update()
            else:
                eager_step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # grads set to None: the captured backward allocates them from the graph's pool and replays write them
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = forward_backward(cache=False)
        if variant == "cuda_graph":
            scaler.step(opt)
            scaler.update()

    if variant == "cuda_graph":
        def replay() -> Any:
            graph.replay()
            return static_loss
        return replay

    def replay_then_step() -> Any:
        graph.replay()
        scaler.step(opt)
        scaler.update()
        return static_loss
    return replay_then_step
