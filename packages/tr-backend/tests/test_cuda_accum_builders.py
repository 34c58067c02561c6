"""The CUDA builders of gradient accumulation's ops and arguments on a machine without a GPU: the accum family
(tr/backend/cuda/ops/accum.py) and the hold and div arguments of range_check_finite, count_flag, scalar_increment,
loss_scale_update, softmax_ce_bwd and onehot_loss_bwd. A recording backend keeps each typed record as (name, ptrs,
ints, floats) (backend_testkit.record_maps): absent optional tensors are left out, so a call without hold or div
records what it did before them. The same bad call is refused by both backends with one message."""

from __future__ import annotations

from typing import Any

import pytest
from backend_testkit import FC_W, RESULT, SCALAR_FP32, SCALAR_INT32, RecordingBackend, SimpleArena, op

from tr.backend.checks import where
from tr.backend.cuda.binder import CudaBinder
from tr.backend.registry import op_impls
from tr.core.dtype import DType
from tr.core.errors import TrError
from tr.core.memory import Region, Role, Span
from tr.core.ops import CATALOGUE

BASE = RecordingBackend.arena_ptr
FP32, INT32 = DType.FP32.code, DType.INT32.code
ACC = getattr(Role, "GRAD_ACCUM", Role.MOMENT1)  # GRAD's twins' role; a later role stands in until it is declared


@pytest.fixture(scope="module")
def a() -> SimpleArena:
    arena = SimpleArena()
    arena.add("g", (300,), "fp32", Region(Role.GRAD, FC_W))
    arena.add("result", (1, 1, 1, 3), "fp32", RESULT)
    arena.add("acc", (300,), "fp32", Region(ACC, FC_W))
    for name, n in (("div", 1), ("batch", 1), ("scale", 1), ("window", 4), ("wide", 5)):
        arena.add(name, (n,), "fp32", SCALAR_FP32)
    for name in ("pos", "hold", "first", "flag", "count", "step", "tracker"):
        arena.add(name, (1,), "int32", SCALAR_INT32)
    for name, shape, dt in (("probs", (4, 1, 1, 10), "fp32"), ("dl", (4, 1, 1, 10), "fp16"),
                            ("labels", (4,), "int32")):
        arena.add(name, shape, dt)
    return arena


def build(call: Any, a: SimpleArena) -> Any:
    return op_impls("cuda")[call.op](CudaBinder(RecordingBackend(a.layout()), "g", 0, call, CATALOGUE[call.op]))


def refusal(backend: str, call: Any, a: SimpleArena) -> str:
    try:
        if backend == "cuda":
            build(call, a)
        else:
            fresh = SimpleArena()
            for t in a.tensors.values():
                fresh.add(t.name, t.shape, t.dtype, t.region)
            fresh.allocate().capture("g", [call])
    except TrError as e:
        return str(e).removeprefix(where("g", 0, call) + ": ")
    raise AssertionError(f"{backend} accepted {call.op}")


def addr(a: SimpleArena, name: str) -> int:
    return BASE + a[name].offset


def test_accum_window_passes_its_attributes_and_four_scalars(a):
    name, ptrs, ints, floats = build(op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["div"],
                                        accumulate=4, steps=22, batch=4, last_batch=2), a)
    assert name == "accum_window" and ptrs == {n: addr(a, n) for n in ("pos", "hold", "first", "div")}
    assert ints == {"k": 4, "steps": 22, "batch": 4, "last_batch": 2, "pos_dt": INT32, "hold_dt": INT32,
                    "first_dt": INT32, "div_dt": FP32} and floats == {}


