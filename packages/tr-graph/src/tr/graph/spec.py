"""CompileSpec: everything besides the BluePrint that decides a compiled plan.

Batches are per device (local). Resolutions are square sides; None keeps the input's own H and W.
Variants: train (batch, train_resolution), train_last (last_train_batch), val (val_batch,
val_resolution) and val_last (last_val_batch): one per kind of step the task launches (tr.graph.steps).
Progressive resizing adds train@R and train_last@R for every lower training side R (``progressive_resolutions``):
the train and validation variants are at the final side, the largest, which sizes the input tensors.
The learning rate always comes from a device table of lr_table_steps entries (lr_lookup reads
table[min(step, len - 1)] at the start of every optimizer step), written by the task before the first step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.mixup import MixupConfig
from tr.core.ops import DEFAULT_GROWTH_INTERVAL, INITIAL_LOSS_SCALE, LOSS_SCALE_RULES
from tr.core.optim import GRAD_CLIP_MODES, LARS, OPTIMIZERS, ParamGroup, first_moment, second_moment
from tr.core.settings import Settings
from tr.core.shape import Shape
from tr.graph.input_plan import HOST_INPUT, InputPlan, is_input_plan
from tr.graph.layers import LOSS_KINDS
from tr.tensor.program import TRAIN, TRAIN_LAST, VAL, VAL_LAST, VariantInfo, at_side


@dataclass(frozen=True)
class CompileSpec:
    input_shape: tuple[int, int, int]  # one sample (H, W, C) as the loader delivers it
    num_classes: int
    batch: int  # per-device training batch (with accumulate > 1: the micro-batch)
    last_train_batch: int | None = None  # the epoch's last (partial) batch; None: = batch
    val_batch: int | None = None  # None: = batch
    last_val_batch: int | None = None  # None: = val_batch
    train_resolution: int | None = None  # square training side; None: input H, W
    val_resolution: int | None = None  # None: = train_resolution
    progressive_resolutions: tuple[int, ...] = ()  # lower training sides, ascending (progressive resizing)
    amp: bool = False
    amp_dtype: str = "fp16"  # AMP's 16-bit type: "fp16" (loss-scaled) or "bf16" (no loss scale); "fp16" without AMP
    loss_scale_rule: str = "dynamic"  # AMP: one of LOSS_SCALE_RULES (GradScaler's, or the seed's only-halving)
    loss_scale_init: float | None = None  # AMP's first loss scale; None: the rule's INITIAL_LOSS_SCALE
    loss_scale_growth_interval: int = DEFAULT_GROWTH_INTERVAL  # dynamic: clean steps in a row before doubling
    optimizer: str = "momentum"  # one of OPTIMIZERS
    beta1: float = 0.9  # the first moment's coefficient: SGD and LARS momentum, Adam's beta1
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    trust_coefficient: float = 0.001  # LARS
    trust_clip: float = 100.0  # LARS: the trust ratio's upper bound
    param_groups: tuple[ParamGroup, ...] = ()  # per memory group LR multiplier and weight decay (tr.core.optim)
    layer_decay: float | None = None  # in (0, 1]: layer k of n trains at decay ** (n - 1 - k) times the rate
    freeze_first_layer: bool = False  # also the train*_frozen_* steps: the first trained layer neither
    # updated nor differentiated (task.freeze_first_layer_after launches them from its epoch on)
    label_smoothing: float = 0.0
    loss: str = "softmax_ce"  # the loss layer appended after the model: softmax_ce, bce_logits or mse
    grad_clip: float = 0.0  # > 0: the clipping bound (grad_clip_mode's), 0: off
    grad_clip_mode: str = "value"  # one of GRAD_CLIP_MODES: clamp each element, or scale by the global norm
    lr_table_steps: int = 1  # entries of the device's learning-rate table (a run's steps); 1: a constant rate
    bn_momentum: float | None = None  # overrides every BN's momentum when set
    bn_eps: float | None = None  # overrides every BN's eps when set
    world_size: int = 1  # recorded; the all-reduce ops are emitted for any size
    ema_decay: float | None = None  # in (0, 1): EMA twins of the weights, updated every step (tr.graph.ema)
    ema_warmup: float = 0.0  # > 0: the EMA's decay ramps up over about this many steps (tr.graph.ema); 0: constant
    input: InputPlan | None = None  # how batches arrive (tr.graph.input_plan); None: the host pipeline's copy
    accumulate: int = 1  # micro-batches an optimizer step consumes (tr.graph.accumulate); 1: every step updates
    micro_steps: int | None = None  # with accumulate > 1: the training micro-steps of an epoch (its windows' ends)
    mixup: MixupConfig | None = None  # Mixup / CutMix of every training batch on the device (tr.core.mixup)

    def __post_init__(self) -> None:
        self.validate()

    # --- validation -------------------------------------------------------------------------------
    def validate(self) -> None:
        try:
            h, w, c = self.input_shape
        except (TypeError, ValueError):
            raise ConfigError(f"input_shape must be (H, W, C) of one sample, got {self.input_shape!r}") from None
        for name, v in (("input H", h), ("input W", w), ("input C", c), ("num_classes", self.num_classes),
                        ("batch", self.batch), ("world_size", self.world_size)):
            _positive(name, v)
        for name in ("last_train_batch", "val_batch", "last_val_batch", "train_resolution", "val_resolution"):
            v = getattr(self, name)
            if v is not None:
                _positive(name, v)
        self._validate_progressive()
        if self.last_train_batch is not None and self.last_train_batch > self.batch:
            raise ConfigError(f"last_train_batch {self.last_train_batch} exceeds batch {self.batch}")
        if self.last_val_batch is not None and self.last_val_batch > self.val_batch_size:
            raise ConfigError(f"last_val_batch {self.last_val_batch} exceeds val batch {self.val_batch_size}")
        if not isinstance(self.amp, bool):
            raise ConfigError(f"amp must be True or False, got {self.amp!r}")
        if self.amp_dtype not in AMP_DTYPES:
            raise ConfigError(f"amp_dtype must be one of {tuple(AMP_DTYPES)}, got {self.amp_dtype!r}")
        if self.amp_dtype != "fp16" and not self.amp:
            raise ConfigError(f"amp_dtype {self.amp_dtype!r} without AMP (amp is False)")
        self._validate_loss_scale()
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        _unit("beta1", self.beta1, closed=True)
        _unit("beta2", self.beta2)
        for name in ("eps", "weight_decay", "trust_coefficient", "trust_clip", "grad_clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
        if not isinstance(self.param_groups, tuple) or not all(isinstance(g, ParamGroup) for g in self.param_groups):
            raise ConfigError(f"param_groups must be a tuple of tr.core.optim.ParamGroup, got {self.param_groups!r}")
        if self.param_groups and self.optimizer in LARS:
            raise ConfigError("parameter groups with LARS are not supported (its trust ratios are per tensor): use "
                              "SGD, Adam or AdamW, or no param_group()")
        d = self.layer_decay
        if d is not None:
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d <= 1:
                raise ConfigError(f"layer_decay must be a number in (0, 1], got {d!r}")
            if self.optimizer in LARS:
                raise ConfigError("layer_decay with LARS is not supported (its trust ratios set per-tensor rates)")
        if not isinstance(self.freeze_first_layer, bool):
            raise ConfigError(f"freeze_first_layer must be True or False, got {self.freeze_first_layer!r}")
        if self.freeze_first_layer and self.optimizer in LARS:
            raise ConfigError("freezing the first layer with LARS is not supported (its decayed weights' update "
                              "is one trust-ratio op a tensor, its bias-like ones a range): use SGD, Adam or AdamW")
        if self.grad_clip_mode not in GRAD_CLIP_MODES:
            raise ConfigError(f"grad_clip_mode must be one of {GRAD_CLIP_MODES}, got {self.grad_clip_mode!r}")
        if not self.trust_clip > 0:
            raise ConfigError(f"trust_clip must be > 0, got {self.trust_clip!r}")
        _unit("label_smoothing", self.label_smoothing)
        if self.loss not in LOSS_KINDS:
            raise ConfigError(f"loss must be one of {', '.join(LOSS_KINDS)}, got {self.loss!r}")
        if self.mixup is not None:
            if not isinstance(self.mixup, MixupConfig):
                raise ConfigError(f"mixup must be a tr.core.mixup.MixupConfig or None, got {self.mixup!r}")
            if self.loss != "softmax_ce":
                raise ConfigError(f"mixup trains on soft targets, which the softmax_ce loss reads; the loss is "
                                  f"{self.loss!r}")
        v = self.lr_table_steps
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"lr_table_steps must be an integer >= 1 (the entries of the device's learning-rate "
                              f"table, one per step; 1: a constant rate), got {v!r}")
        if self.bn_momentum is not None:
            _unit("bn_momentum", self.bn_momentum, closed=True)
        v = self.ema_decay
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1):
            raise ConfigError(f"ema decay must be a number in (0, 1), got {v!r}")
        w = self.ema_warmup
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"ema warmup must be a finite number >= 0 (steps), got {w!r}")
        if w > 0 and self.ema_decay is None:
            raise ConfigError(f"ema warmup {w!r} without an EMA (ema_decay is None)")
        if self.bn_eps is not None and (not isinstance(self.bn_eps, (int, float)) or not self.bn_eps > 0):
            raise ConfigError(f"bn_eps must be > 0, got {self.bn_eps!r}")
        _positive("accumulate", self.accumulate)
        if (self.accumulate > 1) != (self.micro_steps is not None):
            raise ConfigError(f"micro_steps is given exactly when accumulate > 1, got accumulate {self.accumulate}, "
                              f"micro_steps {self.micro_steps!r}")
        if self.micro_steps is not None:
            _positive("micro_steps", self.micro_steps)
        if self.input is not None and not is_input_plan(self.input):
            raise ConfigError(f"input must be an input plan (tr.graph.input_plan: a JpegInput, a ResidentInput, ...) "
                              f"or None, got {self.input!r}")
        self.input_plan.check_spec(self)

    def _validate_progressive(self) -> None:
        sides = self.progressive_resolutions
        if not isinstance(sides, tuple):
            raise ConfigError(f"progressive_resolutions must be a tuple of sides, got {sides!r}")
        for r in sides:
            _positive("progressive resolution", r)
        if not sides:
            return
        final = self.train_resolution or self.input_shape[0]
        if list(sides) != sorted(set(sides)) or sides[-1] >= final:
            raise ConfigError(f"progressive_resolutions {sides} must be distinct lower training sides in ascending "
                              f"order, each below the final side {final} (the compiled maximum)")

    def _validate_loss_scale(self) -> None:
        if self.loss_scale_rule not in LOSS_SCALE_RULES:
            raise ConfigError(f"loss_scale_rule must be one of {LOSS_SCALE_RULES}, got {self.loss_scale_rule!r}")
        v = self.loss_scale_init
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf):
            raise ConfigError(f"loss_scale_init must be a finite number > 0 or None, got {v!r}")
        _positive("loss_scale_growth_interval", self.loss_scale_growth_interval)
        if self.amp and not self.loss_scaled and (self.loss_scale_rule, self.loss_scale_init,
                                                  self.loss_scale_growth_interval) != _NO_LOSS_SCALING:
            raise ConfigError(f"settings.loss_scaling(): BF16 AMP has no loss scale (its range is FP32's), got rule "
                              f"{self.loss_scale_rule!r}, init {self.loss_scale_init!r}, growth interval "
                              f"{self.loss_scale_growth_interval}; drop the call or use amp('fp16')")

    # --- derived ----------------------------------------------------------------------------------
    @property
    def input_plan(self) -> InputPlan:
        """The input the plan is fed by (tr.graph.input_plan): JPEG files, a resident data set, or the host."""
        return self.input if self.input is not None else HOST_INPUT

    @property
    def val_batch_size(self) -> int:
        return self.val_batch if self.val_batch is not None else self.batch

    @property
    def momentum_slot(self) -> bool:
        """A first-moment / momentum buffer per trained tensor (role MOMENT1)."""
        return first_moment(self.optimizer)

    @property
    def second_moment_slot(self) -> bool:
        return second_moment(self.optimizer)

    @property
    def lars(self) -> bool:
        return self.optimizer in LARS

    @property
    def low_dtype(self) -> DType:
        """The type of activations, their gradients and the weights' working copies: FP32 without AMP."""
        return AMP_DTYPES[self.amp_dtype] if self.amp else DType.FP32

    @property
    def loss_scaled(self) -> bool:
        """Whether the loss is scaled and the scale updated (FP16 AMP); BF16's range needs no scale, FP32's none."""
        return self.amp and self.amp_dtype == "fp16"

    @property
    def loss_scale(self) -> float:
        """The loss scale's first value: 1 without a loss scale (FP32, BF16)."""
        if not self.loss_scaled:
            return 1.0
        return float(self.loss_scale_init or INITIAL_LOSS_SCALE[self.loss_scale_rule])

    def input_at(self, batch: int, resolution: int | None) -> Shape:
        h, w, c = self.input_shape
        if resolution is not None:
            h = w = resolution
        return Shape(batch, h, w, c)

    def variants(self) -> dict[str, VariantInfo]:
        """The compiled variants in a fixed order (train ones first, the progressive sides after the final one)."""
        h = self.input_shape[0]
        tr = self.train_resolution
        va = self.val_resolution if self.val_resolution is not None else tr
        last = self.last_train_batch if self.last_train_batch is not None else self.batch
        vb = self.val_batch_size
        vlast = self.last_val_batch if self.last_val_batch is not None else vb
        out = {TRAIN: VariantInfo(TRAIN, self.batch, tr or h, True),
               TRAIN_LAST: VariantInfo(TRAIN_LAST, last, tr or h, True)}
        for r in self.progressive_resolutions:
            out[at_side(TRAIN, r)] = VariantInfo(at_side(TRAIN, r), self.batch, r, True)
            out[at_side(TRAIN_LAST, r)] = VariantInfo(at_side(TRAIN_LAST, r), last, r, True)
        out[VAL] = VariantInfo(VAL, vb, va or h, False)
        out[VAL_LAST] = VariantInfo(VAL_LAST, vlast, va or h, False)
        return out

    def variant_input(self, v: VariantInfo) -> Shape:
        """The input batch shape of a variant: [batch, side, side, C], or the native H, W without a side."""
        return self.input_at(v.batch, self._resolution_of(v))

    def _resolution_of(self, v: VariantInfo) -> int | None:
        if v.name in (TRAIN, TRAIN_LAST):
            return self.train_resolution
        if v.train:  # a progressive side
            return v.resolution
        return self.val_resolution if self.val_resolution is not None else self.train_resolution

    def replace(self, **kw: Any) -> CompileSpec:
        return replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


AMP_DTYPES = {"fp16": DType.FP16, "bf16": DType.BF16}
_NO_LOSS_SCALING = ("dynamic", None, DEFAULT_GROWTH_INTERVAL)  # loss_scaling()'s defaults: what BF16 accepts


def loss_scale_fields(settings: Settings) -> dict[str, Any]:
    """The CompileSpec fields of the settings' loss scaling (loss_scaling())."""
    return {"loss_scale_rule": settings.loss_scale_rule, "loss_scale_init": settings.loss_scale_init or None,
            "loss_scale_growth_interval": settings.loss_scale_growth_interval}


def _positive(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")


def _unit(name: str, v: Any, closed: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < 0 or v > 1 or (v == 1 and not closed):
        raise ConfigError(f"{name} must be in [0, 1{']' if closed else ')'}, got {v!r}")
