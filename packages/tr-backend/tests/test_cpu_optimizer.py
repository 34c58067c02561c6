"""range_optimizer (every rule) and lars_update over 10 steps, against the SEED_SYSTEM.md §7 closed forms
(float64) and against torch.optim where the rules coincide: SGD with weight decay, momentum and Nesterov
without decay, Adam with L2 decay, AdamW.

Each step writes fresh gradients (multiplied by a loss scale that the op divides out) and a new learning
rate; one step raises the NaN flag and must change nothing except the step counter. Tolerance: 1e-5 of
the data's scale after 10 FP32 steps.
"""

import numpy as np
import pytest
import torch
from backend_testkit import BN_B, DEEP_CONV, FC_B, FC_W, SCALAR_FP32, SCALAR_INT32, SimpleArena, assert_close, op

from tr.core.memory import Region, Role, Span

SHAPES = [((7,), BN_B), ((5,), FC_B), ((5, 1, 1, 9), FC_W), ((4, 3, 3, 2), DEEP_CONV)]  # (shape, group)
ROLES = {"W": Role.PARAM, "G": Role.GRAD, "M": Role.MOMENT1, "V": Role.MOMENT2}
STEPS, SCALE, SKIP = 10, 4.0, 4


def _arena():
    a = SimpleArena()
    t = {}
    for key, role in ROLES.items():
        for shape, group in SHAPES:
            t[key, group] = a.add(f"{key}_{group.name}", shape, "fp32", Region(role, group))
    t["lr"] = a.add("lr", (1,), region=SCALAR_FP32)
    t["scale"] = a.add("scale", (1,), region=SCALAR_FP32)
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    t["step"] = a.add("step", (1,), "int32", SCALAR_INT32)
    return a, t


def _span(key):
    return Span.of(ROLES[key])


def _drive(rule, flag_step=SKIP, **attrs):
    """Run the optimizer graph for STEPS steps; return the backend, tensors, lrs and the gradients used."""
    a, t = _arena()
    be = a.allocate()
    rng = np.random.default_rng(sum(map(ord, rule)))
    for _, name in SHAPES:
        be.write(t["W", name], rng.standard_normal(t["W", name].shape.dims))
    be.write(t["scale"], [SCALE])
    opt = op("range_optimizer", w=_span("W"), g=_span("G"), m=_span("M") if rule != "sgd" else None,
             v=_span("V") if rule in ("adam", "adamw") else None, lr=t["lr"], flag=t["flag"],
             grad_scale=t["scale"], step=t["step"] if rule in ("adam", "adamw") else None, rule=rule, **attrs)
    g = be.capture("OPTIMIZER", [opt, op("scalar_increment", x=t["step"])])
    w0 = {name: be.read(t["W", name]).astype(np.float64) for _, name in SHAPES}
    lrs, grads = [], []
    for k in range(STEPS):
        lr = 0.05 * (1 + k / 5)
        grad = {name: rng.standard_normal(t["G", name].shape.dims) for _, name in SHAPES}
        for name, v in grad.items():
            be.write(t["G", name], SCALE * v)  # scaled gradients, as in AMP
        grad = {name: be.read(t["G", name]).astype(np.float64) / SCALE for name in grad}
        be.write(t["lr"], [lr])
        be.write(t["flag"], [1 if k == flag_step else 0])
        be.launch(g)
        lrs.append(np.float32(lr).item())
        grads.append(grad)
    assert int(be.read(t["step"]).ravel()[0]) == STEPS  # the counter moves on skipped steps too
    return be, t, w0, lrs, grads


def _closed_form(rule, w, grads, lrs, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, flag_step=SKIP):
    b1, b2, wd = beta1, beta2, weight_decay
    w, m, v = w.copy(), np.zeros_like(w), np.zeros_like(w)
    for k, (g, lr) in enumerate(zip(grads, lrs)):
        if k == flag_step:
            continue
        t = k + 1
        if rule == "sgd":
            w = w * (1 - lr * wd) - lr * g
        elif rule in ("momentum", "nesterov"):
            m = b1 * m + g
            w = w * (1 - lr * wd) - lr * (m if rule == "momentum" else b1 * m + g)
        else:
            if rule == "adamw":
                w = w * (1 - lr * wd)
                gp = g
            else:
                gp = g + wd * w
            m = b1 * m + (1 - b1) * gp
            v = b2 * v + (1 - b2) * gp * gp
            w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return w


@pytest.mark.parametrize("rule,attrs", [
    ("sgd", {}), ("sgd", {"weight_decay": 0.01}),
    ("momentum", {"beta1": 0.9}), ("momentum", {"beta1": 0.8, "weight_decay": 5e-4}),
    ("nesterov", {"beta1": 0.9, "weight_decay": 1e-3}),
    ("adam", {}), ("adam", {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.05}),
    ("adamw", {"weight_decay": 0.1}),
])
def test_optimizer_rules_closed_form(rule, attrs):
    be, t, w0, lrs, grads = _drive(rule, **attrs)
    for _, name in SHAPES:
        ref = _closed_form(rule, w0[name], [g[name] for g in grads], lrs, **attrs)
        assert_close(be.read(t["W", name]), ref)
        if rule == "sgd":
            assert not np.any(be.read(t["M", name]))  # plain SGD keeps no state


