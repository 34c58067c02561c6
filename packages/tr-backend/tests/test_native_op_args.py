"""The typed native op interface (tr.backend.cuda.signatures -> tools/gen_native_ops.py -> the C++ records and
their nanobind classes): the generated files are current, every native op of this build is declared once, and
a builder's misspelt, missing or mistyped field is an error naming the op and the field when the builder runs,
before any device is touched. Runs on any machine: the records are bound in builds without CUDA too."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from backend_testkit import RecordingBackend, SimpleArena, op

from tr.backend.checks import where
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.native import require_native
from tr.backend.cuda.signatures import FAMILIES, all_ops
from tr.backend.cuda.signatures._types import f64, flag, i64, i64s, native_op, tensor
from tr.backend.cuda.signatures.scale import SCALE_FWD
from tr.core.errors import ConfigError
from tr.core.ops import CATALOGUE

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "gen_native_ops.py"
CSRC = ROOT / "packages" / "tr-backend" / "csrc"


def _generator():
    spec = importlib.util.spec_from_file_location("tr_gen_native_ops", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()
native = require_native()


def test_the_generated_files_are_what_the_declarations_make():
    assert GEN.stale() == [], "run python tools/gen_native_ops.py"
    assert GEN.orphans() == []
    assert GEN.generated() == GEN.generated()  # deterministic


def test_every_family_declares_its_ops_and_the_extension_binds_exactly_them():
    ops = all_ops()
    assert {family for family, _ in ops} == set(FAMILIES)  # no family left on the string-keyed interface
    names = [o.name for _, o in ops]
    assert len(names) == len(set(names))
    assert tuple(names) == native.NATIVE_OPS  # the extension was built from these declarations
    for _, o in ops:
        cls = getattr(native, o.cls)
        assert cls.op == o.name and cls.field_types == {f.name: f.type for f in o.fields}


def test_no_factory_reads_a_field_by_name_any_more():
    """The string maps are gone from the native side: no OpArgs, no args.i("..."), no register_factory."""
    for path in sorted((CSRC / "ops").glob("*.c*")) + sorted((CSRC / "ops").glob("*.h*")):
        text = path.read_text()
        assert not re.search(r"\bOpArgs\b|args\.(i|f|ptr|dt|has)\(\"|register_factory", text), path.name


def _binder(call) -> CudaBinder:
    return CudaBinder(RecordingBackend(), "g", 0, call, CATALOGUE[call.op])


@pytest.fixture()
def scale_call():
    a = SimpleArena()
    a.add("x", (2, 3, 3, 8), "fp16")
    a.add("s", (2, 1, 1, 8), "fp16")
    a.add("y", (2, 3, 3, 8), "fp16")
    return op("scale_fwd", x=a["x"], s=a["s"], y=a["y"])


def test_a_builder_s_record_carries_what_it_passed(scale_call):
    b = _binder(scale_call)
    name, ptrs, ints, floats = b.make(SCALE_FWD, x=b.dev("x"), s=b.dev("s"), y=b.dev("y"), n=2, hw=9, c=8)
    assert name == "scale_fwd" and set(ptrs) == {"x", "s", "y"} and floats == {}
    assert ints == {"x_dt": 1, "s_dt": 1, "y_dt": 1, "n": 2, "hw": 9, "c": 8}
    assert ptrs["y"] == RecordingBackend.arena_ptr + scale_call.args["y"].offset


@pytest.mark.parametrize("fields,message", [
    (dict(n=2, hw=9, cc=8), r"native op scale_fwd has no field 'cc' \(did you mean 'c'\?\)"),
    (dict(n=2, hw=9), r"native op scale_fwd: field 'c' \(i64: channels\) is missing"),
    (dict(n=2.0, hw=9, c=8), r"field 'n' takes an int, got 2.0 \(float\)"),
    (dict(n=True, hw=9, c=8), r"field 'n' takes an int, got True \(bool\)"),
])
def test_a_wrong_field_fails_when_the_builder_runs_naming_the_op_and_the_field(scale_call, fields, message):
    b = _binder(scale_call)
    with pytest.raises(ConfigError, match=message) as e:
        b.make(SCALE_FWD, x=b.dev("x"), s=b.dev("s"), y=b.dev("y"), **fields)
    assert str(e.value).startswith(where("g", 0, scale_call) + ": ")  # where in the plan, as every capture error


def test_a_tensor_field_takes_a_dev_not_an_address(scale_call):
    b = _binder(scale_call)
    with pytest.raises(ConfigError, match=r"field 'x' takes a Dev, got \d+ \(int\)"):
        b.make(SCALE_FWD, x=b.ptr("x"), s=b.dev("s"), y=b.dev("y"), n=2, hw=9, c=8)


def test_the_python_check_covers_every_field_kind():
    sig = native_op("probe", "a test record", tensor("dx", "optional", optional=True), flag("relu", "a flag"),
                    f64("eps", "a float"), i64("k", "an int", default=3), i64s("dims", "ints"))
    sig.check({"relu": False, "eps": 1, "dims": [1, 2]})  # an int is a float; k has a default; dx is optional
    for bad, what in [({"relu": 1, "eps": 1.0, "dims": []}, "True or False"),
                      ({"relu": True, "eps": "1", "dims": []}, "a float"),
                      ({"relu": True, "eps": 1.0, "dims": [1.5]}, "a sequence of ints")]:
        with pytest.raises(ConfigError, match=f"takes {what}"):
            sig.check(bad)


def test_the_extension_checks_the_record_again():
    """What the Python check would never send, the record refuses too: a null tensor, an unknown dtype code,
    a positional or missing field."""
    dev = native.Dev(1 << 20, 1)
    with pytest.raises(ConfigError, match="the address is null"):
        native.Dev(0, 1)
    with pytest.raises(ConfigError, match="dtype code 9"):
        native.Dev(1 << 20, 9)
    with pytest.raises(TypeError):
        native.ScaleFwdArgs(dev, dev, dev, 2, 9, 8)  # keyword-only
    with pytest.raises(TypeError):
        native.ScaleFwdArgs(x=dev, s=dev, y=dev, n=2, hw=9)
    rec = native.ScaleBwdArgs(x=dev, s=dev, dy=dev, ds=dev, n=2, hw=9, c=8)
    assert rec.dx is None and rec.fields()["dx"] is None and rec.x == dev
    assert repr(rec).startswith("ScaleBwdArgs(x=Dev(0x100000, FP16), s=")


def test_every_code_crosses_the_boundary_as_its_generated_enum():
    """The optimizer rule, the one-hot loss, the convolution engine and extern_kernel's parameter types are codes of
    codes.hpp's enums (generated from tr.core.ops): the record refuses a number outside the enum, naming it."""
    from tr.core.ops import CONV_ENGINE_CODES, EXTERN_PARAM_CODES, ONEHOT_LOSS_CODES, OPTIMIZER_RULE_CODES

    sigs = {op.name: op for _, op in all_ops()}
    assert sigs["range_optimizer"].field("rule").type == "opt_rule"
    assert {sigs[n].field("loss").type for n in ("onehot_loss_fwd", "onehot_loss_bwd", "onehot_loss_inf")} == \
        {"onehot_loss"}
    assert {sigs[n].field("engine").type for n in ("conv_fwd", "conv_bwd")} == {"conv_engine"}
    assert sigs["extern_kernel"].field("param_types").type == "extern_params"
    dev = native.Dev(1 << 20, 0)
    common = dict(w=1 << 20, g=1 << 21, lr=dev, flag=dev, grad_scale=dev, n=4, beta1=0.9, beta2=0.999, eps=1e-8,
                  weight_decay=0.0)
    rec = native.RangeOptimizerArgs(rule=OPTIMIZER_RULE_CODES["adamw"], **common)
    assert rec.rule == 4 and rec.fields()["rule"] == 4
    with pytest.raises(ConfigError, match=r"field 'rule' is 5, not a code of OptRule \(0..4\)"):
        native.RangeOptimizerArgs(rule=len(OPTIMIZER_RULE_CODES), **common)
    with pytest.raises(ConfigError, match=r"field 'loss' is 2, not a code of OneHotLoss \(0..1\)"):
        native.OnehotLossFwdArgs(logits=dev, labels=dev, result=dev, n=2, k=3, loss=len(ONEHOT_LOSS_CODES),
                                 label_smoothing=0.0)
    kernel = dict(function=1 << 20, grid_x=1, grid_y=1, grid_z=1, block_x=32, block_y=1, block_z=1, shared=0)
    codes = [EXTERN_PARAM_CODES[k] for k in ("pointer", "int32", "float64")]
    rec = native.ExternKernelArgs(param_types=codes, param_ints=[1, 2, 0], param_floats=[0.0, 0.0, 1.5], **kernel)
    assert rec.param_types == codes == [0, 1, 4]
    with pytest.raises(ConfigError, match=r"field 'param_types' entry 1 is 5, not a code of ExternParam \(0..4\)"):
        native.ExternKernelArgs(param_types=[0, 5], param_ints=[1, 2], param_floats=[0.0, 0.0], **kernel)
    assert CONV_ENGINE_CODES == {"auto": 0, "cudnn": 1, "direct": 2}  # TR_CONV's values, in its registry's order
