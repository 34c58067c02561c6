"""Gradient accumulation's ops (family accum): accum_window's table over two epochs (S = 22 micro-steps, windows of
k = 4, micro-batches of 4 samples, the last of 2), range_accumulate's sum against numpy's left fold g0 + g1 + ...
in float32 (bitwise), window_result's mean of a window's results weighted by their samples, and the rules'
errors. The ops run driven by accum_window in the same graph, as a training step runs them."""

import numpy as np
import pytest
from backend_testkit import (
    BN_B,
    FC_B,
    FC_W,
    INT32,
    RESULT,
    SCALAR_FP32,
    SCALAR_INT32,
    TEMP_FP32,
    SimpleArena,
    op,
)

from tr.core.errors import BackendError, ShapeError
from tr.core.memory import Region, Role, Span

# GRAD's twins live in Role.GRAD_ACCUM (tr.core.memory); a later role of the same groups stands in where the role
# is not declared yet: the ops see bytes, the twin check is tr.graph's memory plan's
ACC = getattr(Role, "GRAD_ACCUM", Role.MOMENT1)


def _window_arena(*first: tuple, after: tuple = ()) -> SimpleArena:
    """An arena of ``first`` (name, shape, dtype, region; in layout order), accum_window's scalars, ``after``."""
    a = SimpleArena()
    for t in first:
        a.add(*t)
    a.add("div", (1,), "fp32", SCALAR_FP32)
    for name in ("pos", "hold", "first"):
        a.add(name, (1,), "int32", SCALAR_INT32)
    for t in after:
        a.add(*t)
    return a


def _window(a: SimpleArena, k: int, steps: int, m: int, last: int):
    return op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["div"], accumulate=k,
              steps=steps, batch=m, last_batch=last)


def _state(be, a) -> tuple[int, int, float, int]:
    return (int(be.read(a["hold"]).ravel()[0]), int(be.read(a["first"]).ravel()[0]),
            float(be.read(a["div"]).ravel()[0]), int(be.read(a["pos"]).ravel()[0]))


def test_accum_window_table_over_two_epochs():
    a = _window_arena()
    be = a.allocate()
    g = be.capture("w", [_window(a, 4, 22, 4, 2)])
    # windows [0, 4), [4, 8), ..., [16, 20) of 16 samples, then [20, 22): one micro-batch of 4 and the last of 2
    hold = [1, 1, 1, 0] * 5 + [1, 0]
    first = [1, 0, 0, 0] * 5 + [1, 0]
    div = [16.0] * 20 + [6.0, 6.0]
    nxt = list(range(1, 22)) + [0]
    seen = []
    for _ in range(2):
        for _p in range(22):
            be.launch(g)
            seen.append(_state(be, a))
    assert seen == list(zip(hold, first, div, nxt)) * 2


@pytest.mark.parametrize("steps,last,expect", [
    (21, 3, [(0, 1, 3.0, 0)]),  # a last window of one micro-batch: it opens and closes at once
    (24, 4, [(1, 1, 16.0, 21), (1, 0, 16.0, 22), (1, 0, 16.0, 23), (0, 0, 16.0, 0)]),  # S a multiple of k
    (23, 1, [(1, 1, 9.0, 21), (1, 0, 9.0, 22), (0, 0, 9.0, 0)]),
])
def test_accum_window_last_window(steps, last, expect):
    a = _window_arena()
    be = a.allocate()
    g = be.capture("w", [_window(a, 4, steps, 4, last)])
    be.write(a["pos"], [20])
    seen = []
    for _ in expect:
        be.launch(g)
        seen.append(_state(be, a))
    assert seen == expect


def _grad_arena() -> SimpleArena:
    shapes = sorted(((FC_W, (6, 1, 1, 7)), (FC_B, (6,)), (BN_B, (33,))), key=lambda gs: gs[0].sort_key())
    return _window_arena(*((f"{tag}_{group.name}", shape, "fp32", Region(role, group))
                           for role, tag in ((Role.GRAD, "g"), (ACC, "acc")) for group, shape in shapes))


def test_range_accumulate_is_the_left_fold_of_the_micro_gradients():
    """k = 3 over S = 7 micro-steps: windows of 3, 3 and 1; at each window's close GRAD holds fl(fl(g0 + g1) + g2)
    (numpy's float32 left fold, bit for bit) and the held micro-steps leave their own gradient in GRAD."""
    a = _grad_arena()
    be = a.allocate()
    names = [n for n in a.tensors if n.startswith("g_")]
    step = be.capture("step", [_window(a, 3, 7, 8, 5),
                               op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=a["hold"],
                                  first=a["first"])])
    rng = np.random.default_rng(0)
    for window in (3, 3, 1):
        grads = []
        for j in range(window):
            grads.append({n: (rng.standard_normal(a[n].shape.dims) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
                          for n in names})
            for n in names:
                be.write(a[n], grads[-1][n])
            be.launch(step)
            closing = j == window - 1
            assert int(be.read(a["hold"]).ravel()[0]) == int(not closing)
            for n in names:
                fold = grads[0][n]
                for gj in grads[1:]:
                    fold = fold + gj[n]  # float32 + float32: one rounding, in the window's order
                if closing:
                    np.testing.assert_array_equal(be.read(a[n]), fold, err_msg=f"{n}, window of {window}")
                else:
                    np.testing.assert_array_equal(be.read(a[n]), grads[-1][n])  # GRAD kept as written
                    np.testing.assert_array_equal(be.read(a[n.replace("g_", "acc_", 1)]), fold)


def test_range_accumulate_on_a_window_of_one_leaves_both_spans():
    a = _grad_arena()
    be = a.allocate()
    g = [n for n in a.tensors if n.startswith("g_")]
    for n in a.tensors:
        if n.startswith(("g_", "acc_")):
            be.write(a[n], np.full(a[n].shape.dims, 3.0 if n.startswith("g_") else 7.0))
    be.write(a["hold"], [0])
    be.write(a["first"], [1])
    be.launch(be.capture("acc", [op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=a["hold"],
                                    first=a["first"])]))
    for n in g:
        assert (be.read(a[n]) == 3.0).all() and (be.read(a[n.replace("g_", "acc_", 1)]) == 7.0).all()