def test_padding_inside_the_span_stays_zero():
    be, t, *_ = _drive("adamw", weight_decay=0.1)
    for group in ("W", "M", "V"):
        raw = be.span_view(_span(group)).view(np.float32)
        for _, name in SHAPES:
            tt = t[group, name]
            lo = tt.offset - be.layout.span(_span(group))[0]
            pad = raw[(lo + tt.nbytes) // 4:(lo + tt.slot_bytes) // 4]
            assert not pad.any()


@pytest.mark.parametrize("rule,attrs,make", [
    ("sgd", {"weight_decay": 0.01}, lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)),
    ("momentum", {"beta1": 0.9}, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("nesterov", {"beta1": 0.9}, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", {"weight_decay": 0.05}, lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.05)),
    ("adamw", {"weight_decay": 0.1}, lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.1)),
])
def test_optimizer_rules_match_torch(rule, attrs, make):
    be, t, w0, lrs, grads = _drive(rule, flag_step=-1, **attrs)
    params = [torch.tensor(w0[name], requires_grad=True) for _, name in SHAPES]
    opt = make(params)
    for g, lr in zip(grads, lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        for p, (_, name) in zip(params, SHAPES):
            p.grad = torch.tensor(g[name])
        opt.step()
    for p, (_, name) in zip(params, SHAPES):
        assert_close(be.read(t["W", name]), p.detach().numpy())


def test_optimizer_rule_needs_its_moments():
    a, t = _arena()
    be = a.allocate()
    with pytest.raises(Exception, match=r"op #0 range_optimizer .*rule 'adam' needs argument 'v'"):
        be.capture("OPTIMIZER", [op("range_optimizer", w=_span("W"), g=_span("G"), m=_span("M"), lr=t["lr"],
                                    flag=t["flag"], grad_scale=t["scale"], step=t["step"], rule="adam")])


def _lars_arena():
    a = SimpleArena()
    t = {name: a.add(name, shape, region=Region(role, DEEP_CONV))
         for name, shape, role in (("w", (6, 3, 3, 4), Role.PARAM), ("g", (6, 3, 3, 4), Role.GRAD),
                                   ("m", (6, 3, 3, 4), Role.MOMENT1), ("ratio", (1,), Role.TRUST_RATIO))}
    t |= {"lr": a.add("lr", (1,), region=SCALAR_FP32), "scale": a.add("scale", (1,), region=SCALAR_FP32),
          "flag": a.add("flag", (1,), "int32", SCALAR_INT32)}
    return a, t


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_closed_form(nesterov):
    a, t = _lars_arena()
    be = a.allocate()
    rng = np.random.default_rng(7)
    be.write(t["w"], rng.standard_normal(t["w"].shape.dims))
    be.write(t["scale"], [SCALE])
    beta, wd, tc, eps = 0.9, 5e-4, 0.02, 1e-8
    g = be.capture("LARS", [op("lars_update", w=t["w"], g=t["g"], m=t["m"], lr=t["lr"], flag=t["flag"],
                               grad_scale=t["scale"], ratio=t["ratio"], nesterov=nesterov, momentum=beta,
                               weight_decay=wd, trust_coefficient=tc, eps=eps)])
    w = be.read(t["w"]).astype(np.float64)
    m = np.zeros_like(w)
    for k in range(STEPS):
        lr = np.float32(0.5 * (1 + k / 10)).item()
        be.write(t["g"], SCALE * rng.standard_normal(w.shape))
        be.write(t["lr"], [lr])
        be.write(t["flag"], [1 if k == SKIP else 0])
        gr = be.read(t["g"]).astype(np.float64) / SCALE
        be.launch(g)
        if k == SKIP:
            assert be.read(t["ratio"]).ravel()[0] == 1.0
            continue
        wn, gn = np.linalg.norm(w), np.linalg.norm(gr)
        eta = min(tc * wn / (gn + wd * wn + eps), 100.0)
        assert be.read(t["ratio"]).ravel()[0] == pytest.approx(eta, rel=1e-5)
        gp = gr + wd * w
        m = beta * m + lr * eta * gp
        w = w - (lr * eta * gp + beta * m) if nesterov else w - m
    assert_close(be.read(t["w"]), w)
    assert_close(be.read(t["m"]), m)


def test_lars_trust_ratio_limits():
    a, t = _lars_arena()
    be = a.allocate()
    be.write(t["scale"], [1.0])
    be.write(t["lr"], [0.1])
    g = be.capture("LARS", [op("lars_update", w=t["w"], g=t["g"], m=t["m"], lr=t["lr"], flag=t["flag"],
                               grad_scale=t["scale"], ratio=t["ratio"], trust_coefficient=1e4)])
    be.write(t["g"], np.ones(t["g"].shape.dims))
    be.launch(g)  # w = 0: ratio 1
    assert be.read(t["ratio"]).ravel()[0] == 1.0
    be.write(t["w"], np.ones(t["w"].shape.dims))
    be.write(t["g"], np.full(t["g"].shape.dims, 1e-3))
    be.launch(g)  # a huge ratio is clamped to 100
    assert be.read(t["ratio"]).ravel()[0] == 100.0


def test_lars_trust_clip_attribute_bounds_the_ratio():
    """LARS().trust_ratio_clip(c) reaches the op as trust_clip: the ratio is min(eta, c), not min(eta, 100)."""
    a, t = _lars_arena()
    be = a.allocate()
    be.write(t["scale"], [1.0])
    be.write(t["lr"], [0.1])
    be.write(t["w"], np.ones(t["w"].shape.dims))
    be.write(t["g"], np.full(t["g"].shape.dims, 1e-3))  # eta = 1e4 * ||w|| / ||g|| ~ 1e7 unclipped
    for clip in (3.5, 250.0):
        be.write(t["m"], np.zeros(t["m"].shape.dims))
        g = be.capture("LARS", [op("lars_update", w=t["w"], g=t["g"], m=t["m"], lr=t["lr"], flag=t["flag"],
                                   grad_scale=t["scale"], ratio=t["ratio"], trust_coefficient=1e4, trust_clip=clip)])
        be.launch(g)
        assert be.read(t["ratio"]).ravel()[0] == clip
