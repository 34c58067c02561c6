"""The training recipe's chain methods of DeepLearningTask (a mixin: they validate their arguments and set the
task's configuration; compile() reads it): parameter groups, gradient accumulation, layer-wise decay, freezing the
first layer, gradient clipping, EMA / SEMA and Mixup / CutMix."""

from __future__ import annotations

import math
import numbers
from typing import Self

from tr.core.errors import ConfigError
from tr.core.mixup import MixupConfig
from tr.core.optim import GRAD_CLIP_MODES, ParamGroup
from tr.task import ema
from tr.task.config import TaskConfig


class RecipeSetters:
    """Mixed into DeepLearningTask, whose ``_plan`` checks the phase and whose ``_cfg`` holds the values."""

    _cfg: TaskConfig

    def _plan(self, action: str) -> Self:
        raise NotImplementedError

    def mixup(self, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0, prob: float = 1.0,
              switch_prob: float = 0.5) -> Self:
        """Mixup / CutMix every training batch with its reverse on the device (timm's Mixup, mode 'batch',
        correct_lam; the loss's label smoothing mixed into the soft targets): tr.core.mixup. An alpha of 0 turns
        that method off (not both); the draws follow the run's seed, rank and step, also across a resume."""
        self._plan("mixup()")
        self._cfg._set("mixup", MixupConfig(mixup_alpha, cutmix_alpha, prob, switch_prob))
        return self

    def param_group(self, select: str, lr_mult: float = 1.0, weight_decay: float | None = None) -> Self:
        """Train the parameters ``select`` picks at ``lr_mult`` times the schedule's rate and with ``weight_decay``
        (None: the optimizer's on weights, none on bias-like parameters): "weight" (conv and fc weights), "bias"
        (their biases), "norm" (batch and layer norm scales and shifts), a pattern over the trained tensors' names
        when it holds a "." ("L0.*": the first layer; "L*.b": every bias; each tensor is then updated on its own)
        or a pattern over the plan's memory group names ("deep_conv", "fc_*"); ``python -m tr.graph`` lists both.
        Called again, a later group overrides an earlier one where both pick; a selection that picks nothing is a
        ConfigError at compile. As torch's optimizer param_groups (a torch group's lr is base lr * lr_mult)."""
        self._plan("param_group()")
        group = ParamGroup(select, lr_mult, weight_decay)
        self._cfg._set("param_groups", (*self._cfg.param_groups, group))
        return self

    def accumulate(self, k: int) -> Self:
        """Gradient accumulation: each optimizer step consumes k micro-batches, the global batch size b split into
        micro-batches of b / (k x ranks) on each rank (b must divide). The captured step is the micro-step; it sums
        the gradients in FP32 and applies the optimizer, the EMA, the loss scale's update and the all-reduce on the
        window's last micro-step, decided on the device (tr.graph.accumulate). The LR schedule, on_step, the epoch
        table and checkpoints count optimizer steps. Each micro-batch's loss gradient is divided by the window's
        samples, so a network without batch norm or dropout trains as with one batch b, up to the FP32 rounding of
        the regrouped sum; batch norm normalises and updates its running statistics per micro-batch (as PyTorch
        does), and dropout draws per micro-batch. Windows never cross an epoch's end: its last may be shorter."""
        self._plan("accumulate()")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ConfigError(f"task.accumulate must be an integer >= 1 (micro-batches a step), got {k!r}")
        self._cfg._set("accumulate", int(k))
        return self

    def layer_decay(self, decay: float) -> Self:
        """Layer-wise rate decay (timm's --layer-decay, BEiT's fine-tuning recipe): layer k of the n layers that own
        trained tensors, in model order, trains at decay ** (n - 1 - k) times the rate, the head at the full rate
        (on top of param_group()'s multipliers). Each trained tensor is then updated by its own launch. Layers, not
        blocks: a ViT encoder block is 6 layers with trained tensors here where timm counts 1, so take decay ** (1/6)
        for timm's per-block value."""
        self._plan("layer_decay()")
        if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not 0 < decay <= 1:
            raise ConfigError(f"layer_decay must be a number in (0, 1], got {decay!r}")
        self._cfg._set("layer_decay", float(decay))
        return self

    def freeze_first_layer_after(self, epoch: int) -> Self:
        """After ``epoch`` epochs (1 <= epoch <= total_epochs, checked at compile) the first layer with trained
        tensors stops training: its optimizer update (moments, decay) is skipped and its weight gradients are not
        computed (its backward is left out; its zeroed gradients count as zero in a norm clip). The compiled plan
        holds both training steps; the loop launches the frozen one from epoch ``epoch`` + 1 on (the seed's
        freeze_first_layer_after). Its batch norm still updates running statistics in training, as in torch."""
        self._plan("freeze_first_layer_after()")
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 1:
            raise ConfigError(f"freeze_first_layer_after must be an integer >= 1 (epochs the first layer trains), "
                              f"got {epoch!r}")
        self._cfg._set("freeze_first_after", int(epoch))
        return self

    def grad_clip(self, limit: float, mode: str = "value") -> Self:
        """Clip the gradients before every update (after the data-parallel all-reduce; a skipped step is left as
        it is). ``mode="value"`` (the seed's): clamp each element to [-limit, limit]. ``mode="norm"``
        (torch.nn.utils.clip_grad_norm_): scale all of them by min(1, limit / (norm + 1e-6)), norm the L2 norm
        over every gradient of the model (one fixed-order float64 reduction: deterministic). ``mode="agc"``
        (adaptive clipping, timm's adaptive_clip_grad with eps 1e-3): each output unit's gradient (a bias-like
        tensor's as a whole) is scaled down to ``limit`` times its weights' norm, the head's excepted (timm's
        exclude_head). -1 turns it off."""
        self._plan("grad_clip()")
        if mode not in GRAD_CLIP_MODES:
            raise ConfigError(f"grad_clip mode must be one of {GRAD_CLIP_MODES}, got {mode!r}")
        if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not (
                (limit > 0 and math.isfinite(limit)) or limit == -1):
            raise ConfigError(f"grad_clip must be a finite number > 0 (or -1 to disable), got {limit!r}")
        self._cfg._set("grad_clip", float(limit))
        self._cfg._set("grad_clip_mode", mode)
        return self

    def ema(self, decay: float = 0.999, validate: bool = True, warmup: float = 0.0) -> Self:
        """Keep an exponential moving average of the weights, updated on the device after every applied
        step (EMA = decay*EMA + (1-decay)*W); with ``validate`` also validate it (the table's EMA columns). With
        ``warmup`` > 0 the decay ramps up as YOLOv5's ModelEMA: decay * (1 - exp(-step / warmup)), step the
        steps taken (skipped ones included), so the average is not dominated by the first weights."""
        self._plan("ema()")
        self._cfg._set("ema", ema.EmaConfig(decay, validate, switch=False, warmup=warmup))
        return self

    def sema(self, decay: float = 0.9, validate: bool = False, warmup: float = 0.0) -> Self:
        """The seed's use_sema/sema_decay: EMA with decay ``decay`` (and ``warmup`` as ema()'s), and at every
        epoch's end the weights become the EMA weights. See tr.task.ema."""
        self._plan("sema()")
        self._cfg._set("ema", ema.EmaConfig(decay, validate, switch=True, warmup=warmup))
        return self