def test_range_accumulate_passes_the_span_addresses_and_elements(a):
    lo, hi = a.layout().span(Span.of(Role.GRAD))
    alo, _ = a.layout().span(Span.of(ACC))
    name, ptrs, ints, _ = build(op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=a["hold"],
                                   first=a["first"]), a)
    assert name == "range_accumulate"
    assert ptrs == {"src": BASE + lo, "acc": BASE + alo, "hold": addr(a, "hold"), "first": addr(a, "first")}
    assert ints == {"n": (hi - lo) // 4, "hold_dt": INT32, "first_dt": INT32}


def test_window_result_passes_the_result_s_values(a):
    name, ptrs, ints, _ = build(op("window_result", result=a["result"], window=a["window"], batch=a["batch"],
                                   hold=a["hold"], first=a["first"]), a)
    assert name == "window_result" and set(ptrs) == {"result", "window", "batch", "hold", "first"}
    assert ints["n"] == 3 and ints["batch_dt"] == FP32


def test_hold_reaches_every_gated_native_op_and_is_absent_without_it(a):
    g = Span.of(Role.GRAD)
    hold = addr(a, "hold")
    calls = [
        (op("range_check_finite", span=g, flag=a["flag"], clip=0.5), "range_check_finite"),
        (op("range_check_finite", span=g, flag=a["flag"], accumulate=True), "range_check_finite"),
        (op("count_flag", flag=a["flag"], count=a["count"]), "count_flag"),
        (op("scalar_increment", x=a["step"]), "scalar_increment"),
        (op("loss_scale_update", flag=a["flag"], scale=a["scale"]), "loss_scale_update"),
        (op("loss_scale_update", flag=a["flag"], scale=a["scale"], tracker=a["tracker"], rule="dynamic"),
         "loss_scale_update"),
    ]
    for call, native in calls:
        name, ptrs, ints, floats = build(call, a)
        assert name == native and "hold" not in ptrs and "hold_dt" not in ints
        held = op(call.op, **{k: v for k, v in call.args.items() if v is not None}, hold=a["hold"], **call.attrs)
        name2, ptrs2, ints2, floats2 = build(held, a)
        assert name2 == native and ptrs2 == {**ptrs, "hold": hold} and ints2 == {**ints, "hold_dt": INT32}
        assert floats2 == floats


def test_div_reaches_both_loss_backwards(a):
    base = {"labels": a["labels"], "scale": a["scale"]}
    for call in (op("softmax_ce_bwd", probs=a["probs"], dlogits=a["dl"], **base),
                 op("onehot_loss_bwd", logits=a["probs"], dlogits=a["probs"], loss="mse", **base)):
        _, ptrs, ints, _ = build(call, a)
        assert "div" not in ptrs and (ints["n"], ints["k"]) == (4, 10)
        _, ptrs2, ints2, _ = build(op(call.op, **{k: v for k, v in call.args.items() if v is not None},
                                      div=a["div"], **call.attrs), a)
        assert ptrs2 == {**ptrs, "div": addr(a, "div")} and ints2 == {**ints, "div_dt": FP32}


BAD = [
    ("accumulate 1", lambda a: op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["div"],
                                  accumulate=1, steps=4, batch=2, last_batch=2)),
    ("last batch", lambda a: op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["div"],
                                accumulate=2, steps=4, batch=2, last_batch=3)),
    ("div dtype", lambda a: op("accum_window", pos=a["pos"], hold=a["hold"], first=a["first"], div=a["count"],
                               accumulate=2, steps=4, batch=2, last_batch=2)),
    ("spans", lambda a: op("range_accumulate", src=Span.of(Role.RESULT), acc=Span.of(ACC), hold=a["hold"],
                           first=a["first"])),
    ("first dtype", lambda a: op("range_accumulate", src=Span.of(Role.GRAD), acc=Span.of(ACC), hold=a["hold"],
                                 first=a["div"])),
    ("window size", lambda a: op("window_result", result=a["result"], window=a["wide"], batch=a["batch"],
                                 hold=a["hold"], first=a["first"])),
    ("hold dtype", lambda a: op("count_flag", flag=a["flag"], count=a["count"], hold=a["scale"])),
    ("finite check hold", lambda a: op("range_check_finite", span=Span.of(Role.GRAD), flag=a["flag"],
                                       hold=a["window"])),
    ("div size", lambda a: op("softmax_ce_bwd", probs=a["probs"], labels=a["labels"], scale=a["scale"],
                              dlogits=a["dl"], div=a["window"])),
]


@pytest.mark.parametrize("what, make", BAD, ids=[b[0] for b in BAD])
def test_both_backends_refuse_a_bad_call_with_one_message(a, what, make):
    call = make(a)
    cuda, cpu = refusal("cuda", call, a), refusal("cpu", call, a)
    assert cuda == cpu, (cuda, cpu)
