"""The CUDA builders of the range, optimizer, scalar, collective and transfer ops on a machine without a GPU.

Each builder (tr/backend/cuda/ops/range.py, scalar.py, transfer.py) fills its native op's typed record
(tr.backend.cuda.signatures.range, optimizer, scalar, collective, transfer); a fake backend records it as
(name, ptrs, ints, floats) (backend_testkit.record_maps): span addresses and host pointers come through as
pointers, tensors with their dtype codes, optional tensors only where the op reads them. The ops that
test_cuda_builders_on_cpu.py leaves out are checked here, field by field.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from backend_testkit import FC_W, SCALAR_FP32, SCALAR_INT32, RecordingBackend, SimpleArena, op

from tr.backend.cuda.binder import CudaBinder
from tr.backend.registry import op_impls
from tr.core.dtype import DType
from tr.core.errors import TrError
from tr.core.memory import Region, Role, Span
from tr.core.ops import CATALOGUE, OPTIMIZER_RULES

BASE = RecordingBackend.arena_ptr
FP32, INT32 = DType.FP32.code, DType.INT32.code


class _Backend(RecordingBackend):
    """The recording backend with what range_allreduce_mean and h2d_copy read from a CudaBackend."""

    def __init__(self, layout: Any, nccl: Any = None, world_size: int = 1) -> None:
        super().__init__(layout)
        self.nccl, self.world_size = nccl, world_size

    def add_host_site(self, b: CudaBinder, buffer: int, packed: bool = False) -> Any:
        self.packed = packed
        return types.SimpleNamespace(src=(0x7000, 0x9000), label_bytes=b.tensor("labels").numel * 4,
                                     data_bytes=b.tensor("data").numel * 4)


@pytest.fixture(scope="module")
def a() -> SimpleArena:
    arena = SimpleArena()
    for name, role, dt in (("w", Role.PARAM, "fp32"), ("e", Role.EMA, "fp32"), ("h", Role.AMP_COPY, "fp16"),
                           ("g", Role.GRAD, "fp32"), ("m", Role.MOMENT1, "fp32"), ("v", Role.MOMENT2, "fp32")):
        arena.add(name, (300,), dt, Region(role, FC_W))
    for name, n, dt, region in (("lr", 1, "fp32", SCALAR_FP32), ("scale", 1, "fp32", SCALAR_FP32),
                                ("result", 3, "fp32", SCALAR_FP32), ("accum", 3, "fp32", SCALAR_FP32),
                                ("samples", 1, "fp32", SCALAR_FP32), ("ratio", 1, "fp32", SCALAR_FP32),
                                ("flag", 1, "int32", SCALAR_INT32), ("step", 1, "int32", SCALAR_INT32),
                                ("tracker", 1, "int32", SCALAR_INT32), ("batch", 1, "int32", SCALAR_INT32)):
        arena.add(name, (n,), dt, region)
    for name, shape, dt in (("lw", (6, 1, 1, 5), "fp32"), ("lg", (6, 1, 1, 5), "fp32"), ("lm", (6, 1, 1, 5), "fp32"),
                            ("labels", (4,), "int32"), ("data", (4, 2, 2, 3), "fp32")):
        arena.add(name, shape, dt)
    return arena


def build(call: Any, a: SimpleArena, **backend: Any) -> Any:
    be = _Backend(a.layout(), **backend)
    return op_impls("cuda")[call.op](CudaBinder(be, "g", 0, call, CATALOGUE[call.op]))


def span(a: SimpleArena, role: Role) -> tuple[int, int]:
    lo, hi = a.layout().span(Span.of(role))
    return BASE + lo, hi - lo


def addr(a: SimpleArena, name: str) -> int:
    return BASE + a[name].offset


def test_finite_check_passes_clip_and_accumulate(a):
    g, nbytes = span(a, Role.GRAD)
    name, ptrs, ints, floats = build(op("range_check_finite", span=Span.of(Role.GRAD), flag=a["flag"]), a)
    assert name == "range_check_finite" and ptrs == {"span": g, "flag": addr(a, "flag")}
    assert ints == {"n": nbytes // 4, "accumulate": 0, "flag_dt": INT32} and floats == {"clip": 0.0}
    _, _, ints, floats = build(op("range_check_finite", span=Span.of(Role.GRAD), flag=a["flag"], clip=0.5,
                                  accumulate=True), a)
    assert ints["accumulate"] == 1 and floats == {"clip": 0.5}


def test_scale_cast_and_ema_pass_their_spans(a):
    g, nbytes = span(a, Role.GRAD)
    name, ptrs, ints, _ = build(op("range_scale", span=Span.of(Role.GRAD), factor=a["scale"]), a)
    assert name == "range_scale" and ptrs == {"span": g, "factor": addr(a, "scale")}
    assert ints == {"n": nbytes // 4, "factor_dt": FP32}
    w, wbytes = span(a, Role.PARAM)
    h, _ = span(a, Role.AMP_COPY)
    name, ptrs, ints, _ = build(op("range_cast", src=Span.of(Role.PARAM), dst=Span.of(Role.AMP_COPY),
                                   src_dtype=DType.FP32, dst_dtype=DType.FP16), a)
    # the spans go as tensors: the native op dispatches on their dtypes
    assert name == "range_cast" and ptrs == {"src": w, "dst": h}
    assert ints == {"n": wbytes // 4, "src_dt": FP32, "dst_dt": DType.FP16.code}
    e, _ = span(a, Role.EMA)
    name, ptrs, ints, floats = build(op("range_ema", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), decay=0.9), a)
    assert name == "range_ema" and ptrs == {"src": w, "dst": e} and ints == {"n": wbytes // 4}  # no flag
    assert floats == {"decay": pytest.approx(0.9), "warmup": 0.0}  # no step counter: a constant decay


def test_range_copy_is_a_memcpy_or_a_flagged_copy(a):
    w, nbytes = span(a, Role.PARAM)
    e, _ = span(a, Role.EMA)
    assert build(op("range_copy", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA)), a) == \
        ("memcpy", {"src": w, "dst": e}, {"nbytes": nbytes}, {})
    name, ptrs, ints, _ = build(op("range_copy", src=Span.of(Role.PARAM), dst=Span.of(Role.EMA), flag=a["flag"]), a)
    assert name == "copy_unless_flagged" and ptrs == {"src": w, "dst": e, "flag": addr(a, "flag")}
    assert ints == {"nbytes": nbytes, "flag_dt": INT32}
    assert build(op("range_clear", span=Span.of(Role.PARAM)), a) == ("memset", {"dst": w}, {"nbytes": nbytes}, {})


def test_accum_metrics_passes_the_optional_tensors_only_when_given(a):
    call = op("accum_metrics", result=a["result"], accum=a["accum"], batch=a["batch"])
    name, ptrs, ints, _ = build(call, a)
    assert name == "accum_metrics" and set(ptrs) == {"result", "accum", "batch"}
    assert ints == {"n": 3, "result_dt": FP32, "accum_dt": FP32, "batch_dt": INT32}
    _, ptrs, ints, _ = build(op("accum_metrics", result=a["result"], accum=a["accum"], batch=a["batch"],
                                flag=a["flag"], samples=a["samples"]), a)
    assert ptrs["flag"] == addr(a, "flag") and ptrs["samples"] == addr(a, "samples") and ints["samples_dt"] == FP32


@pytest.mark.parametrize("rule", OPTIMIZER_RULES)
def test_the_optimizer_passes_the_moments_its_rule_reads(a, rule):
    adam = rule in ("adam", "adamw")
    call = op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD), m=Span.of(Role.MOMENT1),
              v=Span.of(Role.MOMENT2), lr=a["lr"], flag=a["flag"], grad_scale=a["scale"], step=a["step"], rule=rule,
              beta1=0.8, weight_decay=0.01)
    name, ptrs, ints, floats = build(call, a)
    want = {"w", "g", "lr", "flag", "grad_scale"} | ({"m"} if rule != "sgd" else set()) | \
        ({"v", "step"} if adam else set())
    assert name == "range_optimizer" and set(ptrs) == want
    assert ptrs["w"] == span(a, Role.PARAM)[0] and ptrs["g"] == span(a, Role.GRAD)[0]
    assert ints["rule"] == OPTIMIZER_RULES.index(rule) and ints["n"] == span(a, Role.PARAM)[1] // 4
    assert "w_dt" not in ints and ("step_dt" in ints) == adam  # spans are addresses, step a tensor
    assert floats == {"beta1": pytest.approx(0.8), "beta2": pytest.approx(0.999), "eps": pytest.approx(1e-8),
                      "weight_decay": pytest.approx(0.01), "lr_scale": 1.0}


def test_the_tensor_optimizer_is_the_range_update_over_one_tensor(a):
    """tensor_optimizer (the layer-wise rate decay's per-tensor update) makes the native range_optimizer over the
    tensors' own addresses and element counts, with its lr_scale."""
    call = op("tensor_optimizer", w=a["lw"], g=a["lg"], m=a["lm"], lr=a["lr"], flag=a["flag"], grad_scale=a["scale"],
              rule="momentum", beta1=0.9, weight_decay=0.0, lr_scale=0.25)
    name, ptrs, ints, floats = build(call, a)
    assert name == "range_optimizer" and ints["n"] == 30 and floats["lr_scale"] == 0.25
    assert {k: ptrs[k] for k in ("w", "g", "m")} == {"w": addr(a, "lw"), "g": addr(a, "lg"), "m": addr(a, "lm")}
    assert ints["rule"] == OPTIMIZER_RULES.index("momentum") and "v" not in ptrs


def test_adaptive_clipping_passes_its_units(a):
    """clip_agc: per unit, the rows of w's first dimension (6 of 5 elements here); else the tensor as one unit."""
    call = op("clip_agc", w=a["lw"], g=a["lg"], scale=a["scale"], flag=a["flag"], clip=0.01, eps=1e-3, per_unit=True)
    name, ptrs, ints, floats = build(call, a)
    assert name == "clip_agc" and set(ptrs) == {"w", "g", "scale", "flag"}
    assert (ints["units"], ints["per"]) == (6, 5) and floats == {"clip": 0.01, "eps": 1e-3}
    whole = op("clip_agc", w=a["lw"], g=a["lg"], scale=a["scale"], flag=a["flag"], clip=0.01)
    assert (build(whole, a)[2]["units"], build(whole, a)[2]["per"]) == (1, 30)


def test_lars_passes_nesterov_and_every_coefficient(a):
    call = op("lars_update", w=a["lw"], g=a["lg"], m=a["lm"], lr=a["lr"], flag=a["flag"], grad_scale=a["scale"],
              ratio=a["ratio"], nesterov=True, trust_clip=5.0)
    name, ptrs, ints, floats = build(call, a)
    assert name == "lars_update" and set(ptrs) == {"w", "g", "m", "lr", "flag", "grad_scale", "ratio"}
    assert (ints["n"], ints["nesterov"]) == (30, 1)
    assert floats == {"momentum": pytest.approx(0.9), "weight_decay": 0.0, "trust_coefficient": pytest.approx(0.001),
                      "eps": pytest.approx(1e-8), "trust_clip": 5.0}


def test_allreduce_passes_the_communicator_or_records_nothing_on_one_rank(a):
    g, nbytes = span(a, Role.GRAD)
    call = op("range_allreduce_mean", span=Span.of(Role.GRAD))
    assert build(call, a) is None
    assert build(call, a, nccl=types.SimpleNamespace(handle=0xC0FFEE), world_size=2) == \
        ("nccl_allreduce_mean", {"span": g, "comm": 0xC0FFEE}, {"n": nbytes // 4}, {})
    with pytest.raises(TrError, match="over 2 ranks needs an NCCL communicator"):
        build(call, a, world_size=2)


def test_the_static_loss_scale_passes_no_tracker(a):
    name, ptrs, ints, _ = build(op("loss_scale_update", flag=a["flag"], scale=a["scale"], tracker=a["tracker"],
                                   rule="static"), a)
    assert name == "loss_scale_update" and set(ptrs) == {"flag", "scale"}
    assert (ints["dynamic"], ints["growth_interval"]) == (0, 0)
    _, ptrs, ints, _ = build(op("loss_scale_update", flag=a["flag"], scale=a["scale"], tracker=a["tracker"],
                                rule="dynamic", growth_interval=7), a)
    assert ptrs["tracker"] == addr(a, "tracker") and (ints["dynamic"], ints["growth_interval"]) == (1, 7)


def test_h2d_copy_passes_the_host_sources_and_the_device_tensors(a):
    name, ptrs, ints, _ = build(op("h2d_copy", labels=a["labels"], data=a["data"], buffer=0), a)
    assert name == "h2d_copy"
    assert ptrs == {"src_labels": 0x7000, "src_data": 0x9000, "labels": addr(a, "labels"), "data": addr(a, "data")}
    assert (ints["label_bytes"], ints["data_bytes"]) == (16, 192)


def test_a_packed_h2d_copy_asks_for_a_packed_host_site(a):
    """Progressive resizing's smaller sides: the site reads the buffer's first N x H x W x C elements."""
    be = _Backend(a.layout())
    for packed in (True, False):
        call = op("h2d_copy", labels=a["labels"], data=a["data"], buffer=1, packed=packed)
        op_impls("cuda")["h2d_copy"](CudaBinder(be, "g", 0, call, CATALOGUE["h2d_copy"]))
        assert be.packed is packed
    with pytest.raises(TrError, match="attribute packed must be True or False, got 1"):
        build(op("h2d_copy", labels=a["labels"], data=a["data"], buffer=0, packed=1), a)


def test_the_cuda_host_site_reads_a_packed_batch_from_a_larger_buffer(a):
    import numpy as np

    from tr.backend.cuda.backend import _HostSite
    from tr.core.errors import ShapeError

    data = a["data"]  # [4, 2, 2, 3] FP32 on the device
    labels = np.zeros(4, np.int32)
    big = np.zeros((4, 5, 5, 3), np.float32)  # the final side's buffer
    site = _HostSite("g", 0, data, 16, (0, 0), packed=True)
    assert site.source([(labels, big)]) == (labels.ctypes.data, big.ctypes.data)  # its start: the packed samples
    for bad in (np.zeros((4, 5, 5, 4), np.float32), np.zeros((1, 2, 2, 3), np.float32),
                np.zeros((4, 5, 5, 3, 2), np.float32)[..., 0]):  # other channels, too small, not contiguous
        with pytest.raises(ShapeError, match="packed at"):
            site.source([(labels, bad)])
    with pytest.raises(ShapeError, match=r"first 4 samples of \[B, H, W, C\]"):  # unpacked: the exact shape only
        _HostSite("g", 0, data, 16, (0, 0)).source([(labels, big)])
