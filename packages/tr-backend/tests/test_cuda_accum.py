"""Gradient accumulation on the CUDA backend against the CPU backend, bit for bit: the accum family (csrc/ops/accum.cu:
accum_window's table over two epochs, range_accumulate's float32 sums over spans of many blocks, window_result's
means), the hold of range_check_finite, count_flag, scalar_increment and loss_scale_update (both rules), and the div
of softmax_ce_bwd and onehot_loss_bwd (div == N gives the bytes of no div). Every op here is one float32 operation
an element or integer bookkeeping, so the two backends agree exactly. GPU-only."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import BN_B, FC_B, FC_W, RESULT, SCALAR_FP32, SCALAR_INT32, op
from cuda_testkit import Twin, close

from tr.core.memory import Region, Role, Span

pytestmark = pytest.mark.gpu

ACC = getattr(Role, "GRAD_ACCUM", Role.MOMENT1)  # GRAD's twins' role; a later role stands in until it is declared
_WINDOW = ("pos", "hold", "first")


def _scalars(tw: Twin, *more: tuple) -> None:
    tw.add("div", (1,), "fp32", SCALAR_FP32)
    for name, n in more:
        tw.add(name, (n,), "fp32", SCALAR_FP32)
    for name in _WINDOW:
        tw.add(name, (1,), "int32", SCALAR_INT32)


def _window_call(tw: Twin, k: int, steps: int, m: int, last: int):
    return op("accum_window", pos=tw["pos"], hold=tw["hold"], first=tw["first"], div=tw["div"], accumulate=k,
              steps=steps, batch=m, last_batch=last)


def _launch(tw: Twin, gc, gg) -> None:
    tw.cpu.launch(gc)
    tw.gpu.launch(gg)
    tw.gpu.synchronize()


def _same(tw: Twin, *names: str) -> None:
    for name in names:
        c, g = tw.both(name)
        assert g.tobytes() == c.tobytes(), name


@pytest.mark.parametrize("steps,last", [(22, 2), (21, 3), (24, 4)])
def test_accum_window_matches_the_cpu_over_two_epochs(steps, last):
    tw = Twin()
    _scalars(tw)
    tw.allocate()
    for name in (*_WINDOW, "div"):
        tw.write(name, [0])
    gc, gg = tw.run(_window_call(tw, 4, steps, 4, last))
    _same(tw, "div", *_WINDOW)
    for _ in range(2 * steps - 1):
        _launch(tw, gc, gg)
        _same(tw, "div", *_WINDOW)
    assert int(tw.gpu.read(tw["pos"]).ravel()[0]) == 0  # two whole epochs


def test_range_accumulate_matches_the_cpu():
    """k = 3 over S = 7 micro-steps (windows of 3, 3, 1), gradients of three regions, 1.2M elements in all."""
    tw = Twin()
    shapes = sorted(((FC_W, (1000, 1, 1, 1200)), (FC_B, (1000,)), (BN_B, (77,))), key=lambda gs: gs[0].sort_key())
    for role, tag in ((Role.GRAD, "g"), (ACC, "acc")):
        for group, shape in shapes:
            tw.add(f"{tag}_{group.name}", shape, "fp32", Region(role, group))
    _scalars(tw)
    tw.allocate()
    for name in _WINDOW:
        tw.write(name, [0])
    grads = [n for n in tw.arena.tensors if n.startswith("g_")]
    accs = [n.replace("g_", "acc_", 1) for n in grads]
    for n in accs:
        tw.fill(n)
    calls = (_window_call(tw, 3, 7, 8, 5),
             op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=tw["hold"], first=tw["first"]))
    for epoch in range(2):
        for p in range(7):
            for n in grads:
                tw.fill(n, -10.0 ** (p % 3), 10.0 ** (p % 3))
            if epoch == 0 and p == 0:
                gc, gg = tw.run(*calls)
            else:
                _launch(tw, gc, gg)
            _same(tw, *grads, *accs, *_WINDOW)


def test_window_result_matches_the_cpu():
    tw = Twin()
    tw.add("result", (1, 1, 1, 3), "fp32", RESULT)
    _scalars(tw, ("batch", 1), ("window", 4))
    tw.allocate()
    for name in _WINDOW:
        tw.write(name, [0])
    tw.write("window", [np.nan] * 4)
    calls = (_window_call(tw, 3, 5, 8, 5),
             op("window_result", result=tw["result"], window=tw["window"], batch=tw["batch"], hold=tw["hold"],
                first=tw["first"]))
    for p in range(10):
        tw.fill("result", 0.0, 7.0)
        tw.write("batch", [5 if p % 5 == 4 else 8])
        if p == 0:
            gc, gg = tw.run(*calls)
        else:
            _launch(tw, gc, gg)
        _same(tw, "result", "window", *_WINDOW)


@pytest.mark.parametrize("accumulate", [False, True])
def test_range_check_finite_hold_matches_the_cpu(accumulate):
    tw = Twin()
    tw.add("g", (300_001,), "fp32", Region(Role.GRAD, FC_W))
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.add("hold", (1,), "int32", SCALAR_INT32)
    tw.allocate()
    call = op("range_check_finite", span=Span.of(Role.GRAD), flag=tw["flag"], hold=tw["hold"], clip=0.5,
              accumulate=accumulate)
    graphs = None
    for hold in (1, 0):
        for start in (0, 1):
            for bad in (False, True):
                v = tw.rng.uniform(-2, 2, 300_001).astype(np.float32)
                if bad:
                    v[123_457] = np.inf
                tw.write("g", v)
                tw.write("hold", [hold])
                tw.write("flag", [start])
                if graphs is None:
                    graphs = tw.run(call)
                else:
                    _launch(tw, *graphs)
                _same(tw, "g", "flag")
                if hold:
                    assert tw.gpu.read(tw["g"]).ravel().tobytes() == v.tobytes()  # not read, not clipped


@pytest.mark.parametrize("rule", ["static", "dynamic"])
def test_held_scalars_match_the_cpu(rule):
    tw = Twin()
    tw.add("scale", (1,), "fp32", SCALAR_FP32)
    for name in ("step", "flag", "count", "tracker", "hold"):
        tw.add(name, (1,), "int32", SCALAR_INT32)
    tw.allocate()
    for name in ("step", "count", "tracker"):
        tw.write(name, [0])
    tw.write("scale", [65536.0])
    extra = {"tracker": tw["tracker"], "growth_interval": 3} if rule == "dynamic" else {}
    calls = (op("scalar_increment", x=tw["step"], hold=tw["hold"]),
             op("count_flag", flag=tw["flag"], count=tw["count"], hold=tw["hold"]),
             op("loss_scale_update", flag=tw["flag"], scale=tw["scale"], hold=tw["hold"], rule=rule, **extra))
    pattern = [(h, f) for h in (1, 0) for f in (0, 1)] * 3 + [(0, 0)] * 4
    for i, (h, f) in enumerate(pattern):
        tw.write("hold", [h])
        tw.write("flag", [f])
        if i == 0:
            graphs = tw.run(*calls)
        else:
            _launch(tw, *graphs)
        _same(tw, "step", "count", "scale", "tracker")


def _loss_twin(n: int, k: int, dt: str) -> Twin:
    tw = Twin()
    for name in ("logits", "plain", "d"):
        tw.add(name, (n, 1, 1, k), dt)
    tw.add("probs", (n, 1, 1, k))
    tw.add("labels", (n, 1, 1, 1), "int32")
    tw.add("scale", (1,))
    tw.add("div", (1,))
    tw.allocate()
    tw.fill("labels", 0, k)
    tw.write("scale", [1024.0])
    return tw


@pytest.mark.parametrize("dt", ["fp32", "fp16"])
def test_softmax_ce_bwd_div_matches_the_cpu(dt):
    n, k = 64, 37
    tw = _loss_twin(n, k, dt)
    tw.write("probs", tw.rng.dirichlet(np.ones(k), n).astype(np.float32))
    common = {"probs": tw["probs"], "labels": tw["labels"], "scale": tw["scale"], "label_smoothing": 0.1}
    tw.run(op("softmax_ce_bwd", **common, dlogits=tw["plain"]), poison=("plain",))
    graphs = None
    for div in (n, 2 * n, 3 * n - 5):
        tw.write("div", [div])
        if graphs is None:
            graphs = tw.run(op("softmax_ce_bwd", **common, dlogits=tw["d"], div=tw["div"]), poison=("d",))
        else:
            _launch(tw, *graphs)
        _same(tw, "d", "plain")
        if div == n:  # N's place taken by the same number: the same bytes
            assert tw.gpu.read(tw["d"]).tobytes() == tw.gpu.read(tw["plain"]).tobytes()


@pytest.mark.parametrize("kind", ["bce_logits", "mse"])
def test_onehot_loss_bwd_div_matches_the_cpu(kind):
    n, k = 32, 10
    tw = _loss_twin(n, k, "fp32")
    tw.fill("logits", -6.0, 6.0)
    common = {"logits": tw["logits"], "labels": tw["labels"], "scale": tw["scale"], "loss": kind}
    tw.run(op("onehot_loss_bwd", **common, dlogits=tw["plain"]), poison=("plain",))
    graphs = None
    for div in (n, 2 * n, 3 * n - 5):
        tw.write("div", [div])
        if graphs is None:
            graphs = tw.run(op("onehot_loss_bwd", **common, dlogits=tw["d"], div=tw["div"]), poison=("d",))
        else:
            _launch(tw, *graphs)
        if kind == "mse":
            _same(tw, "d")  # z - t times the factor: one float32 operation each
        else:  # sigmoid: CUDA's tanhf is not numpy's
            c, g = tw.both("d")
            close(g, c, 1e-6, "d")
        if div == n:
            assert tw.gpu.read(tw["d"]).tobytes() == tw.gpu.read(tw["plain"]).tobytes()
