"""Range ops over real region spans: clear, copy, cast, finite check (+clip), scale, all-reduce, EMA, metrics.

Memory ops and casts are compared exactly (numpy's float16 cast is IEEE round-to-nearest-even, as CUDA's
__float2half); EMA over 10 steps within 1e-6 of the float64 closed form.
"""

import numpy as np
import pytest
from backend_testkit import (
    BN_B,
    BN_W,
    DEEP_CONV,
    FC_B,
    FC_W,
    FIRST_CONV,
    FOLDED_SCALE,
    MEAN,
    RESULT,
    RESULT_SUM,
    SCALAR_FP32,
    SCALAR_INT32,
    VAR,
    SimpleArena,
    assert_close,
    op,
    run,
)

from tr.core.errors import BackendError
from tr.core.memory import Region, Role, Span


def _rand(be, t, rng, scale=1.0):
    be.write(t, scale * rng.standard_normal(t.shape.dims))


def test_range_clear_touches_only_its_span():
    a = SimpleArena()
    before = a.add("before", (3,), region=Region(Role.FOLDED, FOLDED_SCALE))
    inside = [a.add(g.name, (n,), region=Region(Role.PARAM, g)) for g, n in ((BN_B, 5), (BN_W, 5), (FC_B, 4))]
    after = a.add("after", (2, 1, 1, 3), region=Region(Role.PARAM, FC_W))
    be = a.allocate()
    rng = np.random.default_rng(0)
    for t in (before, *inside, after):
        _rand(be, t, rng)
    keep = be.read(before), be.read(after)
    g = run(be, op("range_clear", span=Span.of(Role.PARAM, decayed=False)))
    assert g.num_ops == 1
    for t in inside:
        assert not be.read(t).any()
    np.testing.assert_array_equal(be.read(before), keep[0])
    np.testing.assert_array_equal(be.read(after), keep[1])


def test_range_copy_next_stats_to_prev():
    a = SimpleArena()
    prev = [a.add("pm", (6,), region=Region(Role.RUNNING, MEAN)), a.add("pv", (6,), region=Region(Role.RUNNING, VAR))]
    nxt = [a.add("nm", (6,), region=Region(Role.RUNNING_NEXT, MEAN)),
           a.add("nv", (6,), region=Region(Role.RUNNING_NEXT, VAR))]
    be = a.allocate()
    rng = np.random.default_rng(1)
    for t in prev + nxt:
        _rand(be, t, rng)
    run(be, op("range_copy", src=Span.of(Role.RUNNING_NEXT), dst=Span.of(Role.RUNNING)))
    for p, n in zip(prev, nxt):
        np.testing.assert_array_equal(be.read(p), be.read(n))


def test_range_cast_both_directions():
    shapes = [(4, 1, 1, 9), (8, 3, 3, 3), (6, 3, 3, 8)]
    regions32 = [Region(Role.PARAM, FC_W), Region(Role.PARAM, FIRST_CONV), Region(Role.PARAM, DEEP_CONV)]
    regions16 = [Region(Role.AMP_COPY, FC_W), Region(Role.AMP_COPY, FIRST_CONV), Region(Role.AMP_COPY, DEEP_CONV)]
    grads32 = [Region(Role.GRAD, FC_W), Region(Role.GRAD, FIRST_CONV), Region(Role.GRAD, DEEP_CONV)]
    grads16 = [Region(Role.GRAD_FP16, FC_W), Region(Role.GRAD_FP16, FIRST_CONV), Region(Role.GRAD_FP16, DEEP_CONV)]
    a = SimpleArena()
    w32 = [a.add(f"w{i}", s, "fp32", r) for i, (s, r) in enumerate(zip(shapes, regions32))]
    w16 = [a.add(f"a{i}", s, "fp16", r) for i, (s, r) in enumerate(zip(shapes, regions16))]
    g32 = [a.add(f"g{i}", s, "fp32", r) for i, (s, r) in enumerate(zip(shapes, grads32))]
    g16 = [a.add(f"h{i}", s, "fp16", r) for i, (s, r) in enumerate(zip(shapes, grads16))]
    be = a.allocate()
    rng = np.random.default_rng(2)
    for t in w32:
        _rand(be, t, rng)
    be.write(w32[0], np.full(w32[0].shape.dims, 1e6))  # overflows FP16: inf, like __float2half
    for t in g16:
        _rand(be, t, rng)
    run(be, op("range_cast", src=Span.of(Role.PARAM, decayed=True), dst=Span.of(Role.AMP_COPY, decayed=True),
               src_dtype="fp32", dst_dtype="fp16"),
        op("range_cast", src=Span.of(Role.GRAD_FP16), dst=Span.of(Role.GRAD, decayed=True),
           src_dtype="fp16", dst_dtype="fp32"))
    for s, d in zip(w32, w16):  # element k of the FP32 range lines up with element k of the FP16 range
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(be.read(d), be.read(s).astype(np.float16))
    assert np.isinf(be.read(w16[0])).all()
    for s, d in zip(g16, g32):
        np.testing.assert_array_equal(be.read(d), be.read(s).astype(np.float32))


