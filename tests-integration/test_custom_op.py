"""An op family and a layer kind made outside tr (tr.task.extension), as examples/custom_op.py makes squareplus:
registered for a block, checked against torch op by op and by training, refused with a clear error when a piece
is wrong, gone when the block ends. The GPU test runs the CUDA kernels (CuPy, inside the captured graph) against
the CPU backend.

Tolerances: FP32 ops within 4e-7 relative of torch in float64 (measured 1.3e-7 forward, 2.5e-7 gradient: one and
two ulp), FP16/BF16 within one output ulp of the float64 value of their rounded inputs. Training: the loss within a
relative 2e-6 of torch's (float64) at every step and the final weights within rtol 1e-5, atol 1e-6, as for
layernorm (test_layernorm_vs_torch.py). On the GPU the kernels do the CPU's float32 steps in its order (no fused
multiply-add), so every op output is byte-identical to the CPU backend's.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

import renaissance as R
from tr.backend.binding import bind_call
from tr.backend.cpu.convert import bf16_to_f32
from tr.backend.cuda import extern_kernel as ek
from tr.backend.cuda.binder import CudaBinder
from tr.backend.registry import missing_ops, op_impls
from tr.core.dtype import DType
from tr.core.errors import BackendError, CompileError, ConfigError, ShapeError
from tr.core.ops import CATALOGUE, TR_OPS, OpCall
from tr.graph.archplan import ArchPlan
from tr.graph.blueprint import bn, conv, fc, gap, pretty, relu, seq
from tr.graph.layers import BUILTIN_KINDS, FIRST_KINDS, KINDS, LOSS_KINDS, NODE_KINDS
from tr.task.deep_learning import DeepLearningTask
from tr.task.extension import (
    ExternOp,
    Layer,
    LayerKind,
    OpFamily,
    register_layer_kind,
    register_op_family,
    registered,
    unregister_layer_kind,
    unregister_op_family,
)
from tr.task.feeder import ArrayFeeder
from tr.task.simple import SimpleTask

ROOT = Path(__file__).resolve().parents[1]


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_op_example", ROOT / "examples" / "custom_op.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)  # defines the pieces; registers nothing
    return module


EX = _load_example()


@pytest.fixture
def squareplus():
    """The example's family and kind, registered for one test."""
    kind = EX.SquareplusKind()
    with registered(EX.SQUAREPLUS_OPS, kind):
        yield kind


def _tr_state() -> tuple:
    return (dict(CATALOGUE), dict(op_impls("cpu")), dict(op_impls("cuda")), dict(KINDS), dict(NODE_KINDS),
            tuple(LOSS_KINDS), tuple(FIRST_KINDS))


# --- registration ------------------------------------------------------------------------------------------------

def test_registration_lasts_for_the_block_and_leaves_tr_as_it_was():
    before = _tr_state()
    assert "squareplus_fwd" not in CATALOGUE and "squareplus" not in KINDS  # loading the example registered nothing
    with registered(EX.SQUAREPLUS_OPS, EX.SquareplusKind()):
        assert CATALOGUE["squareplus_bwd"].family == "squareplus" and "squareplus" in KINDS
        assert NODE_KINDS[EX.Squareplus] is KINDS["squareplus"]
        # tr's coverage holds with the family in: it brought its CPU code and its CUDA builders
        assert missing_ops("cpu") == [] and missing_ops("cuda") == []
        assert set(op_impls("cuda")) >= {"squareplus_fwd", "squareplus_bwd"}
        assert "squareplus" not in FIRST_KINDS and "squareplus" not in LOSS_KINDS  # its traits say so
    assert _tr_state() == before
    assert set(CATALOGUE) == TR_OPS and set(KINDS) == BUILTIN_KINDS


def test_a_failure_inside_the_block_still_unregisters():
    before = _tr_state()
    with pytest.raises(RuntimeError, match="boom"), registered(EX.SQUAREPLUS_OPS, EX.SquareplusKind()):
        raise RuntimeError("boom")
    assert _tr_state() == before


