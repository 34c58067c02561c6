"""Global settings: a fluent, validated builder, frozen when a task compiles.

``GLOBAL_SETTING`` is the process-wide instance (the seed's macro of the same name). Every setter checks
its value at once and raises a ConfigError naming it; after ``freeze()`` (done by compile) every setter
raises FrozenError. Tests make a fresh object with ``Settings()`` or reset the global with
``reset_global_settings()``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from tr.core.errors import ConfigError, FrozenError

AMP_INITIAL_LOSS_SCALE = 8192.0
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
            if not t.isdigit():
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


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    if v < 1:
        raise ConfigError(f"{name} must be >= 1, got {v}")
    return v


@dataclass
class Settings:
    gpu_ids: tuple[int, ...] = ()
    amp_enabled: bool = False
    seed: int = DEFAULT_SEED
    batch_size: int = 128
    input_res: int = 0  # 0: the dataset's native resolution
    train_res_begin: int = 0
    train_res_end: int = 0
    val_res: int = 0
    tf32: bool = False
    deterministic: bool = True
    log_level_name: str = "INFO"
    _frozen: bool = field(default=False, repr=False)

    # --- the fluent builder -------------------------------------------------------------------
    def _set(self, name: str, value: Any) -> Settings:
        if self._frozen:
            raise FrozenError(
                f"settings are frozen (a task has compiled); cannot change {name} to {value!r}. "
                "Create a new task and set it before compile()"
            )
        object.__setattr__(self, name, value)
        return self

    def use_gpu(self, spec: str | int | list[int] | tuple[int, ...] = "0") -> Settings:
        """Select GPUs: "0", "0,1", [0, 1]. ``use_cpu()`` clears the list."""
        return self._set("gpu_ids", parse_gpu_list(spec))

    def use_cpu(self) -> Settings:
        return self._set("gpu_ids", ())

    def amp(self, enabled: bool = True) -> Settings:
        return self._set("amp_enabled", self._bool("amp", enabled))

    def manual_seed(self, seed: int) -> Settings:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ConfigError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        return self._set("seed", seed)

    def global_batch_size(self, n: int) -> Settings:
        n = _positive_int("global batch size", n)
        if self.gpu_ids and n % len(self.gpu_ids):
            raise ConfigError(
                f"global batch size {n} does not divide by the number of GPUs {len(self.gpu_ids)}"
            )
        return self._set("batch_size", n)

    def input_resolution(self, r: int) -> Settings:
        """Side of the (square) input images the loader delivers."""
        return self._set("input_res", _positive_int("input resolution", r))

    def train_resolution(self, begin: int, end: int | None = None) -> Settings:
        """Training resolution; with ``end`` different from ``begin``, progressive resizing from begin to end."""
        b = _positive_int("train resolution", begin)
        e = b if end is None else _positive_int("train resolution end", end)
        self._set("train_res_begin", b)
        return self._set("train_res_end", e)

    def val_resolution(self, r: int) -> Settings:
        return self._set("val_res", _positive_int("val resolution", r))

    def use_tf32(self, enabled: bool = True) -> Settings:
        return self._set("tf32", self._bool("use_tf32", enabled))

    def reproducible(self, enabled: bool = True) -> Settings:
        return self._set("deterministic", self._bool("reproducible", enabled))

    def log_level(self, level: str) -> Settings:
        lv = str(level).upper()
        if lv not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"log level must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
        return self._set("log_level_name", lv)

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
        return self.batch_size // self.world_size

    @property
    def loss_scale(self) -> float:
        return AMP_INITIAL_LOSS_SCALE if self.amp_enabled else 1.0

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> Settings:
        object.__setattr__(self, "_frozen", True)
        return self

    def snapshot(self) -> Settings:
        """A frozen copy: what a compiled task keeps, immune to later changes of the global."""
        s = copy.copy(self)
        object.__setattr__(s, "_frozen", True)
        return s

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


GLOBAL_SETTING = Settings()


def reset_global_settings() -> Settings:
    """Restore the process-wide settings to defaults (unfrozen) in place and return them."""
    fresh = Settings()
    for f in fields(Settings):
        object.__setattr__(GLOBAL_SETTING, f.name, getattr(fresh, f.name))
    return GLOBAL_SETTING
