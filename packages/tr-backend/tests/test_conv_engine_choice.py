"""How the CUDA convolutions choose their cuDNN engines, without a GPU: the deterministic rule by default and
autotuning only when asked (TR_CUDNN_AUTOTUNE or the backend's setting), the builders' records of which engines
each op's plans use (tr.backend.cuda.conv_engines), and the native side's plan keys and pins, which need no
device. What the engines are on a GPU, and that two fresh processes choose alike, is
tests-integration/test_gpu_determinism.py's."""

from __future__ import annotations

from typing import Any

import pytest
from backend_testkit import SimpleArena, op, record_maps

from tr.backend.cuda import conv_engines
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.conv_engines import ConvEngine, pins_of
from tr.backend.cuda.cudnn import autotune, env_autotune
from tr.backend.cuda.native import native_module
from tr.backend.registry import op_impls
from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.ops import CATALOGUE

native = native_module()
needs_pins = pytest.mark.skipif(native is None or not hasattr(native, "cudnn_conv_op_plans"),
                                reason="tr.backend._native without engine records and pins (an older build)")
FWD_KEY = "fprop:n2:h6:w6:c4:k8:r3:s3:sh2:sw2:ph1:pw1:FP16,FP16,FP16:tf32=0"
WGRAD_KEY = "wgrad:n2:h6:w6:c4:k8:r3:s3:sh2:sw2:ph1:pw1:g2:FP16,FP16,FP32:tf32=1"


class _Native:
    """make_op and the plan lookup of the extension, recorded: ``made`` and ``looked_up`` hold the records they
    were given, ``asked`` each lookup as (device, op, ints, whether dx is given) (record_maps)."""

    def __init__(self, info: str = "cudnn fprop eng0", plans: list[dict] | None = None) -> None:
        self.info, self.plans, self.asked, self.made, self.looked_up = info, plans, [], [], []

    def make_op(self, ctx: Any, record: Any) -> Any:
        self.made.append(record)
        return type("Op", (), {"info": self.info})()

    def cudnn_conv_op_plans(self, device: int, record: Any) -> list[dict]:
        self.looked_up.append(record)
        name, ptrs, ints, _ = record_maps(record)
        self.asked.append((device, name, ints, "dx" in ptrs))
        return list(self.plans or [])


class _Backend:
    arena_ptr = 1 << 40
    use_tf32 = False
    ctx = None
    device = 3

    def __init__(self, layout: Any, native_: Any, conv_autotune: bool | None = None) -> None:
        self.layout, self.native, self.conv_autotune = layout, native_, conv_autotune


def _arena() -> SimpleArena:
    a = SimpleArena()
    for name, shape in (("x", (2, 6, 6, 4)), ("w", (8, 3, 3, 4)), ("y", (2, 3, 3, 8)), ("dy", (2, 3, 3, 8)),
                        ("dw", (8, 3, 3, 4)), ("dx", (2, 6, 6, 4))):
        a.add(name, shape, "fp16")
    return a


def _build(backend: _Backend, call) -> Any:
    return op_impls("cuda")[call.op](CudaBinder(backend, "g", 0, call, CATALOGUE[call.op]))


def _fwd(a: SimpleArena):
    return op("conv_fwd", x=a["x"], w=a["w"], y=a["y"], stride=2, padding=1)


def _bwd(a: SimpleArena):
    return op("conv_bwd", x=a["x"], w=a["w"], dy=a["dy"], dw=a["dw"], dx=a["dx"], stride=2, padding=1)


def test_autotuning_is_an_opt_in(monkeypatch):
    monkeypatch.delenv("TR_CUDNN_AUTOTUNE", raising=False)
    assert env_autotune() is False  # the deterministic rule unless asked
    for on in ("1", " ON ", "true", "yes"):
        monkeypatch.setenv("TR_CUDNN_AUTOTUNE", on)
        assert env_autotune() is True
    for off in ("0", "off", "", "no"):
        monkeypatch.setenv("TR_CUDNN_AUTOTUNE", off)
        assert env_autotune() is False
    monkeypatch.setenv("TR_CUDNN_AUTOTUNE", "fastest")
    with pytest.raises(ConfigError, match="TR_CUDNN_AUTOTUNE='fastest'"):
        env_autotune()


