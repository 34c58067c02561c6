"""Parameter initializers: specs, the task-level policy, and deterministic Philox draws.

Layouts: FC weight [out, 1, 1, in] (fan_in = in, fan_out = out); conv weight KRSC [K, R, S, C]
(fan_in = R*S*C, fan_out = K*R*S). ``fans(shape)`` gives both for any 4-D (or 2-D [out, in]) weight.

    KAIMING_UNIFORM  U(-b, b), b = gain * sqrt(3 / fan)               (gain default sqrt(2), ReLU)
    KAIMING_NORMAL   N(0, std^2), std = gain / sqrt(fan)
    TRUNC_NORMAL     N(0, std^2) truncated to [-2 std, 2 std], std = sqrt(scale / fan)   (scale default 2)
    XAVIER_UNIFORM   U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))  (gain default 1)
    XAVIER_NORMAL    N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))
    ZEROS, ONES, CONSTANT(value)

fan is fan_in or fan_out per the spec's FanMode. The truncated normal's std is the pre-truncation sigma
(the draws' std is 0.8796 sigma), as in the seed; TensorFlow's variance scaling divides by that factor.

Determinism: tensor number ``stream_id`` of a model with seed ``seed`` draws from the Philox key
derive_seed(seed, stream_id); element i (flat C order of the shape) uses offset i. Truncated normal
rejects |z| > 2 and redraws element i at offset r*n + i in round r = 1, 2, ... (n = numel), so a native
implementation reproduces it with a per-element loop.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import IntEnum

import numpy as np

from tr.algo import _validate as v
from tr.core import philox
from tr.core.errors import ConfigError, ShapeError

TRUNC_SIGMAS = 2.0
TRUNC_MAX_ROUNDS = 64  # P(an element still rejected) = 0.0455^64: never, in practice; then it is clipped


class InitKind(IntEnum):
    KAIMING_UNIFORM = 0
    KAIMING_NORMAL = 1
    TRUNC_NORMAL = 2
    XAVIER_UNIFORM = 3
    XAVIER_NORMAL = 4
    ZEROS = 5
    ONES = 6
    CONSTANT = 7


class FanMode(IntEnum):
    FAN_IN = 0
    FAN_OUT = 1


_RANDOM = frozenset(
    [InitKind.KAIMING_UNIFORM, InitKind.KAIMING_NORMAL, InitKind.TRUNC_NORMAL, InitKind.XAVIER_UNIFORM,
     InitKind.XAVIER_NORMAL]
)
_DEFAULT_GAIN = {InitKind.KAIMING_UNIFORM: math.sqrt(2.0), InitKind.KAIMING_NORMAL: math.sqrt(2.0),
                 InitKind.XAVIER_UNIFORM: 1.0, InitKind.XAVIER_NORMAL: 1.0}


@dataclass(frozen=True, kw_only=True)
class InitSpec:
    """How to fill one tensor. ``gain`` None means the kind's default (sqrt(2) Kaiming, 1 Xavier)."""

    kind: InitKind
    mode: FanMode = FanMode.FAN_IN
    gain: float | None = None
    scale: float = 2.0
    value: float = 0.0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", InitKind(self.kind))
        except ValueError:
            raise ConfigError(f"unknown init kind {self.kind!r}") from None
        try:
            object.__setattr__(self, "mode", FanMode(self.mode))
        except ValueError:
            raise ConfigError(f"unknown fan mode {self.mode!r}") from None
        if self.gain is not None:
            object.__setattr__(self, "gain", v.positive("gain", self.gain))
        object.__setattr__(self, "scale", v.positive("scale", self.scale))
        object.__setattr__(self, "value", v.real("constant value", self.value))

    @property
    def random(self) -> bool:
        return self.kind in _RANDOM

    @property
    def effective_gain(self) -> float:
        return self.gain if self.gain is not None else _DEFAULT_GAIN.get(self.kind, 1.0)

    def _fan(self, fan_in: int, fan_out: int) -> int:
        return fan_in if self.mode is FanMode.FAN_IN else fan_out

    def std(self, fan_in: int, fan_out: int) -> float:
        """Standard deviation of the distribution (for TRUNC_NORMAL: sigma before truncation; 0 if constant)."""
        fi, fo = _check_fans(fan_in, fan_out)
        g = self.effective_gain
        k = self.kind
        if k is InitKind.KAIMING_UNIFORM or k is InitKind.KAIMING_NORMAL:
            return g / math.sqrt(self._fan(fi, fo))
        if k is InitKind.TRUNC_NORMAL:
            return math.sqrt(self.scale / self._fan(fi, fo))
        if k is InitKind.XAVIER_UNIFORM or k is InitKind.XAVIER_NORMAL:
            return g * math.sqrt(2.0 / (fi + fo))
        return 0.0

    def bound(self, fan_in: int, fan_out: int) -> float:
        """Largest |value| a draw can take: b for the uniforms, 2 sigma for TRUNC_NORMAL, |value| for constants.
        Infinite for the untruncated normals."""
        k = self.kind
        if k is InitKind.KAIMING_UNIFORM or k is InitKind.XAVIER_UNIFORM:
            return math.sqrt(3.0) * self.std(fan_in, fan_out)
        if k is InitKind.TRUNC_NORMAL:
            return TRUNC_SIGMAS * self.std(fan_in, fan_out)
        if k is InitKind.KAIMING_NORMAL or k is InitKind.XAVIER_NORMAL:
            return math.inf
        return abs(self.fill_value)

    @property
    def fill_value(self) -> float:
        return {InitKind.ZEROS: 0.0, InitKind.ONES: 1.0}.get(self.kind, self.value)