def test_range_cast_bf16():
    a = SimpleArena()
    src = a.add("src", (1, 1, 1, 6), "fp32", Region(Role.PARAM, FC_W))
    dst = a.add("dst", (1, 1, 1, 6), "bf16", Region(Role.AMP_COPY, FC_W))
    back = a.add("back", (1, 1, 1, 6), "fp32", Region(Role.GRAD, FC_W))
    be = a.allocate()
    vals = np.array([1.0, -2.5, 1.00390625, 1.01171875, 3.0e38, np.nan], np.float32)
    be.write(src, vals)
    run(be, op("range_cast", src=Span.of(Role.PARAM), dst=Span.of(Role.AMP_COPY), src_dtype="fp32", dst_dtype="bf16"),
        op("range_cast", src=Span.of(Role.AMP_COPY), dst=Span.of(Role.GRAD), src_dtype="bf16", dst_dtype="fp32"))
    bits = be.read(dst).ravel()
    # 1.00390625 is halfway between bf16 1.0 and 1.0078125: ties go to even (1.0); 1.01171875 -> 1.015625
    np.testing.assert_array_equal(bits[:4], [0x3F80, 0xC020, 0x3F80, 0x3F82])
    out = be.read(back).ravel()
    np.testing.assert_array_equal(out[:4], [1.0, -2.5, 1.0, 1.015625])
    assert np.isnan(out[5])


