"""Learning-rate schedulers: stateless, the LR is a pure function of the global step.

    sched = CosineAnnealingLR(0.36).warmup(10).warmup_start_lr(0.01).eta_min(1e-6)   # = .base_lr(0.36)
    ready = sched.prepare(total_epochs=100, steps_per_epoch=390)   # a new value; sched is unchanged
    ready.lr(step); ready.lr_at(epoch, batch); ready.table()       # float32 [total_steps]

The formula (the seed's, SEED_SYSTEM.md §7): total = E*S, W = warmup_epochs*S, s clamped to [0, total];
    curve(s) = start + (base - start) * s / W          if W > 0 and s <= W
             = decay(d = s - W, D = total - W)         otherwise
and a negative or NaN value becomes 0. start = warmup_start_lr if given, else base * warmup_start_factor
(default 0). ``lr(step)`` applies the step mode to the global step (= epoch * S + batch); ``curve`` does not:
- batch mode (``step_by_batch()``): step s uses curve(s);
- epoch mode (the default): the warm-up steps per batch, step s < W uses curve(s), and the decay steps per
  epoch, every batch of epoch e >= warmup_epochs uses curve(e*S). So the ramp of both modes is the same, the
  table reaches base at step W (the first step after the warm-up) and the decays are the seed's;
- the seed's epoch mode (``step_by_epoch(warmup_by_epoch=True)``): every batch of epoch e uses curve(e*S), the
  ramp included.

Why the warm-up steps per batch in epoch mode. The seed holds the ramp per epoch too, so with its default
start (0) ``CosineAnnealingLR(1e-3).warmup(5)`` trains its whole first epoch at LR 0 (the model after it is its
initialisation). torch's LinearLR + SequentialLR step the warm-up and the decay with the same step() calls
(both per epoch or both per batch) and refuse a start factor of 0 (default 1/3): stepped per epoch, the first
epoch runs at base/3. timm counts its warm-up in the scheduler's unit (epochs by default, updates with
``step_on_epochs=False``) from ``warmup_lr_init`` (0 in its classes, a tiny LR in its train.py): stepped per
epoch, its first epoch hardly trains either. Warm-up exists for the first updates (Goyal et al. 2017 ramp per
iteration), which is what torch and timm give when stepped per update; the decay keeps its epoch stepping, so
epoch mode keeps its meaning after the warm-up (the seed's decays, one LR per epoch). The ramp follows torch
LinearLR's convention: step 0 runs at start and step W at base (batch mode equals torch's
SequentialLR(LinearLR, ...) stepped per batch). With the default start 0 only the run's first step updates
nothing (an AdamW step still takes its gradient into the moments); ``warmup_start_factor`` or
``warmup_start_lr`` start higher. Only the LR table changes: the device still reads it per step, and the log
still shows each epoch's batch-0 LR.

StepLR, MultiStepLR, ExponentialLR and ConstantLR change only at epoch boundaries after the warm-up (their
parameters are epochs), so for them the step mode matters only with the seed's epoch warm-up.

prepare() refuses a parameter that certainly never takes effect in the prepared run (a ConfigError naming it and
total_epochs): a MultiStepLR milestone >= total_epochs, a StepLR step_size that puts the first decay past the
last epoch, a WSDLR decay_start whose decay starts after the last step the table holds, a t_mult > 1 whose
second cycle never starts, a warm-up start or an epoch-held ramp without a warm-up. It does not refuse a run
too short for any value to act (a warm-up over the whole run, one epoch after it in epoch mode: a smoke run
decays nothing whatever the parameters), nor a parameter that acts only in part (a cosine's T_0 longer than the
run). tests/test_scheduler.py checks both ways against the tables: refused exactly where the value changes
nothing and another value would change something.

Setters follow the seed's names; fields are named apart where a setter would clash: base_lr() -> base,
warmup() -> warmup_epochs, warmup_start_lr() -> warmup_start, warmup_start_factor() -> warmup_factor,
step_by_batch()/step_by_epoch() -> by_batch (and warmup_by_epoch), eta_min() -> min_lr, power() -> exponent,
end_lr() -> final_lr, step_size() -> step_epochs, gamma() -> factor, milestones() -> milestone_epochs,
decay_start() -> decay_from, t_0() -> cycle_epochs, t_mult() -> cycle_mult.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from tr.algo import _validate as v
from tr.core.errors import ConfigError, PhaseError

_S = TypeVar("_S", bound="Scheduler")


@dataclass(frozen=True, kw_only=True)
class Scheduler:
    """Base of every scheduler: base LR, linear warmup, step mode, and the prepared (E, S).

    The base LR is the one positional argument of every scheduler (the seed's ``CosineAnnealingLR(1e-3)``);
    everything else is set by the fluent setters.
    """

    base: float = field(default=0.1, kw_only=False)
    warmup_epochs: int = 0
    warmup_start: float | None = None
    warmup_factor: float = 0.0
    by_batch: bool = False
    warmup_by_epoch: bool = False  # the seed's epoch-mode ramp, held per epoch (epoch mode only)
    total_epochs: int | None = None
    steps_per_epoch: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", v.non_negative("base_lr", self.base))
        object.__setattr__(self, "warmup_epochs", v.integer("warmup epochs", self.warmup_epochs, 0))
        if self.warmup_start is not None:
            object.__setattr__(self, "warmup_start", v.non_negative("warmup_start_lr", self.warmup_start))
        object.__setattr__(self, "warmup_factor", v.unit_closed("warmup_start_factor", self.warmup_factor))
        object.__setattr__(self, "by_batch", v.boolean("by_batch", self.by_batch))
        object.__setattr__(self, "warmup_by_epoch", v.boolean("warmup_by_epoch", self.warmup_by_epoch))
        if self.by_batch and self.warmup_by_epoch:
            raise ConfigError("warmup_by_epoch is the seed's epoch mode (step_by_epoch(warmup_by_epoch=True)); "
                              "in batch mode the warm-up steps per batch")
        if (self.total_epochs is None) != (self.steps_per_epoch is None):
            raise ConfigError("total_epochs and steps_per_epoch are set together by prepare()")
        if self.total_epochs is not None:
            object.__setattr__(self, "total_epochs", v.integer("total_epochs", self.total_epochs, 1))
            object.__setattr__(self, "steps_per_epoch", v.integer("steps_per_epoch", self.steps_per_epoch, 1))
            if self.warmup_epochs > self.total_epochs:
                raise ConfigError(
                    f"warmup epochs ({self.warmup_epochs}) must not exceed total_epochs ({self.total_epochs})"
                )
        self._validate()
        if self.total_epochs is not None:
            self._check_start()
            if self.warmup_epochs < self.total_epochs:  # with no decay step in the run, no decay parameter acts
                self._check_run(self.total_epochs, self.steps_per_epoch)

    def _validate(self) -> None:
        """Subclass checks of their own fields."""

    def _check_start(self) -> None:
        # The start is read only by a ramp; the factor only when no start LR is given. Checked once prepared,
        # since the fluent setters may set them in any order.
        if self.warmup_epochs == 0 and (self.warmup_start is not None or self.warmup_factor != 0.0):
            what = (f"warmup_start_lr {self.warmup_start}" if self.warmup_start is not None
                    else f"warmup_start_factor {self.warmup_factor}")
            raise ConfigError(f"{what} never takes effect: there is no warm-up (warmup epochs 0 of total_epochs "
                              f"{self.total_epochs}); set warmup(epochs) or drop it")
        if self.warmup_epochs == 0 and self.warmup_by_epoch:
            raise ConfigError(f"warmup_by_epoch never takes effect: there is no warm-up (warmup epochs 0 of "
                              f"total_epochs {self.total_epochs}); set warmup(epochs) or use step_by_epoch()")
        if self.warmup_start is not None and self.warmup_factor != 0.0:
            raise ConfigError(f"warmup_start_factor {self.warmup_factor} never takes effect: warmup_start_lr "
                              f"{self.warmup_start} gives the start; set one of them")

    def _check_run(self, epochs: int, spe: int) -> None:
        """Subclass checks that a parameter takes effect in a run of ``epochs`` x ``spe`` steps with at least
        one decay step (ConfigError naming the parameter and total_epochs otherwise)."""

    def _decay_steps(self, epochs: int, spe: int) -> tuple[int, int]:
        """(the steps after the warm-up, the largest d = s - W the table reads: its last step in batch mode, the
        last epoch's first in epoch mode) of a run of ``epochs`` x ``spe``: a decay that starts changing the LR
        after the latter never shows."""
        span = (epochs - self.warmup_epochs) * spe
        return span, span - 1 if self.by_batch else span - spe

    # --- fluent setters ----------------------------------------------------------------------
    def base_lr(self: _S, lr: float) -> _S:
        return replace(self, base=lr)

    def warmup(self: _S, epochs: int) -> _S:
        """Linear warmup over the first ``epochs`` epochs (0: none): per step from the start LR (step 0) to base_lr
        (the first step after it), in both step modes unless ``step_by_epoch(warmup_by_epoch=True)``."""
        return replace(self, warmup_epochs=epochs)

    def warmup_start_lr(self: _S, lr: float) -> _S:
        return replace(self, warmup_start=lr)

    def warmup_start_factor(self: _S, factor: float) -> _S:
        """Warmup starts at base_lr * factor (used when no warmup_start_lr is given)."""
        return replace(self, warmup_factor=factor)

    def step_by_batch(self: _S) -> _S:
        """Every step's LR follows the curve (the decay changes per batch too)."""
        return replace(self, by_batch=True, warmup_by_epoch=False)

    def step_by_epoch(self: _S, warmup_by_epoch: bool = False) -> _S:
        """The decay changes once per epoch (the default); the warm-up still ramps per batch, unless
        ``warmup_by_epoch=True``: the seed's epoch mode, where epoch e of the warm-up runs at curve(e*S) (the first
        epoch at the start LR, 0 by default)."""
        return replace(self, by_batch=False, warmup_by_epoch=warmup_by_epoch)

    def prepare(self: _S, total_epochs: int, steps_per_epoch: int) -> _S:
        """The same schedule bound to a run of ``total_epochs`` x ``steps_per_epoch`` steps."""
        return replace(self, total_epochs=total_epochs, steps_per_epoch=steps_per_epoch)

    # --- derived values ----------------------------------------------------------------------
    @property
    def prepared(self) -> bool:
        return self.total_epochs is not None

    def _need_prepared(self) -> tuple[int, int]:
        if self.total_epochs is None or self.steps_per_epoch is None:
            raise PhaseError(
                f"{type(self).__name__} is not prepared: use the value returned by "
                "prepare(total_epochs, steps_per_epoch) (prepare does not change the scheduler it is called on)"
            )
        return self.total_epochs, self.steps_per_epoch

    @property
    def total_steps(self) -> int:
        e, s = self._need_prepared()
        return e * s

    @property
    def warmup_steps(self) -> int:
        _, s = self._need_prepared()
        return self.warmup_epochs * s

    @property
    def start_lr(self) -> float:
        return self.warmup_start if self.warmup_start is not None else self.base * self.warmup_factor

    # --- the schedule ------------------------------------------------------------------------
    def curve(self, s: int | np.ndarray) -> float | np.ndarray:
        """The formula at global step(s) ``s`` (clamped to [0, total_steps]), ignoring the step mode."""
        total = self.total_steps
        arr = np.clip(np.asarray(s, dtype=np.float64), 0.0, float(total))
        w = float(self.warmup_steps)
        warm = (arr <= w) if w > 0 else np.zeros(arr.shape, dtype=bool)
        start = self.start_lr
        with np.errstate(all="ignore"):
            ramp = start + (self.base - start) * arr / (w if w > 0 else 1.0)
            dec = self._decay(arr - w, float(total) - w)
            out = np.where(warm, ramp, dec)
        out = np.where(np.isfinite(out) & (out >= 0.0), out, 0.0)
        return float(out) if out.ndim == 0 else out

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def lr(self, step: int | np.ndarray) -> float | np.ndarray:
        """LR applied at global step ``step`` (= epoch * steps_per_epoch + batch), honouring the step mode."""
        _, spe = self._need_prepared()
        st = np.asarray(step)
        if not np.issubdtype(st.dtype, np.integer):
            raise ConfigError(f"step must be an integer, got {step!r}")
        if (st < 0).any():
            raise ConfigError(f"step must be >= 0, got {step!r}")
        st = st.astype(np.int64)
        if not self.by_batch:
            held = (st // spe) * spe  # the epoch's first step: >= W wherever st >= W (W is a whole epoch)
            st = held if self.warmup_by_epoch else np.where(st < self.warmup_steps, st, held)
        return self.curve(st)

    def lr_at(self, epoch: int, batch: int = 0) -> float:
        """LR of batch ``batch`` of epoch ``epoch`` (both 0-based); batch 0 gives the LR the log shows."""
        _, spe = self._need_prepared()
        e = v.integer("epoch", epoch, 0)
        b = v.integer("batch", batch, 0)
        if b >= spe:
            raise ConfigError(f"batch must be < steps_per_epoch ({spe}), got {batch}")
        return float(self.lr(e * spe + b))

    def table(self) -> np.ndarray:
        """float32 [total_steps]: the LR of every step of the run (what a device LR table holds)."""
        return np.asarray(self.lr(np.arange(self.total_steps, dtype=np.int64)), dtype=np.float32)


@dataclass(frozen=True, kw_only=True)
class ConstantLR(Scheduler):
    """base_lr after the warmup."""

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        return np.full_like(d, self.base)


@dataclass(frozen=True, kw_only=True)
class StepLR(Scheduler):
    """base * gamma^floor(d / (step_size * S)): decays every ``step_size`` epochs counted from the end of warmup."""

    step_epochs: int = 10
    factor: float = 0.1

    def _validate(self) -> None:
        object.__setattr__(self, "step_epochs", v.integer("step_size", self.step_epochs, 1))
        object.__setattr__(self, "factor", v.positive("gamma", self.factor))

    def _check_run(self, epochs: int, spe: int) -> None:
        # The first decay is at epoch W + step_size. With two or more epochs after the warm-up a shorter
        # step_size would decay, so one past the last epoch is a mistake (a run shortened for a test, epochs
        # counted from 1); with fewer, no step_size can decay: a run too short to decay, allowed.
        first, after = self.warmup_epochs + self.step_epochs, epochs - self.warmup_epochs
        if after >= 2 and first >= epochs:
            raise ConfigError(
                f"StepLR step_size {self.step_epochs} never decays: the first decay would be at epoch {first} "
                f"(warmup {self.warmup_epochs} + step_size {self.step_epochs}, epochs counted from 0), past the "
                f"last epoch {epochs - 1} of total_epochs {epochs}; use step_size <= {after - 1} or more epochs")

    def step_size(self, epochs: int) -> StepLR:
        return replace(self, step_epochs=epochs)

    def gamma(self, gamma: float) -> StepLR:
        return replace(self, factor=gamma)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        period = self.step_epochs * self.steps_per_epoch
        return self.base * self.factor ** np.floor(d / period)


@dataclass(frozen=True, kw_only=True)
class MultiStepLR(Scheduler):
    """base * gamma^(number of milestones <= epoch), epoch = warmup_epochs + floor(d / S) (absolute epochs)."""

    milestone_epochs: tuple[int, ...] = ()
    factor: float = 0.1

    def _validate(self) -> None:
        ms = self.milestone_epochs
        if isinstance(ms, (str, bytes)) or not isinstance(ms, Sequence):
            raise ConfigError(f"milestones must be a sequence of epochs, got {ms!r}")
        ms = tuple(v.integer("milestone", m, 1) for m in ms)
        if any(b <= a for a, b in zip(ms, ms[1:])):
            raise ConfigError(f"milestones must be strictly increasing, got {list(ms)}")
        if self.prepared and not ms:
            raise ConfigError("MultiStepLR needs at least one milestone (use milestones([...]))")
        object.__setattr__(self, "milestone_epochs", ms)
        object.__setattr__(self, "factor", v.positive("gamma", self.factor))

    def _check_run(self, epochs: int, spe: int) -> None:
        # Milestone m applies from epoch m (0-based, torch's MultiStepLR stepped per epoch); one <= W from the
        # first step after the ramp's end (step W*S is base), so it acts where the table reads such a step.
        # One >= total_epochs never acts, and is refused where milestone total_epochs - 1 (>= 1) would.
        late = [m for m in self.milestone_epochs if m >= epochs]
        if late and epochs >= 2 and self._decay_steps(epochs, spe)[1] >= 1:
            raise ConfigError(
                f"MultiStepLR milestone {late[0]} never takes effect: milestones are epochs counted from 0 and "
                f"the last epoch of total_epochs {epochs} is {epochs - 1}; use milestones < {epochs} "
                "or more epochs")

    def milestones(self, epochs: Sequence[int]) -> MultiStepLR:
        return replace(self, milestone_epochs=tuple(epochs) if isinstance(epochs, Sequence) else epochs)

    def gamma(self, gamma: float) -> MultiStepLR:
        return replace(self, factor=gamma)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        epoch = self.warmup_epochs + np.floor(d / self.steps_per_epoch)
        passed = np.searchsorted(np.asarray(self.milestone_epochs, dtype=np.float64), epoch, side="right")
        return self.base * self.factor ** passed.astype(np.float64)


@dataclass(frozen=True, kw_only=True)
class ExponentialLR(Scheduler):
    """base * gamma^floor(d / S): one decay per epoch after warmup, in both step modes."""

    factor: float = 0.95

    def _validate(self) -> None:
        object.__setattr__(self, "factor", v.positive("gamma", self.factor))

    # No run check: gamma first acts at epoch W + 1, placed by no parameter of its own; a run with one epoch
    # after the warm-up is too short for any decay (like a one-epoch cosine), not a misplaced gamma.

    def gamma(self, gamma: float) -> ExponentialLR:
        return replace(self, factor=gamma)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        return self.base * self.factor ** np.floor(d / self.steps_per_epoch)


@dataclass(frozen=True, kw_only=True)
class PolynomialLR(Scheduler):
    """end + (base - end) * (1 - p)^power, p = min(1, d / (D + 1)) (the seed's D + 1, kept as is)."""

    exponent: float = 2.0
    final_lr: float = 1e-4

    def _validate(self) -> None:
        object.__setattr__(self, "exponent", v.positive("power", self.exponent))
        object.__setattr__(self, "final_lr", v.non_negative("end_lr", self.final_lr))

    # No run check: power and end_lr shape every decay step after the first, so they act whenever the run has
    # two decay steps; with fewer no value of them could act (a run too short to decay).

    def power(self, p: float) -> PolynomialLR:
        return replace(self, exponent=p)

    def end_lr(self, lr: float) -> PolynomialLR:
        return replace(self, final_lr=lr)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        p = np.minimum(1.0, d / (big_d + 1.0))
        return self.final_lr + (self.base - self.final_lr) * (1.0 - p) ** self.exponent


@dataclass(frozen=True, kw_only=True)
class CosineAnnealingLR(Scheduler):
    """eta_min + (base - eta_min) * (1 + cos(pi p)) / 2, p = min(1, d / D').

    D' = D in batch mode and D - S in epoch mode, so the last epoch runs at eta_min. When D' is 0 (a single
    epoch after warmup in epoch mode) p is 0 at d = 0 (the seed would divide by zero and give 0).
    """

    min_lr: float = 1e-6

    def _validate(self) -> None:
        object.__setattr__(self, "min_lr", v.non_negative("eta_min", self.min_lr))

    # No run check: eta_min acts on every decay step after the first (see PolynomialLR).

    def eta_min(self, lr: float) -> CosineAnnealingLR:
        return replace(self, min_lr=lr)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        span = big_d if self.by_batch else big_d - self.steps_per_epoch
        p = np.where(d <= 0.0, 0.0, 1.0) if span <= 0 else np.minimum(1.0, d / span)
        return self.min_lr + (self.base - self.min_lr) * (1.0 + np.cos(math.pi * p)) / 2.0


@dataclass(frozen=True, kw_only=True)
class CosineAnnealingWithWarmRestartsLR(Scheduler):
    """Cosine from base to eta_min within cycles of T_0 * S * T_mult^k steps (k = 0, 1, ...), restarting at base."""

    cycle_epochs: int = 10
    cycle_mult: int = 1
    min_lr: float = 0.0

    def _validate(self) -> None:
        object.__setattr__(self, "cycle_epochs", v.integer("t_0", self.cycle_epochs, 1))
        object.__setattr__(self, "cycle_mult", v.integer("t_mult", self.cycle_mult, 1))
        object.__setattr__(self, "min_lr", v.non_negative("eta_min", self.min_lr))

    def _check_run(self, epochs: int, spe: int) -> None:
        # A T_0 longer than the run is a legitimate choice (the run follows part of one cosine), and eta_min
        # acts on every step. t_mult only lengthens the cycles after the first: at the second cycle's first
        # step the LR is base whatever t_mult, so t_mult acts only if the table reads a step after that one.
        # Refused where a t_0 of one epoch would let it act; a shorter run is too short for any second cycle.
        first, (_, last) = self.cycle_epochs * spe, self._decay_steps(epochs, spe)
        if self.cycle_mult > 1 and spe < last <= first:
            raise ConfigError(
                f"CosineAnnealingWithWarmRestartsLR t_mult {self.cycle_mult} never takes effect: it lengthens the "
                f"cycles after the first, and the first (t_0 {self.cycle_epochs} epochs) outlasts the "
                f"{epochs - self.warmup_epochs} epochs after the warm-up of total_epochs {epochs}; "
                "use t_mult(1), a shorter t_0 or more epochs")

    def t_0(self, epochs: int) -> CosineAnnealingWithWarmRestartsLR:
        return replace(self, cycle_epochs=epochs)

    def t_mult(self, mult: int) -> CosineAnnealingWithWarmRestartsLR:
        return replace(self, cycle_mult=mult)

    def eta_min(self, lr: float) -> CosineAnnealingWithWarmRestartsLR:
        return replace(self, min_lr=lr)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        first = self.cycle_epochs * self.steps_per_epoch
        if self.cycle_mult == 1:
            t_cur = np.mod(d, first)
            t_i = np.full_like(d, float(first))
        else:
            # Cycle starts 0, T, T(1+m), ... up to past D; integers, so no log() rounding at boundaries.
            starts, lengths, s0, ln = [], [], 0, first
            while s0 <= big_d:
                starts.append(s0)
                lengths.append(ln)
                s0, ln = s0 + ln, ln * self.cycle_mult
            k = np.searchsorted(np.asarray(starts, dtype=np.float64), d, side="right") - 1
            k = np.clip(k, 0, len(starts) - 1)
            t_cur = d - np.asarray(starts, dtype=np.float64)[k]
            t_i = np.asarray(lengths, dtype=np.float64)[k]
        return self.min_lr + (self.base - self.min_lr) * (1.0 + np.cos(math.pi * t_cur / t_i)) / 2.0


@dataclass(frozen=True, kw_only=True)
class WSDLR(Scheduler):
    """Warmup-stable-decay: base for K = floor(D * decay_start) steps after warmup, then linear to end_lr at D."""

    decay_from: float = 0.8
    final_lr: float = 0.0

    def _validate(self) -> None:
        object.__setattr__(self, "decay_from", v.unit_closed("decay_start", self.decay_from))
        object.__setattr__(self, "final_lr", v.non_negative("end_lr", self.final_lr))

    def _check_run(self, epochs: int, spe: int) -> None:
        # The LR leaves base at the first read step d > K (at d = K the line starts at base). When no read step
        # lies past K, a smaller decay_start would decay if any read step lies past 0; otherwise the run is too
        # short for any decay (one epoch after the warm-up in epoch mode), allowed. end_lr then acts as well.
        span, last = self._decay_steps(epochs, spe)
        k = math.floor(span * self.decay_from)
        if last > 0 and k >= last:
            mode = "" if self.by_batch else ", or step_by_batch() (epoch mode holds each epoch at its first step's LR)"
            raise ConfigError(
                f"WSDLR decay_start {self.decay_from} never decays: the stable phase lasts {k} of the {span} steps "
                f"after the warm-up, and the table's last step after it is at {last} (total_epochs {epochs}, "
                f"warmup {self.warmup_epochs}, {spe} steps per epoch); use decay_start < {last / span:.4g}{mode}")

    def decay_start(self, fraction: float) -> WSDLR:
        return replace(self, decay_from=fraction)

    def end_lr(self, lr: float) -> WSDLR:
        return replace(self, final_lr=lr)

    def _decay(self, d: np.ndarray, big_d: float) -> np.ndarray:
        k = math.floor(big_d * self.decay_from)
        span = big_d - k
        frac = np.clip((d - k) / span, 0.0, 1.0) if span > 0 else np.where(d >= k, 1.0, 0.0)
        return np.where(d < k, self.base, self.final_lr + (self.base - self.final_lr) * (1.0 - frac))


SCHEDULERS: tuple[type[Scheduler], ...] = (
    ConstantLR, StepLR, MultiStepLR, ExponentialLR, PolynomialLR, CosineAnnealingLR,
    CosineAnnealingWithWarmRestartsLR, WSDLR,
)
