"""Global settings: a fluent, validated builder, frozen when a task compiles; the section "settings" of the
configuration tree (tr.core.config).

``GLOBAL_SETTING`` is the process-wide instance (the seed's macro of the same name). Every setter checks
its value at once and raises a ConfigError naming it; after ``freeze()`` (done by compile) every setter
raises FrozenError. Tests make a fresh object with ``Settings()`` or reset the global with
``reset_global_settings()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from tr.core.config import Section
from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.log import configure_logging
from tr.core.ops import DEFAULT_GROWTH_INTERVAL, INITIAL_LOSS_SCALE, LOSS_SCALE_RULES
from tr.core.resolution import DEFAULT_MULTIPLE, ResolutionRamp

DEFAULT_SEED = 123


def parse_gpu_list(spec: str | int | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """"0", "0,1,3", 2 (-> device 2), [0, 1] -> tuple of distinct non-negative device ids."""
    if isinstance(spec, bool):
        raise ConfigError(f"GPU list must be a string like '0,1' or a list of ints, got {spec!r}")
    if isinstance(spec, int):
        ids = [spec]
    elif isinstance(spec, str):
        parts = spec.split(",")
        ids = []
        for p in parts:
            t = p.strip()
            if not t:
                raise ConfigError(f"malformed GPU list {spec!r}: empty entry")
            if not (t.isascii() and t.isdigit()):  # str.isdigit alone takes "²" (int() fails) and "١" (1)
                raise ConfigError(f"malformed GPU list {spec!r}: {t!r} is not a device number")
            ids.append(int(t))
    elif isinstance(spec, (list, tuple)):
        ids = []
        for v in spec:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"malformed GPU list {spec!r}: {v!r} is not a device number")
            ids.append(v)
    else:
        raise ConfigError(f"GPU list must be a string like '0,1' or a list of ints, got {spec!r}")
    if not ids:
        raise ConfigError(f"GPU list {spec!r} is empty")
    for i in ids:
        if i < 0:
            raise ConfigError(f"malformed GPU list {spec!r}: device {i} is negative")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"GPU list {spec!r} names a device twice")
    return tuple(ids)


def check_batch_split(batch: int, parts: int, what: str) -> int:
    """``batch`` // ``parts``: the share of each of ``what`` (the devices, the ranks); a global batch that does not
    divide is refused, since each part would silently train on a different share. The one rule of the split."""
    if batch % parts:
        raise ConfigError(f"the global batch size {batch} does not divide by {what}")
    return batch // parts


AMP_DTYPES = {"fp16": DType.FP16, "bf16": DType.BF16}


def _amp_mode(mode: Any) -> tuple[bool, str]:
    """amp()'s argument -> (amp_enabled, amp_dtype)."""
    if isinstance(mode, bool):
        return mode, "fp16"
    if isinstance(mode, str) and mode in ("fp16", "bf16", "off"):
        return mode != "off", "fp16" if mode == "off" else mode
    raise ConfigError(f"settings.amp must be True, False, 'fp16', 'bf16' or 'off', got {mode!r}")


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    if v < 1:
        raise ConfigError(f"{name} must be >= 1, got {v}")
    return v


