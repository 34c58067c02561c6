"""EMA / SEMA of DeepLearningTask on the CPU backend (tr.task.ema, tr.graph.ema): the EMA weights follow the
rule EMA = d*EMA + (1-d)*W over 50 steps against a float64 numpy reference and stay put on a skipped
(NaN) step; EMA validation reports both models and equals a validation of the EMA weights as the main
model; SEMA switches the weights at every epoch's end; an EMA task's save/resume is exact; bad settings
are refused when configured."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.memory import Region, Role
from tr.core.settings import Settings
from tr.graph.blueprint import bn, fc, relu, seq
from tr.graph.layers.groups import BN_B, FC_W
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH, STEPS, EPOCHS, DECAY = 8, 10, 5, 0.9
_rng = np.random.default_rng(0)
X = _rng.standard_normal((BATCH * STEPS + 24, 4, 4, 1)).astype(np.float32)
Y = (X.reshape(len(X), -1)[:, :3].argmax(1)).astype(np.int32)
NAN_STEP = 2  # batch 2 of every epoch holds a NaN (the feeder does not shuffle): that step is skipped


def _task(nan: bool = False, val: bool = True, amp: bool = False) -> DeepLearningTask:
    x = X.copy()
    if nan:
        x[BATCH * NAN_STEP + 3, 0, 0, 0] = np.nan
    n = BATCH * STEPS
    feeder = ArrayFeeder((x[:n], Y[:n]), (x[n:], Y[n:]) if val else None, BATCH, shuffle=False, num_classes=3)
    return (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH).amp(amp)).device("cpu").quiet()
            .model(seq(fc(16), bn(), relu(), fc(3))).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.1))
            .data(feeder).total_epochs(EPOCHS))


def _masters(task):
    return [t for t in task.program.tensors if t.region.role is Role.PARAM]


def _ema_of(task, t):
    (e,) = [x for x in task.program.tensors if x.name == t.name + ".ema"]
    return e


def _read(task, ts):
    return [task.backend.read(t).astype(np.float64) for t in ts]


def test_ema_follows_the_rule_over_50_steps_and_a_skipped_step_leaves_it():
    task = _task(nan=True).ema(DECAY, validate=False).compile()
    ws = _masters(task)
    es = [_ema_of(task, t) for t in ws]
    assert ws and all(e.region == Region(Role.EMA, w.region.group) for w, e in zip(ws, es))
    ref = _read(task, ws)  # the EMA starts as the weights training starts from
    prev = {"w": ref, "e": None}
    checked = []

    def step(k, _result):
        nonlocal ref
        w_now, e_now = _read(task, ws), _read(task, es)
        if k == NAN_STEP:  # skipped: neither the weights nor the EMA moved (bit for bit)
            for now, before in zip(w_now + e_now, prev["w"] + prev["e"]):
                np.testing.assert_array_equal(now, before)
        else:
            ref = [DECAY * r + (1 - DECAY) * w for r, w in zip(ref, w_now)]
        for e, r in zip(e_now, ref):
            np.testing.assert_allclose(e, r, rtol=1e-5, atol=1e-6)
        prev.update(w=w_now, e=e_now)
        checked.append(k)

    task.on_step(step)
    res = task.run()
    assert len(checked) == STEPS * EPOCHS == 50 and res.skipped_steps == EPOCHS
    assert not any(np.array_equal(w, e) for w, e in zip(_read(task, ws), _read(task, es)))


def test_without_ema_no_e_regions_and_no_ema_columns():
    task = _task().compile()
    assert all(task.program.layout.region_bytes(Region(Role.EMA, g)) == 0 for g in (BN_B, FC_W))
    assert not [r for r in task.program.layout.regions if r.role in (Role.EMA, Role.EMA_FP16)]
    out = io.StringIO()
    with redirect_stdout(out):
        task.quiet(False).run(1)
    assert "EMA" not in out.getvalue()
    assert "best_ema_top1" not in task.run(1).as_dict()


@pytest.mark.parametrize("amp", [False, True])
def test_ema_validation_reports_both_and_is_the_ema_weights_validated(amp):
    task = _task(amp=amp).ema(0.8, validate=True).compile()
    out = io.StringIO()
    with redirect_stdout(out):
        res = task.quiet(False).run(3)
    text = out.getvalue()
    assert "EMA Top1% | EMA Top5%" in text
    rows = [ln for ln in text.splitlines() if ln.strip()[:1].isdigit()]
    assert len(rows) == 3 and all(ln.count("%") == 4 for ln in rows)
    last = res.history[-1]
    assert all(r.ema_top1 is not None and r.top1 is not None for r in res.history)
    d = res.as_dict()
    assert d["best_ema_top1"] == max(r.ema_top1 for r in res.history)
    # the main model's fold is restored after the EMA validation: validating again gives its numbers
    assert task._validate(2)[1:] == (last.top1, last.top5)
    # the EMA validation is the main model's validation with W = E (same running statistics)
    be, ws = task.backend, _masters(task)
    for w in ws:
        be.write(w, be.read(_ema_of(task, w)))
    be.launch(task._steps.epoch_end)  # refold BN from the (now EMA) gamma/beta
    if amp:
        be.launch(task._steps.epoch_begin)  # FP16 working copies of the (now EMA) weights
    assert task._validate(2)[1:] == (last.ema_top1, last.ema_top5)


def test_sema_switches_the_weights_at_every_epoch_end():
    task = _task().sema(0.5).compile()
    ws = _masters(task)
    es = [_ema_of(task, t) for t in ws]
    seen = []
    task.on_step(lambda k, r: seen.append(any(not np.array_equal(w, e) for w, e in
                                              zip(_read(task, ws), _read(task, es)))))
    for _ in range(3):
        task.run(1)
        for w, e in zip(_read(task, ws), _read(task, es)):
            np.testing.assert_array_equal(w, e)
    assert all(seen)  # within an epoch the weights and their EMA differ


def test_an_ema_task_resumes_exactly(tmp_path):
    def state(t):
        return {x.name: t.backend.read(x).tobytes() for x in checkpoint.state_tensors(t.program)}

    full = _task().ema(0.9).compile()
    ema_top1 = [r.ema_top1 for r in full.run(4).history]
    part = _task().ema(0.9).compile()
    part.run(2)
    names = {x.name for x in checkpoint.state_tensors(part.program)}
    assert {"L0.w.ema", "L1.gamma.ema", "L3.b.ema"} <= names
    part.save(tmp_path / "ck")
    resumed = _task().ema(0.9).resume(tmp_path / "ck")
    rest = resumed.run(2)
    assert state(resumed) == state(full) and [r.ema_top1 for r in rest.history] == ema_top1[2:]
    with pytest.raises(ConfigError, match="ema"):  # another EMA setting is another run
        _task().ema(0.5).resume(tmp_path / "ck")


def test_an_ema_warmup_ramps_the_decay_with_the_steps_taken(tmp_path):
    """ema(decay, warmup=w): E = d_t E + (1 - d_t) W with d_t = decay * (1 - exp(-t / w)), t the steps taken (the
    skipped one included): the float32 recurrence the op computes, to the bit; the run resumes exactly and a
    checkpoint of another warmup is another run."""
    warmup = 15.0
    task = _task(nan=True).ema(0.99, validate=False, warmup=warmup).compile()
    assert task.spec.ema_warmup == warmup
    ws = _masters(task)
    es = [_ema_of(task, t) for t in ws]
    ref = [task.backend.read(t).astype(np.float32) for t in ws]
    taken = 0

    def step(k, _result):
        nonlocal ref, taken
        taken += 1
        if k != NAN_STEP:
            d = 0.99 * -np.expm1(-taken / warmup)
            ref = [r * np.float32(d) + task.backend.read(w).astype(np.float32) * np.float32(1.0 - d)
                   for r, w in zip(ref, ws)]
        for e, r in zip(es, ref):
            np.testing.assert_array_equal(task.backend.read(e), r)

    task.on_step(step)
    task.run(2)
    assert taken == 2 * STEPS

    def state(t):
        return {x.name: t.backend.read(x).tobytes() for x in checkpoint.state_tensors(t.program)}

    full = _task().ema(0.99, warmup=warmup).compile()
    full.run(3)
    part = _task().ema(0.99, warmup=warmup).compile()
    part.run(1)
    part.save(tmp_path / "ck")
    resumed = _task().ema(0.99, warmup=warmup).resume(tmp_path / "ck")
    resumed.run(2)
    assert state(resumed) == state(full)
    with pytest.raises(ConfigError, match="ema.warmup: the checkpoint has 15.0, this task has 0.0"):
        _task().ema(0.99).resume(tmp_path / "ck")


def test_a_checkpoint_written_before_the_warmup_existed_resumes_without_one():
    """An EMA description without the warmup (an older tr) is a run without one: resumed, not refused."""
    here = {"ema": {"decay": 0.9, "validate": True, "switch": False, "warmup": 0.0}, "spec": {"ema_warmup": 0.0}}
    older = {"ema": {"decay": 0.9, "validate": True, "switch": False}, "spec": {}}
    assert checkpoint.first_difference(older, checkpoint._as_recorded_then(older, here)) is None
    ramped = {"ema": {**here["ema"], "warmup": 5.0}, "spec": {"ema_warmup": 5.0}}
    assert checkpoint.first_difference(older, checkpoint._as_recorded_then(older, ramped)) is not None


@pytest.mark.parametrize("warmup", [-1, float("inf"), float("nan"), True, "10"])
def test_a_bad_warmup_is_refused_when_configured(warmup):
    with pytest.raises(ConfigError, match=r"ema warmup must be a finite number >= 0"):
        _task().ema(0.9, warmup=warmup)
    with pytest.raises(ConfigError, match=r"sema warmup must be a finite number >= 0"):
        _task().sema(0.9, warmup=warmup)


@pytest.mark.parametrize("decay", [0, 1, 1.0, -0.5, 2, float("nan"), True, "0.9"])
def test_bad_decay_is_refused_when_configured(decay):
    with pytest.raises(ConfigError, match=r"ema decay must be a number in \(0, 1\)"):
        _task().ema(decay)
    with pytest.raises(ConfigError, match=r"sema decay must be a number in \(0, 1\)"):
        _task().sema(decay)


def test_ema_validation_without_validation_data_is_refused():
    with pytest.raises(ConfigError, match="EMA validation needs validation data"):
        _task(val=False).ema(0.9, validate=True).compile()
    _task(val=False).ema(0.9, validate=False).compile().run(1)  # without validation it trains
    with pytest.raises(ConfigError, match="validate must be True or False"):
        _task().ema(0.9, validate=1)


def test_the_initial_weights_do_not_depend_on_the_plan_s_options():
    """A weight's init stream is its rank among the weights (tr.task.weights.init_streams), not its tensor id
    or name, which the EMA's and AMP's extra tensors and layers shift: before, ema() changed the initial
    weights and so the whole run."""
    def masters(task):  # in plan order (AMP's input cast layer renumbers the layers: L0.w is then L1.w)
        return [task.backend.read(t).copy() for t in _masters(task)]

    plain = masters(_task().compile())
    assert any(w.std() > 0 for w in plain)
    for other in (_task().ema(0.9).compile(), _task(amp=True).compile(), _task(amp=True).ema(0.9).compile()):
        got = masters(other)
        assert len(got) == len(plain) and all(np.array_equal(g, w) for g, w in zip(got, plain))