def test_the_backend_setting_wins_over_the_environment(monkeypatch):
    a = _arena()
    monkeypatch.setenv("TR_CUDNN_AUTOTUNE", "1")
    assert autotune(_Backend(a.layout(), None, conv_autotune=False)) is False
    assert autotune(_Backend(a.layout(), None)) is True  # unset: the environment decides
    monkeypatch.delenv("TR_CUDNN_AUTOTUNE")
    assert autotune(_Backend(a.layout(), None, conv_autotune=True)) is True
    assert autotune(object()) is False  # a stand-in without the setting


@pytest.mark.parametrize("setting,want", [(None, 0), (True, 1), (False, 0)])
def test_conv_builders_pass_the_choice_to_the_native_op(monkeypatch, setting, want):
    monkeypatch.delenv("TR_CUDNN_AUTOTUNE", raising=False)
    a = _arena()
    seen: list[dict] = []

    class Recording(_Native):
        def make_op(self, ctx, record):
            seen.append(record_maps(record)[2])
            return super().make_op(ctx, record)

    be = _Backend(a.layout(), Recording(), conv_autotune=setting)
    _build(be, _fwd(a))
    _build(be, _bwd(a))
    assert [s["autotune"] for s in seen] == [want, want]


def test_each_op_s_plans_are_recorded_on_its_backend():
    a = _arena()
    plan = {"key": FWD_KEY, "direction": "fprop", "engine": "eng12_k2=1", "source": "heuristic", "rank": 0,
            "workspace": 256, "timed": 0}
    n = _Native(plans=[plan])
    be = _Backend(a.layout(), n)
    _build(be, _fwd(a))
    _build(be, _fwd(a))  # a second op of the shape: one record
    (device, name, ints, has_dx), _ = n.asked
    assert (device, name, has_dx) == (3, "conv_fwd", False)
    f16 = DType.FP16.code
    assert (ints["x_dt"], ints["w_dt"], ints["y_dt"], ints["kh"], ints["sh"], ints["autotune"]) == (f16, f16, f16,
                                                                                                      3, 2, 0)
    assert conv_engines.used_by(be) == [ConvEngine(**plan, op="conv_fwd")]
    _build(be, _bwd(a))
    assert n.asked[-1][1] == "conv_bwd" and n.asked[-1][3] is True and n.asked[-1][2]["dx_dt"] == f16
    # the lookup gets the record make_op got: one set of fields makes both
    assert [type(r).__name__ for r in n.looked_up] == ["ConvFwdArgs", "ConvFwdArgs", "ConvBwdArgs"]
    assert [r.fields() for r in n.looked_up] == [r.fields() for r in n.made]
    assert conv_engines.used_by(_Backend(a.layout(), n)) == []  # records are per backend


def test_the_record_names_the_input_s_height_and_width_and_the_weight_tensor():
    """Geometry's h and w become ih and iw (w is the weight tensor); a non-square input keeps them apart."""
    a = SimpleArena()
    for name, shape in (("x", (2, 5, 7, 4)), ("w", (6, 3, 3, 2)), ("b", (6,)), ("y", (2, 3, 4, 6))):
        a.add(name, shape, "fp32")
    n = _Native()
    _build(_Backend(a.layout(), n), op("conv_fwd", x=a["x"], w=a["w"], b=a["b"], y=a["y"], stride=2, padding=1,
                                       groups=2))
    (record,) = n.made
    f = record.fields()
    assert (f["n"], f["ih"], f["iw"], f["c"], f["k"], f["p"], f["q"], f["groups"]) == (2, 5, 7, 4, 6, 3, 4, 2)
    assert f["w"].ptr == _Backend.arena_ptr + a["w"].offset and f["w"].dt == DType.FP32.code
    assert f["b"].ptr == _Backend.arena_ptr + a["b"].offset and f["tf32"] is False and f["engine"] in (0, 1, 2)


@pytest.mark.parametrize("info", ["direct conv wgrad, dgrad (cuDNN: no deterministic engine)",
                                  "bias gradient kernels, direct conv wgrad, dgrad (cuDNN: no deterministic engine)"])