def test_a_kind_s_leaf_flows_through_the_blueprint_and_the_passes(squareplus):
    model = seq(fc(16), EX.squareplus(), fc(8), EX.squareplus(b=0.5), fc(3))
    assert repr(model) == "seq(fc(16), squareplus(), fc(8), squareplus(b=0.5), fc(3))"
    assert "  squareplus(b=0.5)," in pretty(model)
    plan = ArchPlan.from_blueprint(model, (1, 1, 12), 3)
    assert [L.describe() for L in plan.layers] == ["fc 16", "squareplus b=4", "fc 8", "squareplus b=0.5", "fc 3",
                                                   "softmax_ce 3"]
    assert dict(plan.layers[3].params) == {"b": 0.5}  # completed from the kind's schema
    # the passes ask its traits: element-wise, so a bn after it normalises the fc's rows (bn1d), a conv's maps (bn2d)
    assert [L.kind for L in ArchPlan.from_blueprint(seq(fc(16), EX.squareplus(), bn(), fc(3)), (1, 1, 12), 3).layers
            ] == ["fc", "squareplus", "bn1d", "fc", "softmax_ce"]
    assert [L.kind for L in ArchPlan.from_blueprint(seq(conv(4, 3, p=1), EX.squareplus(), bn(), gap(), fc(3)),
                                                    (6, 6, 3), 3).layers][:3] == ["conv", "squareplus", "bn2d"]
    with pytest.raises(CompileError, match=r"layer 1 \(squareplus b=-1 at model\[1\]\): squareplus b must be a "
                                           r"finite number > 0, got -1"):
        ArchPlan.from_blueprint(seq(fc(4), EX.squareplus(b=-1), fc(3)), (1, 1, 12), 3)
    with pytest.raises(CompileError, match="the first layer reads the input batch and must be one of"):
        ArchPlan.from_blueprint(seq(EX.squareplus(), fc(3)), (1, 1, 12), 3)  # first_ok is False


def test_without_registration_the_leaf_is_not_a_known_layer():
    with pytest.raises(CompileError, match=r"Squareplus at model\[1\]\): not a known layer"):
        ArchPlan.from_blueprint(seq(fc(4), EX.squareplus(), fc(3)), (1, 1, 12), 3)


def _family(*ops: ExternOp, name: str = "squareplus") -> OpFamily:
    return OpFamily(name, ops)


def _op(entry=EX.FWD, rule=EX.fwd_rule, cpu=EX.fwd_cpu, cuda=EX.fwd_cuda) -> ExternOp:
    return ExternOp(entry, rule, cpu, cuda)


@pytest.mark.parametrize("family, message", [
    ("squareplus", "register_op_family takes an OpFamily, got str"),
    (_family(name="squareplus "), "an op family's name must be a Python identifier"),
    (_family(_op(), name="activation"), "op family 'activation' is one of tr's own"),
    (_family(), "op family 'squareplus': ops must be a non-empty tuple of ExternOp"),
    (_family(EX.FWD), "every op must be an ExternOp, got OpDef"),
    (_family(_op(), name="other"), "op 'squareplus_fwd': its entry's family is 'squareplus'; expected 'other'"),
    (_family(_op(), _op()), "op 'squareplus_fwd' is listed twice"),
    (_family(_op(entry=EX.OpDef("act_fwd", "squareplus", EX.FWD.args))),
     "op 'act_fwd': the catalogue already has an op of that name"),
    (_family(_op(rule=None, cpu=None)), "op 'squareplus_fwd' has no rule and no cpu: every op needs its rule and "
                                        "its CPU implementation"),
    (_family(_op(cpu=lambda b: None)), r"the CPU implementation '.*<lambda>' must take 2 positional arguments"),
    (_family(_op(rule="fwd_rule")), "the rule must be callable, got str"),
    (_family(_op(), _op(entry=EX.BWD, rule=EX.bwd_rule, cpu=EX.bwd_cpu, cuda=None)),
     r"\['squareplus_bwd'\] have no CUDA implementation but \['squareplus_fwd'\] do"),
    (_family(_op(entry=EX.OpDef("squareplus_fwd", "squareplus", (EX.Arg("x", "read"),)))),
     "argument 'x' has role 'read'"),
])
def test_a_wrong_or_missing_piece_is_refused_and_nothing_is_registered(family, message):
    before = _tr_state()
    with pytest.raises(ConfigError, match=message):
        register_op_family(family)
    assert _tr_state() == before


def test_a_name_clash_between_registrations_is_refused(squareplus):
    with pytest.raises(ConfigError, match="op family 'squareplus' is already registered"):
        register_op_family(EX.SQUAREPLUS_OPS)
    with pytest.raises(ConfigError, match=r"kind 'squareplus' is already registered \(SquareplusKind\)"):
        register_layer_kind(EX.SquareplusKind())

    class Another(EX.SquareplusKind):
        kinds = ("squareplus2",)

    with pytest.raises(ConfigError, match="Squareplus is already made by SquareplusKind"):
        register_layer_kind(Another())