@dataclass
class Settings(Section):
    NAME: ClassVar[str] = "settings"
    FROZEN_WHAT: ClassVar[str] = "settings are frozen (a task has compiled)"
    FROZEN_HINT: ClassVar[str] = "Create a new task and set it before compile()"
    # where a run trains (its world is recorded by the plan's spec) and what it logs
    NOT_RECORDED: ClassVar[frozenset[str]] = frozenset({"gpu_ids", "cpu_only", "log_level_name"})

    gpu_ids: tuple[int, ...] = ()
    amp_enabled: bool = False
    amp_dtype: str = "fp16"  # AMP's 16-bit type, one of AMP_DTYPES ("fp16" while AMP is off)
    seed: int = DEFAULT_SEED
    batch_size: int = 128
    input_res: int = 0  # 0: the dataset's native resolution
    train_res_begin: int = 0
    train_res_end: int = 0
    res_ramp: ResolutionRamp | None = None  # progressive resizing (tr.core.resolution); None: one side
    val_res: int = 0
    tf32: bool = False
    cpu_only: bool = False  # use_cpu(): the CPU backend even where CUDA is available
    log_level_name: str | None = None  # log_level(): applied to the ``tr`` loggers when set
    _batch_set: bool = field(default=False, repr=False)  # global_batch_size() was called (use_gpu checks then)
    loss_scale_rule: str = "dynamic"  # one of LOSS_SCALE_RULES (AMP only)
    loss_scale_init: float = 0.0  # 0: the rule's INITIAL_LOSS_SCALE
    loss_scale_growth_interval: int = DEFAULT_GROWTH_INTERVAL

    # --- the fluent builder -------------------------------------------------------------------
    def use_gpu(self, spec: str | int | list[int] | tuple[int, ...] = "0") -> Settings:
        """Select GPUs: "0", "0,1", [0, 1]: one process trains on each (a plain script is started once per
        device, see tr.task.devices), each on global batch / devices samples. ``use_cpu()`` undoes it.

        The settings describe a run; the devices are checked against this machine when a task compiles
        (tr.task.devices.check_devices): no usable CUDA device, or an id past the device count, is a
        ConfigError there, before any process, data or backend is started, never a run on the CPU."""
        ids = parse_gpu_list(spec)
        if self._batch_set:
            check_batch_split(self.batch_size, len(ids), f"the number of GPUs {len(ids)}")
        self._set("gpu_ids", ids)
        return self._set("cpu_only", False)

    def use_cpu(self) -> Settings:
        """Train on the CPU backend, even where a CUDA device is available."""
        self._set("gpu_ids", ())
        return self._set("cpu_only", True)

    def amp(self, mode: bool | str = True) -> Settings:
        """Mixed precision. True or "fp16": FP16 activations, gradients and weight working copies with a loss scale
        (loss_scaling()); "bf16": BF16 ones and no loss scale (BF16 has FP32's exponent range); False or "off":
        FP32. The master weights and the optimizer state are FP32 in every mode, and a step whose gradients are
        not finite is skipped in every mode."""
        enabled, dtype = _amp_mode(mode)
        self._set("amp_enabled", enabled)
        return self._set("amp_dtype", dtype)

    def loss_scaling(self, rule: str = "dynamic", init: float | None = None,
                     growth_interval: int = DEFAULT_GROWTH_INTERVAL) -> Settings:
        """AMP's loss scale. "dynamic" (default, torch.amp.GradScaler's rule): halve on a non-finite step,
        double after ``growth_interval`` finite steps in a row, starting at ``init`` (default 65536).
        "static" (the seed's): only halves, never below 1, starting at ``init`` (default 8192)."""
        if rule not in LOSS_SCALE_RULES:
            raise ConfigError(f"loss-scale rule must be one of {LOSS_SCALE_RULES}, got {rule!r}")
        if init is not None and (isinstance(init, bool) or not isinstance(init, (int, float))
                                 or not 0 < init < float("inf")):
            raise ConfigError(f"initial loss scale must be a finite number > 0, got {init!r}")
        n = _positive_int("loss-scale growth interval", growth_interval)
        self._set("loss_scale_rule", rule)
        self._set("loss_scale_init", float(init or 0.0))
        return self._set("loss_scale_growth_interval", n)

    def manual_seed(self, seed: int) -> Settings:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ConfigError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        return self._set("seed", seed)

    def global_batch_size(self, n: int) -> Settings:
        n = _positive_int("global batch size", n)
        if self.gpu_ids:
            check_batch_split(n, len(self.gpu_ids), f"the number of GPUs {len(self.gpu_ids)}")
        self._set("batch_size", n)
        return self._set("_batch_set", True)

    # The resolutions are the side of the (square) samples the model is compiled for. The transforms make
    # the samples; compile() refuses data that does not deliver this side (tr.task.plan_inputs).
    def input_resolution(self, r: int) -> Settings:
        """Side of the (square) samples the model takes, for training and validation."""
        return self._set("input_res", _positive_int("input resolution", r))

    def train_resolution(self, begin: int, end: int | None = None) -> Settings:
        """Side of the training samples. With ``end`` != ``begin``: progressive resizing from ``begin`` in the first
        epoch to ``end`` in the last, linear in between and rounded to a multiple of 32 (FFCV's rule over the whole
        run: ``progressive_resizing(begin, end, 0, total_epochs - 1)``); both must be multiples of 32."""
        b = _positive_int("train resolution", begin)
        e = b if end is None else _positive_int("train resolution end", end)
        ramp = None if e == b else ResolutionRamp(b, e, 0, None, DEFAULT_MULTIPLE)
        self._set("train_res_begin", b)
        self._set("res_ramp", ramp)
        return self._set("train_res_end", e)

    def progressive_resizing(self, min_res: int, max_res: int, start_ramp: int, end_ramp: int,
                             multiple: int = DEFAULT_MULTIPLE) -> Settings:
        """FFCV's progressive resizing: train at ``min_res`` up to epoch ``start_ramp``, at ``max_res`` from
        ``end_ramp`` on (epochs counted from 0, as FFCV's --resolution.start_ramp/end_ramp), in between at the
        linear interpolation rounded to a multiple of ``multiple``. Both sides must be multiples of it (compile
        checks it against the network's total stride) and ``max_res`` is the side the data's transforms make:
        the plan, its buffers and validation are at it, and the train chain's last resize follows the epoch."""
        ramp = ResolutionRamp(min_res, max_res, start_ramp, end_ramp, multiple)
        self._set("train_res_begin", ramp.min_res)
        self._set("res_ramp", ramp)
        return self._set("train_res_end", ramp.max_res)

    def val_resolution(self, r: int) -> Settings:
        """Side of the validation samples: the training side (one TransferStation holds one sample shape)."""
        return self._set("val_res", _positive_int("val resolution", r))

    def use_tf32(self, enabled: bool = True) -> Settings:
        return self._set("tf32", self._bool("use_tf32", enabled))

    def log_level(self, level: str) -> Settings:
        """Set the level of tr's loggers now, with a stream handler on stderr (``configure_logging``)."""
        lv = str(level).upper()
        if lv not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"log level must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
        self._set("log_level_name", lv)
        configure_logging(lv)
        return self

    @staticmethod
    def _bool(name: str, v: Any) -> bool:
        if not isinstance(v, bool):
            raise ConfigError(f"{name} must be True or False, got {v!r}")
        return v

    # --- derived values -----------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return max(1, len(self.gpu_ids))

    @property
    def local_batch_size(self) -> int:
        """Each device's share of the global batch (the launch's world decides at compile: tr.task.resolve)."""
        return check_batch_split(self.batch_size, self.world_size, f"the number of GPUs {self.world_size}")

    @property
    def amp_mode(self) -> str:
        """"off", "fp16" or "bf16"."""
        return self.amp_dtype if self.amp_enabled else "off"

    @property
    def low_dtype(self) -> DType | None:
        """AMP's 16-bit type (activations, gradients, weight working copies, staged batches); None without AMP."""
        return AMP_DTYPES[self.amp_dtype] if self.amp_enabled else None

    @property
    def loss_scale(self) -> float:
        """The first loss scale: 1 without one (FP32, BF16 AMP)."""
        if not self.amp_enabled or self.amp_dtype != "fp16":
            return 1.0
        return self.loss_scale_init or INITIAL_LOSS_SCALE[self.loss_scale_rule]



GLOBAL_SETTING = Settings()


def reset_global_settings() -> Settings:
    """Restore the process-wide settings to defaults (unfrozen) in place and return them."""
    fresh = Settings()
    for f in fields(Settings):
        object.__setattr__(GLOBAL_SETTING, f.name, getattr(fresh, f.name))
    return GLOBAL_SETTING