def kaiming_uniform(gain: float = math.sqrt(2.0), mode: FanMode = FanMode.FAN_IN) -> InitSpec:
    return InitSpec(kind=InitKind.KAIMING_UNIFORM, gain=gain, mode=mode)


def kaiming_normal(gain: float = math.sqrt(2.0), mode: FanMode = FanMode.FAN_IN) -> InitSpec:
    return InitSpec(kind=InitKind.KAIMING_NORMAL, gain=gain, mode=mode)


def truncated_normal(scale: float = 2.0, mode: FanMode = FanMode.FAN_IN) -> InitSpec:
    return InitSpec(kind=InitKind.TRUNC_NORMAL, scale=scale, mode=mode)


def xavier_uniform(gain: float = 1.0) -> InitSpec:
    return InitSpec(kind=InitKind.XAVIER_UNIFORM, gain=gain)


def xavier_normal(gain: float = 1.0) -> InitSpec:
    return InitSpec(kind=InitKind.XAVIER_NORMAL, gain=gain)


def zeros() -> InitSpec:
    return InitSpec(kind=InitKind.ZEROS)


def ones() -> InitSpec:
    return InitSpec(kind=InitKind.ONES)


def constant(value: float) -> InitSpec:
    return InitSpec(kind=InitKind.CONSTANT, value=value)


def _dims(shape: Sequence[int]) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"shape must be a sequence of integers, got {shape!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise ShapeError(f"shape dimensions must be >= 1, got {shape!r}")
    return dims


def _check_fans(fan_in: int, fan_out: int) -> tuple[int, int]:
    return v.integer("fan_in", fan_in, 1), v.integer("fan_out", fan_out, 1)


def fans(shape: Sequence[int]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: KRSC [K, R, S, C] -> (R*S*C, K*R*S), which gives (in, out) for an FC
    weight [out, 1, 1, in]; a 2-D [out, in] weight gives (in, out)."""
    dims = _dims(shape)
    if len(dims) == 4:
        k, r, s, c = dims
        return r * s * c, k * r * s
    if len(dims) == 2:
        return dims[1], dims[0]
    raise ShapeError(f"fans need a 4-D KRSC / [out, 1, 1, in] or a 2-D [out, in] weight shape, got {shape!r}")


def _truncated_standard_normal(key: int, n: int, start: int = 0, count: int | None = None) -> np.ndarray:
    """Elements start .. start+count-1 of the n truncated standard normals of ``key`` (float64)."""
    count = n - start if count is None else count
    z = philox.normal(key, start, count).astype(np.float64)
    bad = np.flatnonzero(np.abs(z) > TRUNC_SIGMAS)
    rnd = 1
    while bad.size and rnd < TRUNC_MAX_ROUNDS:
        # Redraw only the rejected elements; offsets are element-keyed, so the loop order does not matter.
        z[bad] = _normal_at(key, rnd * n + start + bad)
        bad = bad[np.abs(z[bad]) > TRUNC_SIGMAS]
        rnd += 1
    return np.clip(z, -TRUNC_SIGMAS, TRUNC_SIGMAS)


CHUNK = 1 << 20  # elements per task when a large tensor is drawn on several threads


def _drawn(n: int, draw: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """float32 [n] with elements start .. start+count-1 from ``draw(start, count)``. Every draw is keyed by the
    element's offset, so chunks give the same bytes as one call; numpy releases the GIL in its loops, so the
    chunks of a large tensor (VGG16's 103 M-element fc) run on all cores."""
    out = np.empty(n, np.float32)

    def fill(start: int) -> None:
        count = min(CHUNK, n - start)
        out[start:start + count] = draw(start, count)

    starts = range(0, n, CHUNK)
    if len(starts) <= 1:
        for s in starts:
            fill(s)
        return out
    with ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1)) as pool:
        list(pool.map(fill, starts))
    return out


