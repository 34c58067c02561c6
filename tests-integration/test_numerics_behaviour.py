"""What a user meets when numbers go bad (issue 17), end to end on the CPU backend: NaN logits never score,
an overflowed BN statistic skips its step, a skipped step's loss stays out of the epoch's mean, and the
dynamic AMP loss scale grows back (torch.amp.GradScaler's rule, checked against GradScaler itself)."""

import io
import math

import numpy as np
import pytest
import torch

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, fc, flatten, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.report import EpochRecord, EpochTable

BATCH, CLASSES = 8, 4


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 6, 6, 2)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int32)


def _task(train, val, settings=None, model=None, epochs=1, amp=False):
    s = settings or Settings().manual_seed(5).global_batch_size(BATCH)
    feeder = ArrayFeeder(train, val, BATCH, seed=2, shuffle=False, num_classes=CLASSES,
                         dtype=np.float16 if amp else np.float32)
    bp = model or seq(conv(4, 3, 1, 1), bn(), relu(), flatten(), fc(CLASSES))
    return (DeepLearningTask(s).device("cpu").quiet().model(bp).optimizer(SGD().momentum(0.9))
            .scheduler(ConstantLR().base_lr(0.01)).total_epochs(epochs).data(feeder))


def _read(task, role):
    return task.backend.read(task.program.tensor(role)).reshape(-1)


def _bn_stats(task):
    return {i.tensor.name: task.backend.read(i.tensor).ravel() for i in task.program.inits
            if i.tensor.name.endswith(("prev_mean", "prev_var"))}


def test_nan_logits_never_score_and_cannot_trigger_the_early_stop():
    x, y = _data()
    xv = np.full((16, 6, 6, 2), np.nan, np.float32)  # a diverged model's logits are NaN: so are these
    task = _task((x, y), (xv, y[:16]), model=seq(flatten(), fc(16), relu(), fc(CLASSES)), epochs=2)
    r = task.early_stop_by_top1(0.5).compile().run()
    assert [(h.top1, h.top5) for h in r.history] == [(0.0, 0.0), (0.0, 0.0)]  # was 1.0, 1.0
    assert not r.early_stopped and r.epochs == 2 and r.best_top1 == 0.0


def test_an_overflowed_bn_statistic_skips_the_step():
    x, y = _data()
    x[16:24] *= 1e30  # batch 2: finite gradients (BN normalises) but the running variance overflows FP32
    task = _task((x, y), (x[:8], y[:8])).compile()
    r = task.run()
    assert r.skipped_steps == 1 and r.history[0].skipped_steps == 1
    stats = _bn_stats(task)
    assert len(stats) == 2 and all(np.isfinite(v).all() for v in stats.values())  # was inf: no step skipped
    assert 0.5 < stats["L0.prev_var"].min() and stats["L0.prev_var"].max() < 2.0


def test_a_skipped_step_stays_out_of_the_epoch_loss():
    x, y = _data()
    x[BATCH * 2 + 1, 3, 3, 1] = np.nan  # one pixel of batch 2
    task = _task((x, y), (x[:8], y[:8]))
    losses = []
    task.on_step(lambda k, res: losses.append((float(res[0]), int(_read(task, "nan_flag")[0]))))
    r = task.compile().run()
    assert [f for _l, f in losses] == [0, 0, 1, 0] and math.isnan(losses[2][0])
    applied = [loss for loss, f in losses if not f]
    assert r.history[0].skipped_steps == 1
    assert r.history[0].train_loss == pytest.approx(np.mean(applied), rel=1e-6)  # was NaN
    out = io.StringIO()
    table = EpochTable(out, validate=True)
    table.row(r.history[0])
    assert "(1 non-finite step(s) skipped)" in out.getvalue()


def test_every_step_skipped_reads_nan_not_a_number_of_nothing():
    x, y = _data(n=16)
    x[:, 0, 0, 0] = np.nan
    r = _task((x, y), (x[:8], y[:8]), model=seq(flatten(), fc(CLASSES))).compile().run()
    assert r.history[0].skipped_steps == 2 and math.isnan(r.history[0].train_loss)


def _grad_scaler(init: float, interval: int, flags: list[int]) -> tuple[float, int]:
    """torch.amp.GradScaler's (scale, growth tracker) after steps whose overflow pattern is ``flags``."""
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_interval=interval)
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    for f in flags:
        opt.zero_grad()
        scaler.scale(p.sum()).backward()
        if f:
            p.grad[0] = float("inf")
        scaler.step(opt)
        scaler.update()
    return scaler.get_scale(), scaler._get_growth_tracker()


@pytest.mark.parametrize("rule", ["dynamic", "static"])
def test_one_bad_sample_an_epoch_under_amp(rule):
    # The seed's static scale halves every epoch and never grows back (8192 -> 1024 in 3 epochs).
    x, y = _data()
    x[BATCH * 2 + 1, 3, 3, 1] = np.nan
    s = Settings().manual_seed(5).global_batch_size(BATCH).amp().loss_scaling(rule, init=8192.0, growth_interval=3)
    task = _task((x, y), (x[:8], y[:8]), settings=s, amp=True, epochs=3)
    flags, scales = [], []

    def step(k, res):
        flags.append(int(_read(task, "nan_flag")[0]))
        scales.append(float(_read(task, "loss_scale")[0]))

    task.on_step(step)
    r = task.compile().run()
    assert r.skipped_steps == sum(flags) == 3 and flags == [0, 0, 1, 0] * 3
    scale = float(_read(task, "loss_scale")[0])
    if rule == "static":
        assert scale == 1024.0
        return
    ref_scale, ref_tracker = _grad_scaler(8192.0, 3, flags)
    assert (scale, int(_read(task, "loss_scale_tracker")[0])) == (ref_scale, ref_tracker) == (4096.0, 1)
    assert scales[5] == scales[9] == 8192.0  # grown back before each later bad step


def test_a_step_that_grows_the_scale_is_divided_by_the_scale_it_was_made_with():
    """GradScaler.step unscales by the scale the backward used, and update() grows it afterwards. A scale that
    grows on every step (growth_interval=1) scales the FP16 gradients by other powers of two, which changes no
    bit of them: the weights are those of a run whose scale never grows. (tr grew the scale before its optimizer
    divided: every growth step trained with half its gradient.)"""
    x, y = _data()

    def trained(interval: int) -> list[np.ndarray]:
        s = Settings().manual_seed(5).global_batch_size(BATCH).amp().loss_scaling("dynamic", init=1024.0,
                                                                                   growth_interval=interval)
        task = _task((x.astype(np.float16), y), None, settings=s, amp=True, epochs=2).compile()
        task.run()
        assert (float(_read(task, "loss_scale")[0]) > 1024.0) == (interval == 1)
        return [w for m in task.parameters() for w in m]

    grown, still = trained(1), trained(10_000)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(grown, still)) and len(grown) == 5


def test_epoch_table_reports_skipped_steps():
    out = io.StringIO()
    table = EpochTable(out, validate=False)
    table.row(EpochRecord(1, 0.5, 0.1, 1.0, skipped_steps=0))
    table.row(EpochRecord(2, 0.4, 0.1, 1.0, skipped_steps=3))
    lines = out.getvalue().splitlines()
    assert "skipped" not in lines[3] and lines[4].endswith("(3 non-finite step(s) skipped)")