@dataclass(frozen=True, repr=False)
class _Leaf(Layer):
    k: int = 1


def test_a_layer_kind_missing_a_piece_is_refused():
    class NoLeaf(EX.SquareplusKind):
        kinds = ("noleaf",)
        nodes = ()

    class Incomplete(LayerKind):  # only what LayerKind has
        kinds = ("incomplete",)
        nodes = (_Leaf,)

    class TrLeaf(EX.SquareplusKind):
        kinds = ("trleaf",)
        nodes = (type(relu()),)

    class ReservedName(EX.SquareplusKind):
        kinds = ("add2_begin",)

    class Untyped(EX.SquareplusKind):
        kinds = ("untyped",)
        nodes = (_Leaf,)
        schema = dict

    before = _tr_state()
    with pytest.raises(ConfigError, match="NoLeaf.nodes is empty"):
        register_layer_kind(NoLeaf())
    with pytest.raises(ConfigError, match=r"Incomplete does not provide \['out_shape', 'forward', 'backward', "
                                          r"'inference', 'expand'\]"):
        register_layer_kind(Incomplete())
    with pytest.raises(ConfigError, match="Act is one of tr's own BluePrint values"):
        register_layer_kind(TrLeaf())
    with pytest.raises(ConfigError, match="kind name 'add2_begin' is reserved by the ArchPlan passes"):
        register_layer_kind(ReservedName())
    with pytest.raises(ConfigError, match="Untyped.schema must be a dataclass"):
        register_layer_kind(Untyped())
    with pytest.raises(ConfigError, match="takes a tr.graph.layers.LayerKind instance, got <class"):
        register_layer_kind(EX.SquareplusKind)  # the class, not an instance
    with pytest.raises(ConfigError, match="registered\\(\\) takes OpFamily and LayerKind values, got str"), \
            registered(EX.SQUAREPLUS_OPS, "squareplus"):
        pass
    assert _tr_state() == before


def test_tr_s_own_pieces_cannot_be_unregistered():
    with pytest.raises(ConfigError, match="op family 'activation' is not registered"):
        unregister_op_family("activation")
    with pytest.raises(ConfigError, match="ActKind is tr's own kind"):
        unregister_layer_kind(KINDS["act"])


# --- the ops against torch ----------------------------------------------------------------------------------------

