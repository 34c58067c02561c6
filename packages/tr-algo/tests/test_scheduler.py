import math
import warnings

import numpy as np
import pytest
import torch

from tr.algo.scheduler import (
    SCHEDULERS,
    WSDLR,
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWithWarmRestartsLR,
    ExponentialLR,
    MultiStepLR,
    PolynomialLR,
    Scheduler,
    StepLR,
)
from tr.core.errors import ConfigError, PhaseError


def seed_formula(sched: Scheduler, s: int) -> float:
    """SEED_SYSTEM.md §7 written out literally for one (already mode-adjusted) global step."""
    E, S = sched.total_epochs, sched.steps_per_epoch
    total, W = E * S, sched.warmup_epochs * S
    s = min(max(s, 0), total)
    base = sched.base
    start = sched.warmup_start if sched.warmup_start is not None else base * sched.warmup_factor
    if W > 0 and s <= W:
        out = start + (base - start) * s / W
    else:
        d, D = s - W, total - W
        if isinstance(sched, ConstantLR):
            out = base
        elif isinstance(sched, StepLR):
            out = base * sched.factor ** (d // (sched.step_epochs * S))
        elif isinstance(sched, MultiStepLR):
            epoch = sched.warmup_epochs + d // S
            out = base * sched.factor ** sum(1 for m in sched.milestone_epochs if m <= epoch)
        elif isinstance(sched, ExponentialLR):
            out = base * sched.factor ** (d // S)
        elif isinstance(sched, PolynomialLR):
            p = min(1.0, d / (D + 1))
            out = sched.final_lr + (base - sched.final_lr) * (1 - p) ** sched.exponent
        elif isinstance(sched, CosineAnnealingLR):
            dp = D if sched.by_batch else D - S
            p = (0.0 if d == 0 else 1.0) if dp <= 0 else min(1.0, d / dp)
            out = sched.min_lr + (base - sched.min_lr) * (1 + math.cos(math.pi * p)) / 2
        elif isinstance(sched, CosineAnnealingWithWarmRestartsLR):
            length, begin = sched.cycle_epochs * S, 0
            while d >= begin + length:
                begin, length = begin + length, length * sched.cycle_mult
            out = sched.min_lr + (base - sched.min_lr) * (1 + math.cos(math.pi * (d - begin) / length)) / 2
        elif isinstance(sched, WSDLR):
            k = math.floor(D * sched.decay_from)
            out = base if d < k else sched.final_lr + (base - sched.final_lr) * (1 - (d - k) / (D - k))
        else:
            raise AssertionError(type(sched))
    return out if (math.isfinite(out) and out >= 0) else 0.0


def applied_step(sched: Scheduler, step: int) -> int:
    """The step mode as the module docstring states it: the global step whose curve() value step ``step`` uses."""
    held = (step // sched.steps_per_epoch) * sched.steps_per_epoch
    if sched.by_batch or (step < sched.warmup_steps and not sched.warmup_by_epoch):
        return step
    return held


E, S = 12, 5
CASES = [
    ConstantLR(),
    StepLR().step_size(3).gamma(0.5),
    MultiStepLR().milestones([2, 5, 9]).gamma(0.3),
    ExponentialLR().gamma(0.8),
    PolynomialLR().power(2.0).end_lr(1e-3),
    PolynomialLR().power(0.5).end_lr(0.0),
    CosineAnnealingLR().eta_min(1e-4),
    CosineAnnealingWithWarmRestartsLR().t_0(3).t_mult(1).eta_min(1e-3),
    CosineAnnealingWithWarmRestartsLR().t_0(2).t_mult(2),
    WSDLR(),
    WSDLR().decay_start(0.5).end_lr(1e-3),
]
VARIANTS = {
    "epoch": lambda s: s,
    "batch": lambda s: s.step_by_batch(),
    "epoch+warmup": lambda s: s.base_lr(0.4).warmup(2),
    "batch+warmup_start": lambda s: s.base_lr(0.4).warmup(3).warmup_start_lr(0.01).step_by_batch(),
    "epoch+warmup_factor": lambda s: s.warmup(1).warmup_start_factor(0.25),
    "seed_epoch_warmup": lambda s: s.base_lr(0.4).warmup(2).step_by_epoch(warmup_by_epoch=True),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: type(c).__name__)
def test_every_step_follows_the_formula(case, variant):
    sched = VARIANTS[variant](case).prepare(E, S)
    table = sched.table()
    assert table.dtype == np.float32 and table.shape == (E * S,)
    expected = []
    for step in range(E * S):
        expected.append(seed_formula(sched, applied_step(sched, step)))
        assert sched.lr(step) == pytest.approx(expected[-1], rel=1e-12, abs=1e-15)
        assert sched.lr_at(step // S, step % S) == sched.lr(step)
    np.testing.assert_allclose(table, np.array(expected, dtype=np.float32), rtol=1e-6, atol=1e-12)
    # curve() ignores the mode; beyond the end the step is clamped to total.
    assert sched.curve(E * S + 100) == pytest.approx(seed_formula(sched, E * S), rel=1e-12, abs=1e-15)
    if not sched.by_batch:  # constant within an epoch after the warm-up (within every epoch for the seed's)
        held = table.reshape(E, S)[0 if sched.warmup_by_epoch else sched.warmup_epochs:]
        assert np.all(held == held[:, :1])


def _torch_lrs(make, base: float, n: int) -> list[float]:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sch = make(opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
    return out


LR_S = torch.optim.lr_scheduler
TORCH_EPOCH_CASES = [
    (StepLR().step_size(3).gamma(0.5), lambda o: LR_S.StepLR(o, step_size=3, gamma=0.5)),
    (ExponentialLR().gamma(0.8), lambda o: LR_S.ExponentialLR(o, gamma=0.8)),
    (MultiStepLR().milestones([2, 5, 9]).gamma(0.3), lambda o: LR_S.MultiStepLR(o, milestones=[2, 5, 9], gamma=0.3)),
    # epoch mode: the last epoch reaches eta_min, i.e. torch's T_max = E - 1
    (CosineAnnealingLR().eta_min(1e-4), lambda o: LR_S.CosineAnnealingLR(o, T_max=E - 1, eta_min=1e-4)),
    (CosineAnnealingWithWarmRestartsLR().t_0(2).t_mult(2).eta_min(1e-3),
     lambda o: LR_S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2, eta_min=1e-3)),
    (CosineAnnealingWithWarmRestartsLR().t_0(5), lambda o: LR_S.CosineAnnealingWarmRestarts(o, T_0=5)),
]


@pytest.mark.parametrize("sched,make", TORCH_EPOCH_CASES, ids=lambda x: type(x).__name__)
def test_epoch_mode_matches_torch_stepped_per_epoch(sched, make):
    ready = sched.prepare(E, S)
    ref = _torch_lrs(make, ready.base, E)
    for e in range(E):
        for b in range(S):
            assert ready.lr_at(e, b) == pytest.approx(ref[e], rel=1e-9, abs=1e-12)


TORCH_BATCH_CASES = [
    (CosineAnnealingLR().eta_min(1e-4), lambda o: LR_S.CosineAnnealingLR(o, T_max=E * S, eta_min=1e-4)),
    (StepLR().step_size(3).gamma(0.5), lambda o: LR_S.StepLR(o, step_size=3 * S, gamma=0.5)),
    (CosineAnnealingWithWarmRestartsLR().t_0(2).t_mult(2),
     lambda o: LR_S.CosineAnnealingWarmRestarts(o, T_0=2 * S, T_mult=2)),
    # with end_lr 0, the seed's p = d / (D + 1) is torch's PolynomialLR with total_iters = D + 1
    (PolynomialLR().power(2.0).end_lr(0.0), lambda o: LR_S.PolynomialLR(o, total_iters=E * S + 1, power=2.0)),
    # warmup: LinearLR(start_factor) for W steps, then the decay counted from W
    (CosineAnnealingLR().eta_min(1e-4).warmup(2).warmup_start_factor(0.1),
     lambda o: LR_S.SequentialLR(o, [LR_S.LinearLR(o, start_factor=0.1, total_iters=2 * S),
                                     LR_S.CosineAnnealingLR(o, T_max=(E - 2) * S, eta_min=1e-4)],
                                 milestones=[2 * S])),
]


@pytest.mark.parametrize("sched,make", TORCH_BATCH_CASES, ids=lambda x: type(x).__name__)
def test_batch_mode_matches_torch_stepped_per_batch(sched, make):
    ready = sched.base_lr(0.2).step_by_batch().prepare(E, S)
    ref = np.array(_torch_lrs(make, 0.2, E * S))
    np.testing.assert_allclose([ready.lr(s) for s in range(E * S)], ref, rtol=1e-7, atol=1e-12)


def test_defaults_are_the_seed_s():
    s = CosineAnnealingLR()
    assert (s.base, s.warmup_epochs, s.warmup_start, s.warmup_factor, s.by_batch, s.min_lr) == (
        0.1, 0, None, 0.0, False, 1e-6
    )
    assert (PolynomialLR().exponent, PolynomialLR().final_lr) == (2.0, 1e-4)
    assert (StepLR().step_epochs, StepLR().factor) == (10, 0.1)
    assert MultiStepLR().factor == 0.1 and ExponentialLR().factor == 0.95
    assert (WSDLR().decay_from, WSDLR().final_lr) == (0.8, 0.0)
    w = CosineAnnealingWithWarmRestartsLR()
    assert (w.cycle_epochs, w.cycle_mult, w.min_lr) == (10, 1, 0.0)
    assert len(SCHEDULERS) == 8


def test_warmup_and_cosine_landmarks():
    # The seed's VGG example: base 0.36, start 0.01, 10 warmup epochs, eta_min 1e-6, 100 epochs.
    s = CosineAnnealingLR().base_lr(0.36).warmup_start_lr(0.01).warmup(10).eta_min(1e-6).prepare(100, 7)
    assert s.lr_at(0) == pytest.approx(0.01)
    assert s.lr_at(5, 6) == pytest.approx(0.01 + 0.35 * 41 / 70)  # the warm-up ramps per batch
    assert s.step_by_epoch(warmup_by_epoch=True).lr_at(5, 6) == pytest.approx(0.01 + 0.35 * 0.5)  # the seed's
    assert s.lr_at(10) == pytest.approx(0.36)
    assert s.lr_at(99) == pytest.approx(1e-6)
    assert s.lr_at(99, 6) == pytest.approx(1e-6)
    mid = s.lr_at(10 + 89 // 2)
    assert mid == pytest.approx(1e-6 + (0.36 - 1e-6) * (1 + math.cos(math.pi * 44 / 89)) / 2)
    b = s.step_by_batch()
    assert b.lr(10 * 7) == pytest.approx(0.36) and b.lr(1) == pytest.approx(0.01 + 0.35 / 70)
    assert b.lr(100 * 7 - 1) > 1e-6 and b.curve(100 * 7) == pytest.approx(1e-6)
    assert s.warmup_steps == 70 and s.total_steps == 700 and s.start_lr == 0.01


def test_edge_cases():
    # One epoch after the warmup in epoch mode: D' = 0; that epoch runs at base (the seed would give 0).
    one = CosineAnnealingLR().warmup(2).prepare(3, 4)
    assert one.lr_at(2) == pytest.approx(0.1) and one.curve(12) == pytest.approx(1e-6)
    assert CosineAnnealingLR().prepare(1, 4).table().tolist() == [np.float32(0.1)] * 4
    # Warmup over the whole run.
    full = ConstantLR().warmup(3).prepare(3, 2).step_by_batch()
    np.testing.assert_allclose(full.table(), [0.1 * s / 6 for s in range(6)], rtol=1e-6)
    # WSD decaying over its last step only: the table's last value is the line's first step down.
    w = WSDLR().decay_start(0.8).step_by_batch().prepare(2, 3)
    assert w.table().tolist() == [np.float32(0.1)] * 5 + [np.float32(0.05)] and w.curve(6) == 0.0
    # Zero base LR is allowed (e.g. a frozen run).
    assert ConstantLR().base_lr(0).prepare(2, 2).table().tolist() == [0.0] * 4
    # A single epoch after the warm-up (epoch mode) decays nothing, whatever the parameters: allowed.
    assert StepLR().warmup(2).prepare(3, 2).table().tolist()[-2:] == [np.float32(0.1)] * 2



class _Broken(Scheduler):
    def _decay(self, d, big_d):
        return np.where(d < 2, -1.0, np.nan)


def test_negative_or_nan_becomes_zero():
    s = _Broken().step_by_batch().prepare(2, 2)
    assert s.table().tolist() == [0.0] * 4


def test_vector_queries_and_a_long_table():
    s = CosineAnnealingLR().step_by_batch().prepare(90, 5005)
    t = s.table()
    assert t.shape == (450450,) and t[0] == np.float32(0.1)
    steps = np.array([0, 1, 5005, 450449])
    np.testing.assert_array_equal(np.asarray(s.lr(steps), dtype=np.float32), t[steps])


def test_prepare_returns_a_new_value():
    s = StepLR().step_size(3)
    ready = s.prepare(10, 3)
    assert not s.prepared and ready.prepared and ready.total_epochs == 10
    with pytest.raises(PhaseError, match="use the value returned by prepare"):
        s.lr(0)
    with pytest.raises(PhaseError):
        s.table()
    # Changing a setting keeps the preparation (and re-checks it).
    assert ready.gamma(0.5).prepared
    with pytest.raises(ConfigError, match=r"warmup epochs \(11\) must not exceed total_epochs \(10\)"):
        ready.warmup(11)
    with pytest.raises(ConfigError, match="must not exceed"):
        ConstantLR().warmup(5).prepare(4, 3)


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda x: StepLR().base_lr(x), "base_lr"),
        (lambda x: StepLR().warmup_start_lr(x), "warmup_start_lr"),
        (lambda x: StepLR().warmup_start_factor(x), "warmup_start_factor"),
        (lambda x: StepLR().gamma(x), "gamma"),
        (lambda x: ExponentialLR().gamma(x), "gamma"),
        (lambda x: MultiStepLR().gamma(x), "gamma"),
        (lambda x: PolynomialLR().power(x), "power"),
        (lambda x: PolynomialLR().end_lr(x), "end_lr"),
        (lambda x: CosineAnnealingLR().eta_min(x), "eta_min"),
        (lambda x: CosineAnnealingWithWarmRestartsLR().eta_min(x), "eta_min"),
        (lambda x: WSDLR().decay_start(x), "decay_start"),
        (lambda x: WSDLR().end_lr(x), "end_lr"),
    ],
)
def test_real_setters_reject_bad_values(make, name):
    for bad in (-0.5, float("nan"), float("inf"), "0.1", True) + (() if name == "warmup_start_lr" else (None,)):
        with pytest.raises(ConfigError, match=name):
            make(bad)


def test_integer_setters_and_queries_reject_bad_values():
    for bad in (-1, 2.5, "3", None, True):
        with pytest.raises(ConfigError, match="warmup epochs"):
            StepLR().warmup(bad)
    for bad in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="step_size"):
            StepLR().step_size(bad)
        with pytest.raises(ConfigError, match="t_0"):
            CosineAnnealingWithWarmRestartsLR().t_0(bad)
        with pytest.raises(ConfigError, match="t_mult"):
            CosineAnnealingWithWarmRestartsLR().t_mult(bad)
        with pytest.raises(ConfigError, match="total_epochs"):
            StepLR().prepare(bad, 3)
        with pytest.raises(ConfigError, match="steps_per_epoch"):
            StepLR().prepare(3, bad)
    assert StepLR().warmup(2.0).warmup_epochs == 2
    assert StepLR().warmup_start_lr(0.5).warmup_start_lr(None).warmup_start is None  # None: use the factor
    with pytest.raises(ConfigError, match=r"warmup_start_factor must be in \[0, 1\]"):
        StepLR().warmup_start_factor(1.5)
    with pytest.raises(ConfigError, match="strictly increasing"):
        MultiStepLR().milestones([3, 3])
    with pytest.raises(ConfigError, match="milestone must be >= 1"):
        MultiStepLR().milestones([0, 3])
    with pytest.raises(ConfigError, match="sequence"):
        MultiStepLR().milestones(5)
    with pytest.raises(ConfigError, match="at least one milestone"):
        MultiStepLR().prepare(3, 2)
    ready = ConstantLR().prepare(4, 3)
    with pytest.raises(ConfigError, match="step must be >= 0"):
        ready.lr(-1)
    with pytest.raises(ConfigError, match="step must be an integer"):
        ready.lr(1.5)
    with pytest.raises(ConfigError, match=r"batch must be < steps_per_epoch \(3\)"):
        ready.lr_at(0, 3)
    with pytest.raises(ConfigError, match="epoch must be >= 0"):
        ready.lr_at(-1, 0)


@pytest.mark.parametrize("cls", SCHEDULERS)
def test_the_base_lr_is_the_one_positional_argument(cls):
    """``CosineAnnealingLR(1e-3)`` (the README's and the seed's spelling) is ``CosineAnnealingLR().base_lr(1e-3)``."""
    a, b = cls(1e-3), cls().base_lr(1e-3)
    assert a == b and a.base == 1e-3
    assert cls(1e-3).warmup(2).base == 1e-3
    with pytest.raises(ConfigError, match="base_lr must be a number"):
        cls("fast")
    with pytest.raises(TypeError):
        cls(1e-3, 2)  # everything but the base LR goes through the fluent setters


# --- the warm-up trains from the first epoch ------------------------------------------------------------------

def test_the_warmup_ramps_per_batch_in_epoch_mode():
    """The README's CosineAnnealingLR(1e-3).warmup(5) on MNIST at batch 200 (300 steps per epoch), epoch mode."""
    sched = CosineAnnealingLR(1e-3).warmup(5)
    t = sched.prepare(100, 300).table()
    first = t[:300]
    assert first[0] == 0.0 and np.all(first[1:] > 0)  # step 0 at the start (0), every later step trains
    assert np.all(np.diff(t[:1500]) > 0)  # rising through the whole warm-up, per batch
    np.testing.assert_allclose(t[:1500], 1e-3 * np.arange(1500) / 1500, rtol=1e-6)
    assert t[1500] == np.float32(1e-3)  # base at the first step after the warm-up
    assert first.mean() == pytest.approx(1e-3 * 299 / 2 / 1500, rel=1e-6)  # the seed's first epoch: all 0
    # the ramp is batch mode's; the decay is the seed's epoch mode, unchanged (one LR per epoch)
    np.testing.assert_array_equal(t[:1500], sched.step_by_batch().prepare(100, 300).table()[:1500])
    seed = sched.step_by_epoch(warmup_by_epoch=True).prepare(100, 300).table()
    np.testing.assert_array_equal(t[1500:], seed[1500:])
    assert np.all(t[1500:].reshape(95, 300) == t[1500:].reshape(95, 300)[:, :1])
    # a start above 0 starts there
    assert sched.warmup_start_factor(0.1).prepare(100, 300).table()[0] == np.float32(1e-4)


def test_the_seeds_epoch_held_warmup_is_an_explicit_opt_in():
    seed = CosineAnnealingLR(1e-3).warmup(5).step_by_epoch(warmup_by_epoch=True).prepare(100, 300)
    t = seed.table().reshape(100, 300)
    assert np.all(t[0] == 0.0)  # the seed's first epoch trains at LR 0
    np.testing.assert_allclose(t[:6, 0], [0, 2e-4, 4e-4, 6e-4, 8e-4, 1e-3], rtol=1e-6)
    assert np.all(t == t[:, :1])
    assert not seed.step_by_batch().warmup_by_epoch and not seed.step_by_epoch().warmup_by_epoch
    with pytest.raises(ConfigError, match="warmup_by_epoch is the seed's epoch mode"):
        CosineAnnealingLR(by_batch=True, warmup_by_epoch=True)
    with pytest.raises(ConfigError, match="warmup_by_epoch must be True or False"):
        CosineAnnealingLR().step_by_epoch(warmup_by_epoch=1)
    with pytest.raises(ConfigError, match=r"warmup_by_epoch never takes effect: there is no warm-up .*total_epochs 4"):
        CosineAnnealingLR().step_by_epoch(warmup_by_epoch=True).prepare(4, 3)


def test_the_epoch_mode_warmup_is_torch_linearlr_per_batch_then_the_decay_per_epoch():
    sched = CosineAnnealingLR(0.2).eta_min(1e-4).warmup(2).warmup_start_factor(0.1).prepare(E, S)
    ramp = _torch_lrs(lambda o: LR_S.LinearLR(o, start_factor=0.1, total_iters=2 * S), 0.2, 2 * S)
    decay = _torch_lrs(lambda o: LR_S.CosineAnnealingLR(o, T_max=E - 2 - 1, eta_min=1e-4), 0.2, E - 2)
    expected = np.concatenate([ramp, np.repeat(decay, S)])
    np.testing.assert_allclose([sched.lr(s) for s in range(E * S)], expected, rtol=1e-9, atol=1e-12)


# --- parameters that never take effect in the prepared run are refused -----------------------------------------

def _unchecked(monkeypatch, make) -> np.ndarray:
    """The table of ``make()`` with prepare()'s run checks switched off: what the run would read."""
    with monkeypatch.context() as m:
        for cls in (Scheduler, *SCHEDULERS):
            m.setattr(cls, "_check_run", lambda self, epochs, spe: None)
        return make().table()


def _refused(make) -> bool:
    try:
        make()
    except ConfigError:
        return True
    return False


SWEEPS = {  # a decay placed by one parameter -> (values, the run check's neutral: what "no effect" gives)
    "StepLR.step_size": (range(1, 9), lambda k: StepLR().step_size(k).gamma(0.5), lambda: ConstantLR()),
    "MultiStepLR.milestones": (range(1, 9), lambda m: MultiStepLR().milestones([m]).gamma(0.5), lambda: ConstantLR()),
    "WSDLR.decay_start": (np.linspace(0, 1, 11), lambda f: WSDLR().decay_start(f), lambda: ConstantLR()),
    "CosineAnnealingWithWarmRestartsLR.t_mult": (
        range(1, 9), lambda t0: CosineAnnealingWithWarmRestartsLR().t_0(t0).t_mult(2),
        lambda t0: CosineAnnealingWithWarmRestartsLR().t_0(t0)),
}


@pytest.mark.parametrize("by_batch", [False, True], ids=["epoch", "batch"])
@pytest.mark.parametrize("param", list(SWEEPS))
def test_refused_exactly_where_a_value_changes_nothing_and_another_would(param, by_batch, monkeypatch):
    values, make, neutral = SWEEPS[param]
    checked = 0
    for epochs in range(1, 8):
        for warm in range(epochs + 1):
            for spe in (1, 3):
                def ready(s, w=warm, e=epochs, n=spe):
                    s = s.warmup(w)
                    return (s.step_by_batch() if by_batch else s).prepare(e, n)

                acts = {}
                for x in values:
                    plain = neutral(x) if param.endswith("t_mult") else neutral()
                    acts[x] = not np.array_equal(_unchecked(monkeypatch, lambda x=x: ready(make(x))),
                                                 _unchecked(monkeypatch, lambda p=plain: ready(p)))
                for x in values:
                    expect = not acts[x] and any(acts.values())
                    assert _refused(lambda x=x: ready(make(x))) == expect, (param, x, epochs, warm, spe)
                    checked += expect
    assert checked > 20  # the sweep reaches refusals, not only acceptances


@pytest.mark.parametrize("make", [
    lambda: ConstantLR(), lambda: ExponentialLR().gamma(0.5), lambda: PolynomialLR().end_lr(0.0),
    lambda: CosineAnnealingLR(), lambda: CosineAnnealingWithWarmRestartsLR().t_0(50),
], ids=["ConstantLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR", "long_t_0"])
def test_schedules_without_a_placed_decay_are_never_refused(make):
    # a T_0 longer than the run follows part of one cosine: it acts, and is a legitimate choice
    for epochs in range(1, 6):
        for warm in range(epochs + 1):
            for by_batch in (False, True):
                s = make().warmup(warm)
                (s.step_by_batch() if by_batch else s).prepare(epochs, 3)
    t = CosineAnnealingWithWarmRestartsLR().t_0(50).prepare(10, 3).table()
    assert np.all(np.diff(t) <= 0) and t[-1] < t[0]


def test_the_refusals_name_the_value_and_total_epochs():
    with pytest.raises(ConfigError, match=r"MultiStepLR milestone 100 never takes effect: .* the last epoch of "
                                          r"total_epochs 100 is 99; use milestones < 100"):
        MultiStepLR().milestones([30, 60, 100]).prepare(100, 5)
    MultiStepLR().milestones([30, 60, 99]).prepare(100, 5)  # epoch 99 (0-based) is the run's last: it decays
    with pytest.raises(ConfigError, match=r"StepLR step_size 10 never decays: the first decay would be at epoch 12 "
                                          r"\(warmup 2 \+ step_size 10.*total_epochs 12; use step_size <= 9"):
        StepLR().warmup(2).prepare(12, 5)
    with pytest.raises(ConfigError, match=r"WSDLR decay_start 0.95 never decays: .*total_epochs 10.*"
                                          r"use decay_start < 0.9, or step_by_batch\(\)"):
        WSDLR().decay_start(0.95).prepare(10, 100)
    WSDLR().decay_start(0.95).step_by_batch().prepare(10, 100)  # per batch its last 50 steps decay
    with pytest.raises(ConfigError, match=r"t_mult 2 never takes effect: .*t_0 10 epochs.*total_epochs 8"):
        CosineAnnealingWithWarmRestartsLR().t_mult(2).prepare(8, 4)
    with pytest.raises(ConfigError, match=r"warmup_start_lr 0.01 never takes effect: there is no warm-up"):
        CosineAnnealingLR().warmup_start_lr(0.01).prepare(8, 4)
    with pytest.raises(ConfigError, match=r"warmup_start_factor 0.5 never takes effect: there is no warm-up"):
        CosineAnnealingLR().warmup_start_factor(0.5).prepare(8, 4)
    with pytest.raises(ConfigError, match=r"warmup_start_factor 0.5 never takes effect: warmup_start_lr 0.01"):
        CosineAnnealingLR().warmup(2).warmup_start_factor(0.5).warmup_start_lr(0.01).prepare(8, 4)
    # a prepared schedule re-checks a changed setting
    ready = MultiStepLR().milestones([3]).prepare(6, 2)
    with pytest.raises(ConfigError, match="milestone 6 never takes effect"):
        ready.milestones([3, 6])