def _result_arena(after: tuple = ()) -> SimpleArena:
    return _window_arena(("result", (1, 1, 1, 3), "fp32", RESULT), ("batch", (1,), "fp32", SCALAR_FP32),
                         ("window", (1, 1, 1, 4), "fp32", SCALAR_FP32), after=after)


def test_window_result_is_the_window_s_sample_weighted_mean():
    """k = 3, S = 5 (micro-batches of 8, the last of 5): at each close the result row is the window's mean,
    float32 sums of result * batch divided by the float32 sum of the batches; the held steps keep their own row."""
    a = _result_arena()
    be = a.allocate()
    g = be.capture("r", [_window(a, 3, 5, 8, 5),
                         op("window_result", result=a["result"], window=a["window"], batch=a["batch"],
                            hold=a["hold"], first=a["first"])])
    rng = np.random.default_rng(1)
    be.write(a["window"], [np.nan] * 4)  # garbage from an earlier epoch: the first micro-step clears it
    for _epoch in range(2):
        for sizes in ((8, 8, 8), (8, 5)):
            sums, samples, rows = np.zeros(3, np.float32), np.float32(0), []
            for j, m in enumerate(sizes):
                row = rng.uniform(0, 3, 3).astype(np.float32)
                rows.append((row, m))
                be.write(a["result"], row)
                be.write(a["batch"], [m])
                be.launch(g)
                sums = sums + row * np.float32(m)
                samples = samples + np.float32(m)
                window = be.read(a["window"]).ravel()
                np.testing.assert_array_equal(window, np.append(sums, samples))
                out = be.read(a["result"]).ravel()
                if j < len(sizes) - 1:
                    np.testing.assert_array_equal(out, row)
                else:
                    np.testing.assert_array_equal(out, sums / samples)
                    mean = sum(r.astype(np.float64) * m for r, m in rows) / sum(m for _, m in rows)
                    np.testing.assert_allclose(out, mean, rtol=1e-6)


def test_rules_name_the_bad_argument():
    a = _result_arena((("wide", (1, 1, 1, 5), "fp32", TEMP_FP32), ("pair", (2,), "int32", Region(Role.TEMP, INT32)),
                                ("one", (1,), "int32", Region(Role.TEMP, INT32))))
    be = a.allocate()

    def refused(call, match, exc=BackendError):
        with pytest.raises(exc, match=match):
            be.capture("g", [call])

    refused(_window(a, 1, 10, 4, 4), "'accumulate' must be an integer >= 2, got 1")
    refused(_window(a, 2, 10, 4, 5), r"'last_batch' = 5 must be in \[1, batch = 4\]")
    refused(_window(a, 2, 0, 4, 4), "'steps' must be an integer >= 1, got 0")
    refused(_window(a, 4096, 10, 4096, 1), "does not fit FP32's exact integers")
    refused(op("accum_window", pos=a["pair"], hold=a["hold"], first=a["first"], div=a["div"], accumulate=2,
               steps=4, batch=2, last_batch=2), "argument 'pos' .* has 2 elements; expected 1", ShapeError)
    refused(op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["one"], accumulate=2,
               steps=4, batch=2, last_batch=2), "argument 'div' has dtype INT32; expected FP32")
    refused(op("window_result", result=a["result"], window=a["wide"], batch=a["batch"], hold=a["hold"],
               first=a["first"]), "argument 'window' .* has 5 elements; expected 4", ShapeError)
    refused(op("window_result", result=a["result"], window=a["window"], batch=a["batch"], hold=a["div"],
               first=a["first"]), "argument 'hold' has dtype FP32; expected INT32")


def test_range_accumulate_refuses_spans_of_two_sizes():
    a = _window_arena(("g", (64,), "fp32", Region(Role.GRAD, FC_W)), ("acc", (200,), "fp32", Region(ACC, FC_W)))
    be = a.allocate()
    lo, hi = a.layout().span(Span.of(Role.GRAD))
    alo, ahi = a.layout().span(Span.of(ACC))
    with pytest.raises(ShapeError, match=f"span src has {(hi - lo) // 4} FP32 elements but acc has "
                                         f"{(ahi - alo) // 4}; expected equal ranges"):
        be.capture("g", [op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=a["hold"],
                            first=a["first"])])
