"""range_optimizer splits large ranges into cache-sized blocks over threads: the result must equal the
single-block update bit for bit (every rule is element-wise)."""

import numpy as np
import pytest
from backend_testkit import FC_W, SCALAR_FP32, SCALAR_INT32, SimpleArena, op

import tr.backend.cpu.ops.range.optimizer as opt_mod
from tr.core.memory import Region, Role, Span

N = 3 * opt_mod._BLOCK + 1234  # several blocks and a ragged tail


def _run(rule, monkeypatch, single):
    if single:
        monkeypatch.setattr(opt_mod, "_BLOCK", 1 << 30)
        monkeypatch.setattr(opt_mod, "_threads", lambda: 1)
    a = SimpleArena()
    roles = {"W": Role.PARAM, "G": Role.GRAD, "M": Role.MOMENT1, "V": Role.MOMENT2}
    t = {k: a.add(k, (N,), "fp32", Region(role, FC_W)) for k, role in roles.items()}
    for name, region in (("lr", SCALAR_FP32), ("scale", SCALAR_FP32)):
        t[name] = a.add(name, (1,), region=region)
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    t["step"] = a.add("step", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    rng = np.random.default_rng(3)
    be.write(t["W"], rng.standard_normal(N))
    be.write(t["scale"], [2.0])
    be.write(t["lr"], [0.01])
    adam = rule in ("adam", "adamw")
    call = op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD),
              m=Span.of(Role.MOMENT1) if rule != "sgd" else None, v=Span.of(Role.MOMENT2) if adam else None,
              lr=t["lr"], flag=t["flag"], grad_scale=t["scale"], step=t["step"] if adam else None, rule=rule,
              weight_decay=0.01)
    g = be.capture("OPTIMIZER", [call, op("scalar_increment", x=t["step"])])
    for _ in range(3):
        be.write(t["G"], rng.standard_normal(N))
        be.launch(g)
    return be.read(t["W"]).tobytes()


@pytest.mark.parametrize("rule", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_blocked_update_equals_single_block(rule, monkeypatch):
    blocked = _run(rule, monkeypatch, single=False)
    with monkeypatch.context() as mp:
        single = _run(rule, mp, single=True)
    assert blocked == single
