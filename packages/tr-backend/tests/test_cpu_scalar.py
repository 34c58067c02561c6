"""scalar_increment, lr_lookup, loss_scale_update: device-side scalars, compared exactly (the dynamic loss
scale against torch.amp.GradScaler driven through the same overflow pattern)."""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, op

from tr.core.errors import BackendError


def test_step_counter_and_lr_table():
    a = SimpleArena()
    table, lr = a.add("table", (5,)), a.add("lr", (1,))
    step = a.add("step", (1,), "int32")
    be = a.allocate()
    values = np.array([0.1, 0.2, 0.3, 0.4, 0.5], np.float32)
    be.write(table, values)
    g = be.capture("g", [op("lr_lookup", table=table, step=step, lr=lr), op("scalar_increment", x=step)])
    seen = []
    for _ in range(7):
        be.launch(g)
        seen.append(float(be.read(lr).ravel()[0]))
    assert seen == [float(v) for v in values] + [float(values[-1])] * 2  # clamped to the last entry
    assert int(be.read(step).ravel()[0]) == 7


def test_loss_scale_only_halves_down_to_one():
    a = SimpleArena()
    scale = a.add("scale", (1,))
    flag = a.add("flag", (1,), "int32")
    be = a.allocate()
    be.write(scale, [8.0])
    g = be.capture("g", [op("loss_scale_update", flag=flag, scale=scale)])
    be.launch(g)
    assert be.read(scale).ravel()[0] == 8.0  # no overflow: unchanged
    be.write(flag, [1])
    history = []
    for _ in range(5):
        be.launch(g)
        history.append(float(be.read(scale).ravel()[0]))
    assert history == [4.0, 2.0, 1.0, 1.0, 1.0]


def _scale_arena(init: float):
    a = SimpleArena()
    scale = a.add("scale", (1,))
    flag = a.add("flag", (1,), "int32")
    tracker = a.add("tracker", (1,), "int32")
    be = a.allocate()
    be.write(scale, [init])
    return be, scale, flag, tracker


def _grad_scaler_history(init: float, interval: int, overflows: list[bool]) -> list[tuple[float, int]]:
    """torch.amp.GradScaler's (scale, growth tracker) after each step of a one-parameter model."""
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_interval=interval)
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.0)
    out = []
    for bad in overflows:
        opt.zero_grad()
        scaler.scale(p.sum()).backward()
        if bad:
            p.grad[1] = float("inf")
        scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), scaler._get_growth_tracker()))
    return out


@pytest.mark.parametrize("init,interval", [(65536.0, 3), (8.0, 1), (2.0**126, 2)])
def test_dynamic_loss_scale_follows_grad_scaler(init, interval):
    rng = np.random.default_rng(interval)
    overflows = [bool(v) for v in rng.random(40) < 0.25] + [False] * 12  # then clean steps: it grows back
    overflows[5:8] = [True, True, True]
    be, scale, flag, tracker = _scale_arena(init)
    g = be.capture("g", [op("loss_scale_update", flag=flag, scale=scale, tracker=tracker, rule="dynamic",
                            growth_interval=interval)])
    ours = []
    for bad in overflows:
        be.write(flag, [int(bad)])
        be.launch(g)
        ours.append((float(be.read(scale).ravel()[0]), int(be.read(tracker).ravel()[0])))
    assert ours == _grad_scaler_history(init, interval, overflows)


def test_dynamic_loss_scale_recovers_where_the_static_one_does_not():
    # One bad step an epoch (issue 17): the static scale only ever halves, the dynamic one grows back.
    be, scale, flag, tracker = _scale_arena(8192.0)
    static = be.capture("s", [op("loss_scale_update", flag=flag, scale=scale, rule="static")])
    for _ in range(3):
        for k in range(10):
            be.write(flag, [int(k == 4)])
            be.launch(static)
    assert be.read(scale).ravel()[0] == 1024.0
    be.write(scale, [8192.0])
    dynamic = be.capture("d", [op("loss_scale_update", flag=flag, scale=scale, tracker=tracker, rule="dynamic",
                                  growth_interval=5)])
    for _ in range(3):
        for k in range(10):
            be.write(flag, [int(k == 4)])
            be.launch(dynamic)
    assert be.read(scale).ravel()[0] == 8192.0


def test_dynamic_loss_scale_needs_a_tracker_and_a_valid_interval():
    be, scale, flag, tracker = _scale_arena(8.0)
    with pytest.raises(BackendError, match="rule 'dynamic' needs argument 'tracker'"):
        be.capture("g", [op("loss_scale_update", flag=flag, scale=scale, rule="dynamic")])
    with pytest.raises(BackendError, match="'growth_interval' must be an integer >= 1, got 0"):
        be.capture("g", [op("loss_scale_update", flag=flag, scale=scale, tracker=tracker, rule="dynamic",
                            growth_interval=0)])
    with pytest.raises(BackendError, match="loss-scale rule 'grow' is not one of"):
        be.capture("g", [op("loss_scale_update", flag=flag, scale=scale, rule="grow")])


def _held_arena():
    a = SimpleArena()
    a.add("scale", (1,))
    for name in ("step", "flag", "count", "tracker", "hold"):
        a.add(name, (1,), "int32")
    return a, a.allocate()


@pytest.mark.parametrize("rule", ["static", "dynamic"])
def test_hold_makes_the_step_s_bookkeeping_a_no_op(rule):
    """Gradient accumulation's hold (a micro-step inside its window): set, the step counter, the skipped-step count
    and the loss scale (and its tracker) stay; clear, each op does what it does without hold."""
    a, be = _held_arena()
    scale_args = {"tracker": a["tracker"], "growth_interval": 2} if rule == "dynamic" else {}
    g = be.capture("g", [op("scalar_increment", x=a["step"], hold=a["hold"]),
                         op("count_flag", flag=a["flag"], count=a["count"], hold=a["hold"]),
                         op("loss_scale_update", flag=a["flag"], scale=a["scale"], hold=a["hold"], rule=rule,
                            **scale_args)])
    be.write(a["scale"], [1024.0])
    be.write(a["tracker"], [1])
    history = []
    for h, f in ((1, 1), (1, 0), (0, 0), (1, 1), (0, 1), (1, 0), (0, 0)):
        be.write(a["hold"], [h])
        be.write(a["flag"], [f])
        be.launch(g)
        history.append(tuple(float(be.read(a[n]).ravel()[0]) for n in ("step", "count", "scale", "tracker")))
    if rule == "dynamic":  # the clean step with tracker 1 doubles (interval 2), the flagged one halves
        assert history == [(0, 0, 1024, 1), (0, 0, 1024, 1), (1, 0, 2048, 0), (1, 0, 2048, 0), (2, 1, 1024, 0),
                           (2, 1, 1024, 0), (3, 1, 1024, 1)]
    else:
        assert history == [(0, 0, 1024, 1), (0, 0, 1024, 1), (1, 0, 1024, 1), (1, 0, 1024, 1), (2, 1, 512, 1),
                           (2, 1, 512, 1), (3, 1, 512, 1)]


def test_hold_must_be_one_int32():
    a, be = _held_arena()
    with pytest.raises(BackendError, match="argument 'hold' has dtype FP32; expected INT32"):
        be.capture("g", [op("scalar_increment", x=a["step"], hold=a["scale"])])
