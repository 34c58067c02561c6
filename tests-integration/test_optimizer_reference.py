"""tr.algo.update is the reference the backends' optimizer kernels are held to: for every optimizer of
tr.core.optim, the CPU backend's range_optimizer (decayed weights with WEIGHT_RULE, bias-like parameters with
BIAS_RULE and no weight decay) or lars_update gives the reference's weights and state over several steps,
with a loss scale and a skipped step among them. (The CUDA kernels are held to the CPU backend by the GPU
tests, so the chain reaches them.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.algo.optimizer import OptimizerKind, bias_rule
from tr.algo.update import apply_rule, init_state
from tr.core.memory import Region, Role, Span
from tr.core.optim import BIAS_RULE, LARS, OPTIMIZERS, WEIGHT_RULE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests"))
from backend_testkit import FC_W, SCALAR_FP32, SCALAR_INT32, SimpleArena, op  # noqa: E402

HP = {"momentum": 0.9, "beta1": 0.85, "beta2": 0.995, "eps": 1e-6, "weight_decay": 0.01, "trust_coefficient": 0.02,
      "trust_clip": 50.0}
STEPS = [(0.05, 1.0, False), (0.04, 8.0, False), (0.03, 8.0, True), (0.02, 2.0, False)]  # lr, loss scale, skipped


def _arena(n: int) -> SimpleArena:
    a = SimpleArena()
    for name, role in (("w", Role.PARAM), ("g", Role.GRAD), ("m", Role.MOMENT1), ("v", Role.MOMENT2),
                       ("ratio", Role.TRUST_RATIO)):
        a.add(name, (1,) if name == "ratio" else (n,), "fp32", Region(role, FC_W))
    for name, dt, region in (("lr", "fp32", SCALAR_FP32), ("scale", "fp32", SCALAR_FP32),
                             ("flag", "int32", SCALAR_INT32), ("step", "int32", SCALAR_INT32)):
        a.add(name, (1,), dt, region)
    return a


def _hp(kind: OptimizerKind, bias: bool) -> dict[str, float]:
    hp = dict(HP)
    if kind in (OptimizerKind.ADAM, OptimizerKind.ADAMW):
        hp["momentum"] = hp["beta1"]
    if bias:
        hp["weight_decay"] = 0.0
    return hp


@pytest.mark.parametrize("bias", [False, True], ids=["weights", "bias-like"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_cpu_kernels_follow_the_reference(name, bias):
    if bias or name not in LARS:
        rule = BIAS_RULE[name] if bias else WEIGHT_RULE[name]
        kind = OptimizerKind.of(rule)
    else:
        rule, kind = None, OptimizerKind.of(name)
    if bias:
        assert kind is bias_rule(OptimizerKind.of(name))  # tr.algo and tr.core spell the same rule
    hp = _hp(kind, bias)
    rng = np.random.default_rng(OPTIMIZERS.index(name))
    n = 300
    a = _arena(n)
    be = a.allocate()
    w0 = rng.standard_normal(n).astype(np.float32)
    be.write(a["w"], w0)
    ref_w, state = w0.copy(), init_state(kind, w0)
    if rule is not None:
        call = op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD), m=Span.of(Role.MOMENT1),
                  v=Span.of(Role.MOMENT2), lr=a["lr"], flag=a["flag"], grad_scale=a["scale"], step=a["step"],
                  rule=rule, beta1=hp["momentum"], beta2=hp["beta2"], eps=hp["eps"], weight_decay=hp["weight_decay"])
    else:
        call = op("lars_update", w=a["w"], g=a["g"], m=a["m"], lr=a["lr"], flag=a["flag"], grad_scale=a["scale"],
                  ratio=a["ratio"], nesterov=name == "lars_nesterov", momentum=hp["momentum"],
                  weight_decay=hp["weight_decay"], trust_coefficient=hp["trust_coefficient"], eps=hp["eps"],
                  trust_clip=hp["trust_clip"])
    graph = be.capture("opt", [call])
    for lr, scale, skip in STEPS:
        g = (rng.standard_normal(n) * scale).astype(np.float32)  # the loss-scaled gradient
        for t, value in (("g", g), ("lr", [lr]), ("scale", [scale]), ("flag", [int(skip)])):
            be.write(a[t], np.asarray(value))
        be.launch(graph)
        if not skip:
            be.write(a["step"], be.read(a["step"]).reshape(-1) + 1)  # scalar_increment's job in a plan
        apply_rule(kind, ref_w, g, state, lr, hp, scaling=scale, skip=skip)
        np.testing.assert_allclose(be.read(a["w"]).reshape(-1), ref_w, rtol=2e-5, atol=2e-6)
        if state.m is not None:
            np.testing.assert_allclose(be.read(a["m"]).reshape(-1), state.m, rtol=2e-5, atol=2e-6)
        if state.v is not None:
            np.testing.assert_allclose(be.read(a["v"]).reshape(-1), state.v, rtol=2e-5, atol=1e-9)