def test_range_check_finite_flag_and_clip():
    a = SimpleArena()
    g = [a.add("g0", (10,), region=Region(Role.GRAD, BN_B)), a.add("g1", (2, 1, 1, 5), region=Region(Role.GRAD, FC_W))]
    flag = a.add("flag", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    rng = np.random.default_rng(3)
    s = Span.of(Role.GRAD)
    check = be.capture("check", [op("range_check_finite", span=s, flag=flag)])
    clip = be.capture("clip", [op("range_check_finite", span=s, flag=flag, clip=0.5)])
    for t in g:
        _rand(be, t, rng, 3.0)
    be.launch(check)
    assert be.read(flag).ravel()[0] == 0
    for bad in (np.nan, np.inf, -np.inf):
        vals = be.read(g[1])
        vals.ravel()[3] = bad
        be.write(g[1], vals)
        be.launch(check)
        assert be.read(flag).ravel()[0] == 1
        _rand(be, g[1], rng)
        be.launch(check)
        assert be.read(flag).ravel()[0] == 0  # the flag is rewritten every launch
    ref = [np.clip(be.read(t), -0.5, 0.5) for t in g]
    be.launch(clip)
    assert be.read(flag).ravel()[0] == 0
    for t, r in zip(g, ref):
        np.testing.assert_array_equal(be.read(t), r)


def test_range_scale():
    a = SimpleArena()
    g = a.add("g", (3, 1, 1, 4), region=Region(Role.GRAD, FC_W))
    f = a.add("f", (1,), region=SCALAR_FP32)
    be = a.allocate()
    _rand(be, g, np.random.default_rng(4))
    be.write(f, [0.125])
    g0 = be.read(g)
    run(be, op("range_scale", span=Span.of(Role.GRAD), factor=f))
    np.testing.assert_array_equal(be.read(g), g0 * np.float32(0.125))


class _FakeCollective:
    """Two ranks; the other rank holds a constant array."""

    world_size, rank = 2, 0

    def __init__(self, other: float) -> None:
        self.other, self.calls = other, 0

    def allreduce_mean(self, buf: np.ndarray) -> None:
        self.calls += 1
        buf += np.float32(self.other)
        buf *= np.float32(0.5)


def test_range_allreduce_mean_identity_and_hook():
    a = SimpleArena()
    g = a.add("g", (4,), region=Region(Role.GRAD, DEEP_CONV))
    be = a.allocate()
    be.write(g, [1.0, 2.0, 3.0, 4.0])
    graph = run(be, op("range_allreduce_mean", span=Span.of(Role.GRAD, early=True) + Span.of(Role.RESULT)))
    assert graph.num_ops == 1 and len(graph.steps) == 0  # one rank: nothing to run
    np.testing.assert_array_equal(be.read(g).ravel(), [1, 2, 3, 4])

    coll = _FakeCollective(3.0)
    a2 = SimpleArena()
    g2 = a2.add("g", (4,), region=Region(Role.GRAD, DEEP_CONV))
    backend = a2.allocate(collective=coll)
    backend.write(g2, [1.0, 2.0, 3.0, 5.0])
    run(backend, op("range_allreduce_mean", span=Span.of(Role.GRAD, early=True)))
    assert coll.calls == 1
    np.testing.assert_array_equal(backend.read(g2).ravel(), [2, 2.5, 3, 4])


def test_range_ema_ten_steps():
    a = SimpleArena()
    w = [a.add("w0", (6,), region=Region(Role.PARAM, BN_B)), a.add("w1", (3, 1, 1, 4), region=Region(Role.PARAM, FC_W))]
    e = [a.add("e0", (6,), region=Region(Role.EMA, BN_B)), a.add("e1", (3, 1, 1, 4), region=Region(Role.EMA, FC_W))]
    be = a.allocate()
    rng = np.random.default_rng(5)
    for t in e:
        _rand(be, t, rng)
    ref = [be.read(t).astype(np.float64) for t in e]
    g = be.capture("ema", [op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), decay=0.9)])
    for _ in range(10):
        for t in w:
            _rand(be, t, rng)
        ref = [0.9 * r + 0.1 * be.read(t).astype(np.float64) for r, t in zip(ref, w)]
        be.launch(g)
    for t, r in zip(e, ref):
        assert_close(be.read(t), r, 1e-6)


def test_range_ema_flag_skips():
    a = SimpleArena()
    w = a.add("w0", (6,), region=Region(Role.PARAM, BN_B))
    e = a.add("e0", (6,), region=Region(Role.EMA, BN_B))
    flag = a.add("flag", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    rng = np.random.default_rng(6)
    _rand(be, w, rng)
    _rand(be, e, rng)
    g = be.capture("ema", [op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), flag=flag, decay=0.5)])
    before = be.read(e).copy()
    be.write(flag, [1])  # a skipped step: the EMA does not move
    be.launch(g)
    np.testing.assert_array_equal(be.read(e), before)
    be.write(flag, [0])
    be.launch(g)
    assert_close(be.read(e), 0.5 * before.astype(np.float64) + 0.5 * be.read(w), 1e-6)