def _normal_at(key: int, offsets: np.ndarray) -> np.ndarray:
    """Standard normals at arbitrary offsets: philox.normal's Box-Muller on raw Philox blocks, computed only
    for the offsets asked (tests check it equals philox.normal element by element)."""
    offs = offsets.astype(np.uint64)
    ctr = np.zeros((offs.size, 4), dtype=np.uint32)
    ctr[:, 0] = (offs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ctr[:, 1] = (offs >> np.uint64(32)).astype(np.uint32)
    r = philox.philox4x32(ctr, (key & 0xFFFFFFFF, key >> 32))
    u1 = ((r[:, 0] >> np.uint32(8)) | np.uint32(1)).astype(np.float64) * 2.0**-24
    u2 = (r[:, 1] >> np.uint32(8)).astype(np.float64) * 2.0**-24
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return z.astype(np.float32).astype(np.float64)


def initialize(
    spec: InitSpec, shape: Sequence[int], fan_in: int, fan_out: int, seed: int, stream_id: int
) -> np.ndarray:
    """A float32 array of ``shape`` filled per ``spec``; a pure function of (spec, shape, fans, seed, stream_id)."""
    if not isinstance(spec, InitSpec):
        raise ConfigError(f"spec must be an InitSpec, got {spec!r}")
    dims = _dims(shape)
    n = math.prod(dims)
    if not spec.random:
        return np.full(dims, spec.fill_value, dtype=np.float32)
    std = spec.std(fan_in, fan_out)
    key = philox.derive_seed(v.integer("seed", seed, 0), v.integer("stream_id", stream_id, 0))
    k = spec.kind
    if k is InitKind.KAIMING_UNIFORM or k is InitKind.XAVIER_UNIFORM:
        b = spec.bound(fan_in, fan_out)

        def draw(start: int, count: int) -> np.ndarray:
            return -b + 2.0 * b * np.asarray(philox.uniform(key, start, count), dtype=np.float64)
    elif k is InitKind.TRUNC_NORMAL:
        def draw(start: int, count: int) -> np.ndarray:
            return std * _truncated_standard_normal(key, n, start, count)
    else:
        def draw(start: int, count: int) -> np.ndarray:
            return std * np.asarray(philox.normal(key, start, count), dtype=np.float64)
    return _drawn(n, draw).reshape(dims)


FAMILIES = ("conv", "fc", "embedding")  # the weight families a policy sets (tr.tensor.program.InitSpec.family)


@dataclass(frozen=True, kw_only=True)
class Initializer:
    """The task-level policy (the seed's ``Initializer().conv(...).fc(...).fan(...)``).

    Defaults as the seed: conv weights TRUNC_NORMAL, FC weights KAIMING_UNIFORM, FAN_IN, Kaiming gain
    sqrt(2). The policy draws weights only: biases, BN beta, running means and optimizer state (0), BN gamma
    and running variances (1) are filled by the kind of their plan's InitSpec.
    Setters: conv() -> conv_kind, fc() -> fc_kind, fan() -> fan_mode, gain() -> gain_factor,
    scale() -> variance_scale, constant() -> constant_value (used by CONSTANT kinds).
    """

    conv_kind: InitKind = InitKind.TRUNC_NORMAL
    fc_kind: InitKind = InitKind.KAIMING_UNIFORM
    fan_mode: FanMode = FanMode.FAN_IN
    gain_factor: float | None = None
    variance_scale: float = 2.0
    constant_value: float = 0.0
    # a learned position embedding's normal std (torchvision draws normal(0.02)); tr's TRUNC_NORMAL cuts at 2 sigma
    # without rescaling, so the drawn values' std is about 0.88 of it
    embedding_std: float = 0.02

    def __post_init__(self) -> None:
        object.__setattr__(self, "embedding_std", v.positive("embedding std", self.embedding_std))
        # Building the specs validates every other field (and names the bad one).
        for family in FAMILIES:
            self.spec_for(family)

    def conv(self, kind: InitKind) -> Initializer:
        return replace(self, conv_kind=kind)

    def fc(self, kind: InitKind) -> Initializer:
        return replace(self, fc_kind=kind)

    def fan(self, mode: FanMode) -> Initializer:
        return replace(self, fan_mode=mode)

    def gain(self, g: float) -> Initializer:
        return replace(self, gain_factor=g)

    def scale(self, s: float) -> Initializer:
        return replace(self, variance_scale=s)

    def constant(self, value: float) -> Initializer:
        return replace(self, constant_value=value)

    def embedding(self, std: float) -> Initializer:
        return replace(self, embedding_std=std)

    def spec_for(self, family: str) -> InitSpec:
        """The InitSpec of a weight of ``family``: "fc" (FC weights), "conv" (convolution weights) or "embedding"
        (a learned position embedding: a truncated normal of std embedding_std, declared with fan_in 1)."""
        if family not in FAMILIES:
            raise ConfigError(f"initializer family {family!r} is not one of {list(FAMILIES)} (the policy draws "
                              f"fc, conv and embedding weights; other tensors are filled by their InitSpec's kind)")
        if family == "embedding":
            return InitSpec(kind=InitKind.TRUNC_NORMAL, mode=FanMode.FAN_IN, scale=self.embedding_std ** 2)
        return InitSpec(kind=self.fc_kind if family == "fc" else self.conv_kind, mode=self.fan_mode,
                        gain=self.gain_factor, scale=self.variance_scale, value=self.constant_value)