def _reference(x: np.ndarray, dy: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(y, dx) in float64 by torch autograd; written without cancellation (squareplus of -1e18 is 1e-18)."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    s = torch.sqrt(xt * xt + b)
    y = torch.where(xt >= 0, (xt + s) / 2, b / (2 * (s - xt)))  # (x + s)(s - x) = b
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy()


def _as_f64(a: np.ndarray, dt: DType) -> np.ndarray:
    if dt is DType.BF16:
        out = np.empty(a.shape, np.float32)
        bf16_to_f32(a, out)
        return out.astype(np.float64)
    return a.astype(np.float64)


def _run_ops(device: str, dt: DType, x: np.ndarray, dy: np.ndarray, b: float) -> dict[str, np.ndarray]:
    """squareplus_fwd then squareplus_bwd (dx written over dy: the entry allows it) on ``device``."""
    t = SimpleTask(device)
    for name in ("x", "y", "dy"):
        t.alloc(name, (len(x),), dt)
    t.finalize_memory()
    x_, y_, dy_ = (t.tensor(n) for n in ("x", "y", "dy"))
    t.add_graph("ops", [OpCall.make("squareplus_fwd", {"x": x_, "y": y_}, {"b": b}),
                        OpCall.make("squareplus_bwd", {"x": x_, "dy": dy_, "dx": dy_}, {"b": b})])
    t.compile()
    t.write("x", x)
    t.write("dy", dy)
    t.run("ops")
    return {n: t.read(n).reshape(-1) for n in ("x", "y", "dy")}


def _inputs(n: int = 4096, extremes: bool = True) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = (4 * rng.standard_normal(n)).astype(np.float32)
    if extremes:  # zero, both signs far out (where the naive (x + s)/2 loses every digit), tiny values
        x[:8] = [0.0, -0.0, -1e4, 1e4, -3e4, 3e4, -1e-20, 1e-20]
    return x, rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("dtype, rtol", [(DType.FP32, 4e-7), (DType.FP16, 2.0 ** -10), (DType.BF16, 2.0 ** -7)])
def test_the_ops_match_torch_forward_and_gradient(squareplus, dtype, rtol):
    extremes = dtype is not DType.FP16  # (FP16 holds no 3e4 squared: its far values are tested in FP32 and BF16)
    x, dy = _inputs(extremes=extremes)
    got = _run_ops("cpu", dtype, x, dy, 4.0)
    # the reference starts from the values the tensors hold (the inputs rounded to their dtype)
    y_ref, dx_ref = _reference(_as_f64(got["x"], dtype), _dtype_round(dy, dtype), 4.0)
    np.testing.assert_allclose(_as_f64(got["y"], dtype), y_ref, rtol=rtol, atol=0)
    np.testing.assert_allclose(_as_f64(got["dy"], dtype), dx_ref, rtol=rtol, atol=0)  # dx, written over dy
    if extremes:  # far left y ~ b / (4|x|) and y' ~ b / (4x^2): the naive formula would give 0 for both
        assert _as_f64(got["y"], dtype)[4] == pytest.approx(4 / (4 * 3e4), rel=rtol)


def _dtype_round(a: np.ndarray, dt: DType) -> np.ndarray:
    t = SimpleTask("cpu")
    t.alloc("a", a.shape, dt)
    t.finalize_memory()
    t.compile()
    t.write("a", a)
    return _as_f64(t.read("a").reshape(-1), dt)


def _capture_fwd(y_len: int, b: float) -> None:
    t = SimpleTask("cpu")
    t.alloc("x", (8,))
    t.alloc("y", (y_len,))
    t.finalize_memory()
    t.add_graph("g", [OpCall.make("squareplus_fwd", {"x": t.tensor("x"), "y": t.tensor("y")}, {"b": b})])
    t.compile()


def test_a_bad_call_is_refused_by_the_rule_at_capture(squareplus):
    with pytest.raises(BackendError, match=r"op #0 squareplus_fwd \(no layer\): attribute 'b' must be > 0, got 0.0"):
        _capture_fwd(8, 0.0)
    with pytest.raises(ShapeError, match=r"op #0 squareplus_fwd \(no layer\): y \[1,1,1,4\] must match x \[1,1,1,8\]"):
        _capture_fwd(4, 1.0)


# --- training against torch ------------------------------------------------------------------------------------------

STEPS, BATCH, IN, CLASSES = 20, 16, 20, 5


class _TorchSquareplus(torch.nn.Module):
    def __init__(self, b: float) -> None:
        super().__init__()
        self.b = b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + torch.sqrt(x * x + self.b)) / 2


def _train_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * BATCH, 1, 1, IN)).astype(np.float32)
    return x, (x.reshape(len(x), -1) @ rng.standard_normal((IN, CLASSES))).argmax(1).astype(np.int32)