def test_range_ema_warmup_ramps_the_decay_with_the_step_counter():
    """decay_t = decay * (1 - exp(-step / warmup)), step the counter the op reads (steps taken, this one included):
    the first updates follow the weights closely; a flagged step moves nothing."""
    a = SimpleArena()
    w = a.add("w0", (6,), region=Region(Role.PARAM, BN_B))
    e = a.add("e0", (6,), region=Region(Role.EMA, BN_B))
    flag = a.add("flag", (1,), "int32", SCALAR_INT32)
    step = a.add("step", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    rng = np.random.default_rng(7)
    _rand(be, e, rng)
    g = be.capture("ema", [op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), flag=flag, step=step,
                              decay=0.999, warmup=20.0)])
    ref = be.read(e).astype(np.float32).ravel()
    for t in range(1, 13):
        _rand(be, w, rng)
        be.write(step, [t])
        be.write(flag, [int(t == 5)])
        be.launch(g)
        if t != 5:
            d = 0.999 * -np.expm1(-t / 20.0)
            ref = ref * np.float32(d) + be.read(w).ravel() * np.float32(1.0 - d)  # the op's float32 order
        np.testing.assert_array_equal(be.read(e).ravel(), ref)
    assert 0.4 < 0.999 * -np.expm1(-12 / 20.0) < 0.5  # still far below the decay: the ramp is in effect


def test_range_ema_warmup_needs_the_step_counter():
    a = SimpleArena()
    a.add("w0", (6,), region=Region(Role.PARAM, BN_B))
    a.add("e0", (6,), region=Region(Role.EMA, BN_B))
    be = a.allocate()
    with pytest.raises(BackendError, match="a warmup needs argument 'step'"):
        be.capture("ema", [op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), decay=0.9, warmup=5.0)])


def test_accum_metrics():
    a = SimpleArena()
    result = a.add("result", (3,), region=RESULT)
    batch = a.add("batch", (1,), region=SCALAR_FP32)
    accum = a.add("acc", (3,), region=RESULT_SUM)
    be = a.allocate()
    g = be.capture("acc", [op("accum_metrics", result=result, accum=accum, batch=batch)])
    total = np.zeros(3)
    for res, n in (([2.0, 0.5, 0.75], 128), ([1.5, 0.25, 1.0], 128), ([1.0, 1.0, 1.0], 44)):
        be.write(result, res)
        be.write(batch, [n])
        be.launch(g)
        total += np.array(res) * n
    np.testing.assert_allclose(be.read(accum).ravel(), total, rtol=1e-7)


def test_span_length_mismatch_is_a_capture_error():
    a = SimpleArena()
    a.add("w", (6,), region=Region(Role.PARAM, BN_B))
    a.add("e", (2, 1, 1, 600), region=Region(Role.EMA, BN_B))
    be = a.allocate()
    with pytest.raises(Exception, match=r"graph 'ema', op #0 range_ema \(no layer\): span src has"):
        be.capture("ema", [op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), decay=0.5)])


