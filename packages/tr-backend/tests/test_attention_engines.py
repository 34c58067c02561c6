"""Which engine a CUDA attention op runs (tr.backend.cuda.attention_engines), without a GPU: the rule that keeps
tr's kernels (FP32, dropout), the plan key, the deterministic default and its opt-out, the native op each builder
asks for and the record it leaves on the backend. The native plan lookup is stood in for where a test needs one
(a plan is only ever made on a device); the records themselves are the extension's classes, so the tests of the
cuDNN path need an extension built with attention_sdpa (older builds skip them)."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest
from backend_testkit import RecordingBackend, RecordingNative, SimpleArena, op

from tr.backend.cuda import attention_engines as ae
from tr.backend.cuda.backend import CudaBackend
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.native import native_module
from tr.backend.cuda.signatures.attention import ATTENTION_FWD
from tr.backend.cuda.signatures.attention_sdpa import ATTENTION_SDPA_FWD
from tr.backend.registry import op_impls
from tr.backend.rules.attention import AttentionCall, attention_fwd_rules
from tr.core.dtype import DType
from tr.core.errors import BackendError, ShapeError
from tr.core.ops import CATALOGUE

native = native_module()
needs_sdpa_records = pytest.mark.skipif(
    native is None or not hasattr(native, "AttentionSdpaFwdArgs"),
    reason="tr.backend._native predates the attention_sdpa ops: rebuild tr-backend")

N, T, HEADS, DH = 2, 197, 12, 64


def _call(n: int = N, t: int = T, heads: int = HEADS, dh: int = DH, scale: float | None = None,
          stats: bool = True) -> AttentionCall:
    return AttentionCall(n, t, heads * dh, heads, dh ** -0.5 if scale is None else scale, stats)


# --- the plan key -----------------------------------------------------------------------------------------------
def test_the_plan_key_is_the_one_the_native_header_documents():
    assert ae.plan_key(False, DType.FP16, _call(), True) == (
        "fprop:FP16:n2:t197:h12:d64:qkv=453888,64,2304,1:o=151296,64,768,1:stats=1:scale=0x3e000000")
    assert ae.plan_key(True, DType.BF16, _call(), False) == (
        "bprop:BF16:n2:t197:h12:d64:qkv=453888,64,2304,1:o=151296,64,768,1:det=0:scale=0x3e000000")


def test_the_plan_key_holds_everything_the_graph_depends_on():
    """Any change of direction, dtype, size, layout, stats, determinism or scale makes another key (another graph);
    a scale that rounds to the same float32 is the same graph, and the forward has no deterministic option."""
    base = ae.plan_key(False, DType.FP16, _call(), True)
    others = [ae.plan_key(True, DType.FP16, _call(), True), ae.plan_key(False, DType.BF16, _call(), True),
              ae.plan_key(False, DType.FP32, _call(), True), ae.plan_key(False, DType.FP16, _call(n=3), True),
              ae.plan_key(False, DType.FP16, _call(t=17), True), ae.plan_key(False, DType.FP16, _call(heads=6), True),
              ae.plan_key(False, DType.FP16, _call(heads=6, dh=128), True),  # same D, other heads: other strides
              ae.plan_key(False, DType.FP16, _call(stats=False), True),
              ae.plan_key(False, DType.FP16, _call(scale=0.126), True)]
    assert len({base, *others}) == len(others) + 1
    assert ae.plan_key(False, DType.FP16, _call(scale=0.125 + 1e-12), True) == base
    assert ae.plan_key(False, DType.FP16, _call(), False) == base
    assert (ae.plan_key(True, DType.FP16, _call(), True) != ae.plan_key(True, DType.FP16, _call(), False))
    assert ae.plan_key(True, DType.FP16, _call(stats=False), True) == ae.plan_key(True, DType.FP16, _call(), True)
    assert ae.plan_key(False, DType.FP16, _call(scale=1e300), True).endswith(":scale=0x7f800000")  # as C's cast


# --- the rule -----------------------------------------------------------------------------------------------------
def test_fp32_and_dropout_keep_tr_s_kernels_and_say_why():
    assert "FP32 attention runs tr's float32 kernels" in ae.kernel_reason(DType.FP32, 0.0)
    why = ae.kernel_reason(DType.FP16, 0.1)
    assert "dropout p=0.1" in why and "Philox" in why
    assert ae.kernel_reason(DType.FP16, 0.0) is None and ae.kernel_reason(DType.BF16, 0.0) is None
    assert "attention_sdpa=False" in ae.kernel_reason(DType.BF16, 0.0, sdpa=False)


def test_a_backend_without_sdpa_makes_tr_s_kernel_ops_for_16_bit_attention():
    a = _arena("bf16")
    backend = RecordingBackend(a.layout())
    backend.attention_sdpa = False
    fwd, bwd = _calls(a)
    assert _build(backend, fwd)[0] == "attention_fwd" and _build(backend, bwd)[0] == "attention_bwd"
    assert all(e.source == "kernel" and "attention_sdpa=False" in e.note for e in ae.used_by(backend))
    b = CudaBackend.__new__(CudaBackend)  # the setting's default and configure(), no device
    b.attention_sdpa, b.attention_deterministic = True, True
    b.configure(attention_sdpa=False)
    assert b.attention_sdpa is False and b.attention_deterministic is True


def test_the_backward_is_deterministic_unless_the_backend_opts_out():
    assert ae.deterministic(RecordingBackend()) is True  # a stand-in without the setting
    b = CudaBackend.__new__(CudaBackend)  # the setting's default and configure(), no device
    b.attention_deterministic = True
    b.use_tf32, b.conv_autotune = False, None
    b.configure(tf32=True)
    assert ae.deterministic(b) is True
    b.configure(attention_deterministic=False)
    assert ae.deterministic(b) is False and b.use_tf32
    b.configure(attention_deterministic=True)
    assert ae.deterministic(b) is True


def test_from_plan_reads_the_native_record():
    plan = {"key": "bprop:...", "engine": "eng9_k1=2", "note": "", "workspace": 4096, "deterministic": False}
    e = ae.from_plan("attention_bwd", True, plan)
    assert (e.source, e.deterministic, e.workspace) == ("cudnn", False, 4096)
    assert ae.from_plan("attention_fwd", False, {**plan, "deterministic": False}).deterministic  # no such option
    k = ae.from_plan("attention_bwd", True, {**plan, "engine": "kernel", "note": "forward validate: d", "workspace": 0})
    assert (k.source, k.deterministic, k.note) == ("kernel", True, "forward validate: d")


# --- the builders -------------------------------------------------------------------------------------------------
def _arena(dtype: str, n: int = N, t: int = 17, heads: int = 4, dh: int = 16) -> SimpleArena:
    d = heads * dh
    a = SimpleArena()
    for name in ("qkv", "dqkv"):
        a.add(name, (n, 1, t, 3 * d), dtype)
    for name in ("y", "dy"):
        a.add(name, (n, 1, t, d), dtype)
    a.add("stats", (n, 1, heads, t), "fp32")
    return a


def _calls(a: SimpleArena, heads: int = 4, scale: float = 0.25, stats: bool = True) -> tuple[Any, Any]:
    fwd = op("attention_fwd", qkv=a["qkv"], y=a["y"], stats=a["stats"] if stats else None, heads=heads, scale=scale)
    bwd = op("attention_bwd", qkv=a["qkv"], y=a["y"], dy=a["dy"], stats=a["stats"], dqkv=a["dqkv"], heads=heads,
             scale=scale)
    return fwd, bwd


def _build(backend: Any, call: Any) -> Any:
    return op_impls("cuda")[call.op](CudaBinder(backend, "g", 0, call, CATALOGUE[call.op]))


def test_fp32_attention_makes_tr_s_kernel_ops_and_records_why():
    a = _arena("fp32")
    backend = RecordingBackend(a.layout())
    fwd, bwd = _calls(a)
    name, ptrs, ints, floats = _build(backend, fwd)
    assert name == "attention_fwd" and set(ptrs) == {"qkv", "y", "stats"}
    assert (ints["n"], ints["t"], ints["d"], ints["heads"]) == (2, 17, 64, 4) and floats["scale"] == 0.25
    assert _build(backend, bwd)[0] == "attention_bwd"
    records = ae.used_by(backend)
    assert [(e.op, e.engine, e.source) for e in records] == [("attention_bwd", "kernel", "kernel"),
                                                              ("attention_fwd", "kernel", "kernel")]
    r = _call(t=17, heads=4, dh=16, scale=0.25)
    assert [e.key for e in records] == [ae.plan_key(True, DType.FP32, r, True),
                                        ae.plan_key(False, DType.FP32, r, True)]
    assert all("FP32 attention" in e.note and e.deterministic for e in records)


def test_a_bad_call_is_refused_by_the_rule_before_any_engine_is_chosen():
    a = _arena("fp16")
    a.add("stats16", (N, 1, 3, 17), "fp32")
    call = op("attention_fwd", qkv=a["qkv"], y=a["y"], stats=a["stats16"], heads=4, scale=0.25)
    backend = RecordingBackend(a.layout())
    with pytest.raises(ShapeError, match=r"stats \[2,1,3,17\] must be \[2,1,4,17\]"):
        _build(backend, call)
    assert ae.used_by(backend) == []


@needs_sdpa_records
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_attention_asks_for_the_sdpa_ops_deterministic_by_default(dtype):
    a = _arena(dtype)
    backend = RecordingBackend(a.layout())
    fwd, bwd = _calls(a)
    name, ptrs, ints, floats = _build(backend, fwd)
    assert name == "attention_sdpa_fwd" and set(ptrs) == {"qkv", "y", "stats"} and floats["scale"] == 0.25
    assert ints["qkv_dt"] == DType.parse(dtype).code
    name, ptrs, ints, _ = _build(backend, bwd)
    assert name == "attention_sdpa_bwd" and ints["deterministic"] == 1
    assert set(ptrs) == {"qkv", "y", "dy", "stats", "dqkv"}
    assert ae.used_by(backend) == []  # the stand-in extension cannot say what its ops would run
    name, _, _, _ = _build(backend, _calls(a, stats=False)[0])
    assert name == "attention_sdpa_fwd"


@needs_sdpa_records
def test_the_non_deterministic_backward_is_an_opt_in_that_is_logged(caplog):
    a = _arena("fp16")
    backend = RecordingBackend(a.layout())
    backend.attention_deterministic = False
    with caplog.at_level(logging.WARNING, logger="tr.backend.cuda.attention_engines"):
        for _ in range(2):
            assert _build(backend, _calls(a)[1])[2]["deterministic"] == 0
    warnings = [r for r in caplog.records if "non-deterministic" in r.getMessage()]
    assert len(warnings) == 1  # once a backend


@needs_sdpa_records
def test_dropout_keeps_tr_s_kernels_for_16_bit_attention_too():
    a = _arena("fp16")
    backend = RecordingBackend(a.layout())
    fwd = _calls(a)[0]
    b = CudaBinder(backend, "g", 0, fwd, CATALOGUE[fwd.op])
    r = attention_fwd_rules(b)
    fields = dict(qkv=b.dev("qkv"), y=b.dev("y"), stats=b.dev("stats"), seed=None, key=None, n=r.n, t=r.t, d=r.d,
                  heads=r.heads, scale=r.scale, dropout=0.1)
    assert ae.build(b, r, (ATTENTION_FWD, fields), ATTENTION_SDPA_FWD, dropout=0.1)[0] == "attention_fwd"
    (e,) = ae.used_by(backend)
    assert e.source == "kernel" and "dropout p=0.1" in e.note


class _PlanningNative(RecordingNative):
    """A stand-in extension that answers the plan lookup as the real one does after making an op."""

    def __init__(self, engine: str = "eng3_k2=1", key: str | None = None) -> None:
        self.engine, self.key, self.asked = engine, key, []

    def attention_sdpa_plan(self, device: int, record: Any) -> dict[str, Any]:
        f = record.fields()
        backward = "dqkv" in f
        r = AttentionCall(f["n"], f["t"], f["d"], f["heads"], f["scale"], f.get("stats") is not None)
        det = bool(f.get("deterministic", True))
        self.asked.append((device, record.op))
        dtype = next(d for d in DType if d.code == f["qkv"].dt)
        return {"key": self.key or ae.plan_key(backward, dtype, r, det),
                "engine": self.engine, "note": "" if self.engine != "kernel" else "backward validate: s_q = s_kv = 1",
                "workspace": 1 << 20 if self.engine != "kernel" else 0, "deterministic": det and backward}


@needs_sdpa_records
def test_the_record_is_the_extension_s_plan():
    a = _arena("bf16")
    backend = RecordingBackend(a.layout())
    backend.native = _PlanningNative()
    fwd, bwd = _calls(a)
    _build(backend, fwd)
    _build(backend, bwd)
    assert backend.native.asked == [(0, "attention_sdpa_fwd"), (0, "attention_sdpa_bwd")]
    bwd_rec, fwd_rec = ae.used_by(backend)
    assert (bwd_rec.op, bwd_rec.engine, bwd_rec.source, bwd_rec.deterministic) == (
        "attention_bwd", "eng3_k2=1", "cudnn", True)
    assert fwd_rec.workspace == 1 << 20 and fwd_rec.key.startswith("fprop:BF16:n2:t17:h4:d16:")
    fallback = RecordingBackend(a.layout())
    fallback.native = _PlanningNative(engine="kernel")
    _build(fallback, bwd)
    (e,) = ae.used_by(fallback)
    assert (e.source, e.note) == ("kernel", "backward validate: s_q = s_kv = 1")


@needs_sdpa_records
def test_a_native_key_other_than_python_s_is_an_error():
    a = _arena("fp16")
    backend = RecordingBackend(a.layout())
    backend.native = _PlanningNative(key="fprop:FP16:something-else")
    with pytest.raises(BackendError, match="attention_sdpa_fwd is 'fprop:FP16:something-else', expected 'fprop:FP16"):
        _build(backend, _calls(a)[0])


def test_scale_bits_follow_float32_rounding():
    r = _call(scale=1 / math.sqrt(48))
    bits = ae.plan_key(False, DType.FP16, r, True).rsplit("0x", 1)[1]
    assert int(bits, 16) == int(np.float32(1 / math.sqrt(48)).view(np.uint32))