def test_an_op_that_ran_the_direct_kernels_is_recorded_as_direct(info):
    """A backward whose dgrad cuDNN could not plan falls back whole: its wgrad plan exists but did not run (with a
    bias too, whose kernels come first in the op's description)."""
    a = _arena()
    plans = [{"key": "wgrad:k", "direction": "wgrad", "engine": "eng3", "source": "heuristic", "rank": 0,
              "workspace": 0, "timed": 0},
             {"key": "dgrad:k", "direction": "dgrad", "engine": "direct", "source": "direct", "rank": -1,
              "workspace": 0, "timed": 0}]
    be = _Backend(a.layout(), _Native(info=info, plans=plans))
    _build(be, _bwd(a))
    assert [(e.key, e.engine, e.source, e.note) for e in conv_engines.used_by(be)] == [
        ("dgrad:k", "direct", "direct", info), ("wgrad:k", "direct", "direct", info)]


def test_an_extension_without_records_records_nothing():
    a = _arena()

    class Old:
        def make_op(self, *args):
            return ("op",)

    be = _Backend(a.layout(), Old())
    assert _build(be, _fwd(a)) == ("op",) and conv_engines.used_by(be) == []


def test_pins_come_from_records_with_one_engine_a_key():
    recs = [ConvEngine("fprop:a", "fprop", "eng1", "timed"), {"key": "wgrad:b", "engine": "direct"}]
    assert pins_of(recs) == {"fprop:a": "eng1", "wgrad:b": "direct"}
    assert pins_of(recs + [{"key": "fprop:a", "engine": "eng1"}]) == pins_of(recs)  # the same engine twice
    with pytest.raises(ConfigError, match="two engines for convolution fprop:a: 'eng1' and 'eng2'"):
        pins_of(recs + [{"key": "fprop:a", "engine": "eng2"}])
    with pytest.raises(ConfigError, match="recorded convolution 1"):
        pins_of([recs[1], {"key": "fprop:a"}])


@pytest.fixture
def no_pins():
    yield
    if native is not None and hasattr(native, "set_cudnn_conv_pins"):
        native.set_cudnn_conv_pins({})


GEO = dict(n=2, ih=6, iw=6, c=4, k=8, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1, p=3, q=3)
F16, F32 = DType.FP16.code, DType.FP32.code


def _record(name: str, dts: dict[str, int], **fields: Any) -> Any:
    """native's ConvFwdArgs / ConvBwdArgs: tensors of the dtypes ``dts`` at made-up addresses (the plans read no
    memory), GEO, groups 1, engine 0 (auto), neither TF32 nor autotuning unless ``fields`` say otherwise."""
    cls = {"conv_fwd": native.ConvFwdArgs, "conv_bwd": native.ConvBwdArgs}[name]
    tensors = {t: native.Dev(4096 * (i + 1), dt) for i, (t, dt) in enumerate(dts.items())}
    return cls(**{**tensors, **GEO, "groups": 1, "engine": 0, "tf32": False, "autotune": False, **fields})


_FWD_DTS = {"x": F16, "w": F16, "y": F16}


@needs_pins
def test_plan_keys_are_machine_independent_and_the_cache_s(no_pins):
    """The key names direction, geometry, dtypes and TF32, nothing of the machine, as the autotuning cache's
    entries did (their keys are this plus the workspace cap): existing caches stay valid."""
    fwd = native.cudnn_conv_op_plans(0, _record("conv_fwd", _FWD_DTS))
    assert [(r["key"], r["engine"], r["source"]) for r in fwd] == [(FWD_KEY, "direct", "direct")]  # no plan here
    dts = {"x": F16, "w": F16, "dy": F16, "dw": F32}
    bwd = native.cudnn_conv_op_plans(0, _record("conv_bwd", {**dts, "dx": F16}, tf32=True, groups=2))
    assert [r["key"] for r in bwd] == ["wgrad:n2:h6:w6:c4:k8:r3:s3:sh2:sw2:ph1:pw1:g2:FP16,FP16,FP32:tf32=1",
                                       "dgrad:n2:h6:w6:c4:k8:r3:s3:sh2:sw2:ph1:pw1:g2:FP16,FP16,FP16:tf32=1"]
    assert len(native.cudnn_conv_op_plans(0, _record("conv_bwd", dts, tf32=True, groups=2))) == 1  # no dx: no dgrad