def test_range_check_finite_accumulate_ors_into_the_flag():
    # The BN running statistics join the gradients' flag: a second check must not clear it.
    a = SimpleArena()
    stats = [a.add("nm", (4,), region=Region(Role.RUNNING_NEXT, MEAN)),
             a.add("nv", (4,), region=Region(Role.RUNNING_NEXT, VAR))]
    g = a.add("g", (8,), region=Region(Role.GRAD, BN_B))
    flag = a.add("flag", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    both = be.capture("check", [op("range_check_finite", span=Span.of(Role.GRAD), flag=flag),
                                op("range_check_finite", span=Span.of(Role.RUNNING_NEXT), flag=flag,
                                   accumulate=True)])
    be.write(g, np.ones(8))
    for t in stats:
        be.write(t, np.ones(4))
    be.launch(both)
    assert be.read(flag).ravel()[0] == 0
    be.write(stats[1], [1.0, np.inf, 1.0, 1.0])  # the running variance overflowed
    be.launch(both)
    assert be.read(flag).ravel()[0] == 1
    be.write(stats[1], np.ones(4))
    be.write(g, [np.nan] + [1.0] * 7)  # finite statistics keep the gradients' flag
    be.launch(both)
    assert be.read(flag).ravel()[0] == 1
    be.write(g, np.ones(8))
    be.launch(both)
    assert be.read(flag).ravel()[0] == 0


def test_accum_metrics_skips_flagged_steps_and_counts_samples():
    a = SimpleArena()
    result = a.add("result", (3,), region=RESULT)
    batch = a.add("batch", (1,), region=SCALAR_FP32)
    flag = a.add("flag", (1,), "int32", SCALAR_INT32)
    accum = a.add("acc", (3,), region=RESULT_SUM)
    samples = a.add("samples", (1,), region=RESULT_SUM)
    be = a.allocate()
    g = be.capture("acc", [op("accum_metrics", result=result, accum=accum, batch=batch, flag=flag, samples=samples)])
    total, n_total = np.zeros(3), 0
    for res, n, skipped in (([2.0, 0.5, 0.75], 128, False), ([np.nan, 0.0, 0.0], 128, True),
                            ([1.0, 1.0, 1.0], 44, False)):
        be.write(result, res)
        be.write(batch, [n])
        be.write(flag, [int(skipped)])
        be.launch(g)
        if not skipped:
            total += np.array(res) * n
            n_total += n
    np.testing.assert_allclose(be.read(accum).ravel(), total, rtol=1e-7)  # finite: the NaN step left no trace
    assert be.read(samples).ravel()[0] == n_total


@pytest.mark.parametrize("accumulate", [False, True])
def test_range_check_finite_hold_reads_nothing(accumulate):
    """Gradient accumulation's hold: set, the span is neither read nor clipped; a setting check sets the flag (every
    flagged op then skips the micro-step), an accumulating one leaves it. Clear, the op is the one without hold."""
    a = SimpleArena()
    g = a.add("g", (2, 1, 1, 5), region=Region(Role.GRAD, FC_W))
    flag, hold = a.add("flag", (1,), "int32", SCALAR_INT32), a.add("hold", (1,), "int32", SCALAR_INT32)
    flag2 = a.add("flag2", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    s = Span.of(Role.GRAD)
    held = be.capture("h", [op("range_check_finite", span=s, flag=flag, hold=hold, clip=0.5, accumulate=accumulate)])
    plain = be.capture("p", [op("range_check_finite", span=s, flag=flag2, clip=0.5, accumulate=accumulate)])
    vals = 3.0 * np.arange(10, dtype=np.float32).reshape(2, 1, 1, 5)
    vals.ravel()[4] = np.nan
    for start in (0, 1):
        be.write(g, vals)
        be.write(hold, [1])
        be.write(flag, [start])
        be.launch(held)
        assert be.read(flag).ravel()[0] == (start if accumulate else 1)
        np.testing.assert_array_equal(be.read(g), vals)  # not clipped
        be.write(hold, [0])
        be.write(flag2, [start])
        be.launch(held)
        after_held = be.read(g).copy()
        be.write(g, vals)
        be.launch(plain)
        assert be.read(flag).ravel()[0] == be.read(flag2).ravel()[0] == 1
        np.testing.assert_array_equal(after_held, be.read(g))
        assert np.abs(np.nan_to_num(after_held)).max() == 0.5


def test_range_check_finite_hold_over_an_empty_span():
    a = SimpleArena()
    a.add("w", (4,), region=Region(Role.PARAM, FC_W))
    flag, hold = a.add("flag", (1,), "int32", SCALAR_INT32), a.add("hold", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    g = be.capture("h", [op("range_check_finite", span=Span.of(Role.GRAD), flag=flag, hold=hold)])
    for h in (1, 0, 1):
        be.write(hold, [h])
        be.launch(g)
        assert be.read(flag).ravel()[0] == h