def test_an_mlp_with_squareplus_trains_like_torch(squareplus):
    x, y = _train_data()
    task = (DeepLearningTask(R.Settings().manual_seed(5).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(fc(32), EX.squareplus(), fc(24), EX.squareplus(b=1.0), fc(CLASSES)))
            .optimizer(R.SGD().momentum(0.9)).scheduler(R.ConstantLR(0.05)).total_epochs(1)
            .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES))).compile()
    ops = {c.op for step in task.program.steps.values() for c in step.calls}
    assert {"squareplus_fwd", "squareplus_bwd"} <= ops
    losses: list[float] = []
    task.on_step(lambda k, result: losses.append(float(result[0])))
    tm = torch.nn.Sequential(torch.nn.Linear(IN, 32), _TorchSquareplus(4.0), torch.nn.Linear(32, 24),
                             _TorchSquareplus(1.0), torch.nn.Linear(24, CLASSES)).double()
    names = {f"L{i}.{p}": getattr(tm[i], {"w": "weight", "b": "bias"}[p]) for i in (0, 2, 4) for p in "wb"}
    start = task.weights()
    with torch.no_grad():
        for key, p in names.items():
            p.copy_(torch.from_numpy(start[key].reshape(p.shape)))
    task.run()
    opt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    for k in range(STEPS):
        opt.zero_grad()
        xb = torch.from_numpy(x[k * BATCH:(k + 1) * BATCH].reshape(BATCH, IN)).double()
        loss = torch.nn.functional.cross_entropy(tm(xb), torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]).long())
        loss.backward()
        opt.step()
        assert losses[k] == pytest.approx(loss.item(), rel=2e-6, abs=1e-7), f"step {k}"
    final = task.weights()
    for key, p in names.items():
        np.testing.assert_allclose(final[key].reshape(p.shape), p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
    assert losses[-1] < losses[0] - 0.3  # it learns


def test_the_example_trains_on_mnist_on_the_cpu():
    """The example as a user runs it: two epochs on 3000 MNIST samples (deterministic for its seed)."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_op.py"), "--device", "cpu",
                          "--epochs", "2", "--train", "3000"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["device"] == "cpu" and result["epochs"] == 2
    assert all(math.isfinite(v) for v in result["train_loss"]) and result["train_loss"][1] < result["train_loss"][0]
    assert result["top1"][1] > 0.8, result


# --- the CUDA path ----------------------------------------------------------------------------------------------

class _Native:
    def make_op(self, ctx: Any, record: Any) -> tuple[str, dict[str, Any]]:
        """The native op's name and its record's fields, instead of the op."""
        return record.op, record.fields()


class _Backend:
    """What a CUDA builder reads from a CudaBackend at capture, and no device: the native op is recorded."""

    arena_ptr, ctx, device, native = 1 << 40, None, 0, _Native()

    def __init__(self, layout: Any) -> None:
        self.layout = layout


def test_the_cuda_builders_launch_the_kernels_with_the_call_s_tensors(squareplus, monkeypatch):
    """The example's CUDA builders without a GPU: what they ask the extension for (CuPy's compile replaced by a
    function object with a handle), and the clear error when CuPy is missing."""
    class Function:
        ptr = 0xF00D

    t = SimpleTask("cpu")
    for name, dt in (("x", "fp16"), ("dy", "bf16"), ("dx", "bf16")):
        t.alloc(name, (3, 1, 1, 700), dt)
    layout = t.finalize_memory()
    x, dy, dx = (t.tensor(n) for n in ("x", "dy", "dx"))
    call = OpCall.make("squareplus_bwd", {"x": x, "dy": dy, "dx": dx}, {"b": 2.0})
    build = op_impls("cuda")["squareplus_bwd"]
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(BackendError, match=r"op #0 squareplus_bwd \(no layer\): .*compiling kernel 'squareplus_bwd' "
                                           r"needs CuPy.*tr-backend\[cupy\]"):
        bind_call(_Backend(layout), "CUDA", CudaBinder, op_impls("cuda"), layout, "g", 0, call)
    monkeypatch.setattr(EX.Kernel, "function", lambda self, device: Function())
    name, f = build(CudaBinder(_Backend(layout), "g", 0, call, CATALOGUE["squareplus_bwd"]))
    base = _Backend.arena_ptr
    assert name == "extern_kernel" and f["function"] == 0xF00D
    # squareplus_bwd(const void* x, const void* dy, void* dx, long long n, float b, int, int, int: dtype codes)
    assert f["param_types"] == [ek.POINTER] * 3 + [ek.INT64, ek.FLOAT32] + [ek.INT32] * 3
    assert f["param_ints"] == [base + x.offset, base + dy.offset, base + dx.offset, 2100, 0, 1, 2, 2]
    assert f["param_floats"] == [0.0] * 4 + [2.0] + [0.0] * 3
    assert (f["grid_x"], f["grid_y"], f["block_x"], f["shared"]) == (9, 1, 256, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.FP32, DType.FP16, DType.BF16])
def test_the_cuda_kernels_give_the_cpu_backend_s_bytes(squareplus, dtype):
    pytest.importorskip("cupy", reason="the CUDA kernels are compiled by CuPy (tr-backend[cupy])")
    x, dy = _inputs(1 << 16, extremes=dtype is not DType.FP16)
    cpu, gpu = _run_ops("cpu", dtype, x, dy, 4.0), _run_ops("cuda", dtype, x, dy, 4.0)
    for name in ("y", "dy"):
        assert np.array_equal(cpu[name].view(np.uint8), gpu[name].view(np.uint8)), name


@pytest.mark.gpu
def test_the_example_trains_on_the_gpu_like_on_the_cpu(squareplus):
    """The captured CUDA step (the kernels are graph nodes) against the CPU backend: FP32 losses within 1e-4
    relative over the steps (cuBLASLt and numpy sum the GEMMs in different orders, as in test_gpu_training.py)."""
    pytest.importorskip("cupy", reason="the CUDA kernels are compiled by CuPy (tr-backend[cupy])")
    (_, rc), (gpu, rg) = EX.train("cpu", 1, 2000), EX.train("cuda", 1, 2000)
    assert gpu.backend.name == "cuda"
    assert rg.history[0].train_loss == pytest.approx(rc.history[0].train_loss, rel=1e-4)
    assert rg.history[0].top1 == pytest.approx(rc.history[0].top1, abs=0.01)