@needs_pins
def test_the_plans_refuse_what_the_factory_refuses():
    with pytest.raises(ConfigError, match=r"native op conv_fwd: groups \(3\) must divide the input channels \(4\)"):
        native.cudnn_conv_op_plans(0, _record("conv_fwd", _FWD_DTS, groups=3))
    # the engine is a ConvEngine code (TR_CONV's): the record refuses any other number before a plan is asked
    with pytest.raises(ConfigError, match=r"native op conv_bwd: field 'engine' is 3, not a code of ConvEngine "
                                          r"\(0..2\)"):
        _record("conv_bwd", {"x": F16, "w": F16, "dy": F16, "dw": F32}, engine=3)
    with pytest.raises(ConfigError, match="is 4294967296, not a code"):  # checked as int64, never narrowed first
        _record("conv_fwd", _FWD_DTS, engine=1 << 32)
    with pytest.raises(TypeError):  # a record of another op
        native.cudnn_conv_op_plans(0, native.ScaleFwdArgs(x=native.Dev(1, F32), s=native.Dev(2, F32),
                                                          y=native.Dev(3, F32), n=1, hw=1, c=1))


@needs_pins
def test_pins_are_checked_and_replace_each_other(no_pins):
    conv_engines.pin({FWD_KEY: "eng12_k2=1_k3=-1_k14=0"})
    assert conv_engines.pins() == {FWD_KEY: "eng12_k2=1_k3=-1_k14=0"}
    wgrad = WGRAD_KEY
    conv_engines.pin({wgrad: "direct"})
    assert conv_engines.pins() == {wgrad: "direct"}
    # a key that is not conv_plan_key's form would never match a plan: refused, not kept silently
    for key in ("conv:x", "wgrad:x", FWD_KEY.replace(":n2:", ":n02:"), FWD_KEY.replace(":tf32=0", ":tf32=2"),
                FWD_KEY.replace(":h6:", ":h:"), FWD_KEY + ":extra"):
        with pytest.raises(ConfigError, match=f"'{key}' is not a convolution plan key"):
            conv_engines.pin({key: "direct"})
    # the frontend's own spelling only (no leading zeros, knobs sorted by type, each once): else it never matches
    for bad in ("fastest", "eng", "eng12_k2", "eng12_k2=", "eng1x", "eng12_k2=1_", "eng00012_k2=1", "eng12_k02=1",
                "eng12_k2=01", "eng12_k3=1_k2=1", "eng1_k2=1_k2=3", "eng12_k2=-0"):
        with pytest.raises(ConfigError, match=f"'{bad}' is neither 'direct' nor a cuDNN frontend engine name"):
            conv_engines.pin({FWD_KEY: bad})
    assert conv_engines.pins() == {wgrad: "direct"}  # a refused pin changes nothing
    conv_engines.unpin()
    assert conv_engines.pins() == {}


@needs_pins
def test_a_pin_to_the_direct_kernels_is_what_the_op_reports(no_pins):
    conv_engines.pin({FWD_KEY: "direct"})
    assert native.cudnn_conv_op_plans(0, _record("conv_fwd", _FWD_DTS))[0]["source"] == "direct"
    with pytest.raises(ConfigError, match="pinned to the direct kernels but TR_CONV=cudnn"):
        native.cudnn_conv_op_plans(0, _record("conv_fwd", _FWD_DTS, engine=1))
    conv_engines.pin({FWD_KEY: "eng3"})
    with pytest.raises(ConfigError, match="pinned to cuDNN engine 'eng3' but TR_CONV=direct"):
        native.cudnn_conv_op_plans(0, _record("conv_fwd", _FWD_DTS, engine=2))


@needs_pins
def test_the_choice_s_settings_are_reported(monkeypatch):
    monkeypatch.setenv("TR_CUDNN_WORKSPACE_MB", "256")
    s = native.cudnn_conv_settings()
    assert s["workspace_cap_mb"] == 256 and s["candidates"] == 8
    assert (s["frontend"] > 0) == bool(native.cudnn_frontend_built())
