"""scalar_increment, lr_lookup, loss_scale_update: device-side scalars, compared exactly."""

import numpy as np
from backend_testkit import SimpleArena, op


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
