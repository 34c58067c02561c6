"""Op-by-op comparison of two backends running one compiled plan: which op's outputs part, fed identical inputs.

A whole-network comparison (first-step gradients, losses) says only THAT two backends disagree: rounding and
relu/pool-tie flips compound over dozens of layers, so a wrong kernel and honest rounding look alike. Here every
op of a training step runs on the reference backend (the CPU) in plan order, and before each op the test backend
(CUDA) receives the reference's bytes of every tensor the op reads; the op then runs alone on both (each captured
as a one-op graph) and its outputs are compared. A logic error shows at its op, at its own size, whatever came
before it.

    python tools/testkit/op_diff.py --model vgg16_bn --resolution 32 --batch 4 [--amp] [--json PATH]

prints one row per op (index, op, layer, the worst output's norm-relative error, its max |difference|) and the
first op over the bound; tests-integration/test_gpu_op_by_op.py asserts the bound for every op of the example
networks. Both tasks must compile to the same layout (checked: a plan is a function of the settings, not the
backend). Only numpy and tr: the module is imported by tests (the root conftest puts tools/testkit on sys.path).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tr.core.dtype import DType
from tr.core.memory import Role, Span
from tr.core.ops import OpCall, op_def
from tr.core.shape import Shape
from tr.tensor.dtensor import DTensor

# Norm-relative error of an output above which an op counts as parting (FP32 outputs; FP16/BF16 ones get the
# looser bound: one rounding of a 16-bit float is 4.9e-4 relative, and a reduction of rounded terms more).
# Integer outputs (labels, masks, counters) must be equal.
BOUND = {DType.FP32: 1e-4, DType.FP16: 5e-3, DType.BF16: 4e-2, DType.INT8: 0.0, DType.INT32: 0.0,
         DType.UINT8: 0.0}


@dataclass
class OutputDiff:
    arg: str
    tensor: str
    dtype: str
    rel: float  # ||test - ref|| / max(||ref||, a floor: _compare_outputs), in float64
    max_abs: float
    ref_norm: float
    mismatched: int  # elements off by more than 10x the bound times the tensor's rms (integers: any difference)
    first_bad: list[int] = field(default_factory=list)  # the first such element's index (the tensor's shape)


@dataclass
class OpDiff:
    index: int
    op: str
    layer: int
    label: str
    outputs: list[OutputDiff]

    @property
    def worst(self) -> OutputDiff | None:
        return max(self.outputs, key=lambda o: o.rel, default=None)

    def over(self, bound: dict[DType, float] = BOUND) -> list[OutputDiff]:
        return [o for o in self.outputs if o.rel > bound[DType(o.dtype)]]


def step_calls(program, step: str = "train_last_a") -> list[OpCall]:
    """A training step's calls in a valid serial order (the order the CPU backend runs its branches)."""
    return list(program.step(step).calls)


def epoch_calls(program, step: str = "train_last_a") -> list[OpCall]:
    """A training epoch's first step as the loop runs it: the epoch's cast of the FP16 working weights (AMP;
    without it they are zero and every convolution compares zeros), then the step."""
    return list(program.step("epoch_begin").calls) + step_calls(program, step)


def first_backward(calls: Sequence[OpCall]) -> int:
    """The index of the first backward op (the loss's): the forward is everything before it."""
    return next((i for i, c in enumerate(calls) if c.op.endswith("_bwd")), len(calls))


def backward_from_test_forward(ref_task, test_task, calls: Sequence[OpCall]) -> dict[str, tuple[np.ndarray, ...]]:
    """The calls' forward on the test backend, its whole arena then copied into the reference's, then the backward
    on both, each on its own results: {gradient tensor name: (reference's, test's)}. Both backwards see the same
    forward, so a relu or pool decision that rounding tipped the other way in one forward (a pre-activation
    within 1e-6 of zero) no longer parts them; what differs is the backward's own arithmetic."""
    check_same_plan(ref_task.program, test_task.program)
    rb, tb, prog = ref_task.backend, test_task.backend, ref_task.program
    k = first_backward(calls)
    for i, call in enumerate(calls[:k]):
        tb.launch(tb.capture(f"fwd_{i}", [call]))
    tb.synchronize()
    for t in prog.tensors:
        if t.allocated:
            rb.write(t, tb.read(t))
    for i, call in enumerate(calls[k:]):
        rb.launch(rb.capture(f"bwd_{i}_ref", [call]))
        tb.launch(tb.capture(f"bwd_{i}_test", [call]))
    rb.synchronize()
    tb.synchronize()
    return {t.name: (rb.read(t), tb.read(t)) for t in prog.tensors
            if t.allocated and t.region.role in (Role.GRAD, Role.GRAD_FP16)}


def _span_tensor(program, span: Span) -> DTensor | None:
    """All bytes of a span as one UINT8 tensor (to copy a range op's input whole); None when it selects no bytes."""
    lo, hi = program.layout.span(span)
    if hi == lo:
        return None
    first = next(r for r in program.layout.regions if span.matches(r))
    return DTensor(-1, repr(span), first, Shape(1, 1, 1, hi - lo), DType.UINT8, hi - lo, lo)


def _span_members(program, span: Span) -> list[DTensor]:
    return [t for t in program.tensors if t.allocated and span.matches(t.region)]


def _args(program, call: OpCall, roles: Sequence[str], expand: bool) -> list[tuple[str, DTensor]]:
    out: list[tuple[str, DTensor]] = []
    for a in op_def(call.op).args:
        v = call.args.get(a.name)
        if v is None or a.role not in roles:
            continue
        if isinstance(v, Span):
            if expand:
                out.extend((a.name, t) for t in _span_members(program, v))
            elif (whole := _span_tensor(program, v)) is not None:
                out.append((a.name, whole))
        else:
            out.append((a.name, v))
    return out


def check_same_plan(ref_program, test_program) -> None:
    """Both tasks compiled the same plan: every tensor at the same offset with the same shape and dtype."""
    if ref_program.layout.total_bytes != test_program.layout.total_bytes:
        raise AssertionError(f"arenas differ: {ref_program.layout.total_bytes} B against "
                             f"{test_program.layout.total_bytes} B")
    a = [(t.name, t.offset, t.shape.dims, t.dtype) for t in ref_program.tensors]
    b = [(t.name, t.offset, t.shape.dims, t.dtype) for t in test_program.tensors]
    for x, y in zip(a, b):
        if x != y:
            raise AssertionError(f"the plans differ at tensor {x} against {y}")
    if len(a) != len(b):
        raise AssertionError(f"the plans hold {len(a)} and {len(b)} tensors")


def _stats(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(difference, ||ref||, rms of ref) in float64; NaN against NaN and an infinity against the same infinity
    are no difference (both sides overflowed alike), any other non-finite difference an infinite one."""
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    alike = (np.isnan(r) & np.isnan(g)) | (np.isinf(r) & (r == g))
    with np.errstate(invalid="ignore"):
        d = np.where(alike, 0.0, g - r)
    d = np.where(np.isfinite(d) | alike, d, np.inf)
    finite = np.where(np.isfinite(r), r, 0.0)
    norm = float(np.linalg.norm(finite))
    return d, norm, norm / max(1.0, float(np.sqrt(r.size)))


def _compare_outputs(pairs: list[tuple[str, DTensor, np.ndarray, np.ndarray]]) -> list[OutputDiff]:
    """Each output's error relative to max(its norm, 1e-2 * sqrt(its size) * the largest rms of the op's float
    outputs): the floor keeps an output that is zero in exact arithmetic (a training-mode BN's beta gradient
    ahead of another BN) from measuring pure rounding as a 100 % error."""
    stats = [(arg, t, *_stats(ref, got)) for arg, t, ref, got in pairs]
    rms = max((s[4] for s in stats if s[1].dtype in (DType.FP32, DType.FP16, DType.BF16)), default=0.0)
    out: list[OutputDiff] = []
    for arg, t, d, norm, _ in stats:
        dn = float(np.linalg.norm(d)) if np.all(np.isfinite(d)) else float("inf")
        floor = 1e-2 * float(np.sqrt(d.size)) * rms if t.dtype in BOUND and BOUND[t.dtype] > 0 else 0.0
        rel = dn / max(norm, floor, 1e-30) if dn > 0 else 0.0
        scale = max(norm / max(1.0, float(np.sqrt(d.size))), 1e-30)
        bad = np.abs(d) > BOUND[t.dtype] * scale * 10 if BOUND[t.dtype] > 0 else d != 0
        first = [int(i) for i in np.unravel_index(int(np.argmax(bad)), d.shape)] if bad.any() else []
        out.append(OutputDiff(arg, t.name, t.dtype.value, rel, float(np.max(np.abs(d), initial=0.0)), norm,
                              int(bad.sum()), first))
    return out


def _values(backend, t: DTensor) -> np.ndarray:
    """``t``'s elements as numbers (a BF16 tensor reads as its bits: widened to FP32 here)."""
    a = backend.read(t)
    return (a.astype(np.uint32) << 16).view(np.float32) if t.dtype is DType.BF16 else a


def compare(ref_task, test_task, calls: Sequence[OpCall]) -> list[OpDiff]:
    """Run ``calls`` op by op on both tasks' backends, the test backend fed the reference's inputs before each op;
    one OpDiff per call. The reference's arena advances through the step as usual; the test's is overwritten with
    the reference's inputs op by op, so after the call it holds the test backend's outputs of the last op only."""
    check_same_plan(ref_task.program, test_task.program)
    rb, tb, prog = ref_task.backend, test_task.backend, ref_task.program
    out: list[OpDiff] = []
    for i, call in enumerate(calls):
        for _, t in _args(prog, call, ("in", "inout"), expand=False):
            tb.write(t, rb.read(t))
        g_ref = rb.capture(f"op_diff_{i}_ref", [call])
        g_test = tb.capture(f"op_diff_{i}_test", [call])
        rb.launch(g_ref)
        rb.synchronize()
        tb.launch(g_test)
        tb.synchronize()
        diffs = _compare_outputs([(arg, t, _values(rb, t), _values(tb, t))
                                  for arg, t in _args(prog, call, ("out", "inout"), expand=True)])
        out.append(OpDiff(i, call.op, call.layer, call.label, diffs))
    return out


def table(diffs: Sequence[OpDiff]) -> str:
    rows = [f"{'#':>3} {'op':<22} {'layer':>5}  {'worst output':<28} {'rel':>10} {'max|d|':>10}  over"]
    for d in diffs:
        w = d.worst
        flag = "  <-- " + ", ".join(o.tensor for o in d.over()) if d.over() else ""
        rows.append(f"{d.index:>3} {d.op:<22} {d.layer:>5}  {(w.tensor if w else '-'):<28} "
                    f"{(w.rel if w else 0.0):>10.2e} {(w.max_abs if w else 0.0):>10.2e}{flag}")
    return "\n".join(rows)


def first_over(diffs: Sequence[OpDiff]) -> OpDiff | None:
    return next((d for d in diffs if d.over()), None)


def fill_batch(task, classes: int, seed: int = 5) -> None:
    """A seeded batch and labels (in [0, classes)) in the task's input buffer A (the step's first reads)."""
    rng = np.random.default_rng(seed)
    prog, be = task.program, task.backend
    x, y = prog.named["data_a"], prog.named["labels_a"]
    v = rng.standard_normal(x.shape.dims)
    be.write(x, v.astype(np.float32) if x.dtype is DType.BF16 else v.astype(x.dtype.np_dtype))  # write() rounds BF16
    be.write(y, rng.integers(0, classes, y.shape.dims).astype(y.dtype.np_dtype))


def example(model: str, classes: int = 10):
    """examples/models.py's ``model`` with a last fc of ``classes`` outputs."""
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from examples.models import MODELS
    from tr.core.errors import ConfigError
    from tr.graph.blueprint import FC, BluePrint, fc, seq

    layers = MODELS[model].root.layers
    if not isinstance(layers[-1], FC):
        raise ConfigError(f"examples/models.py's {model} no longer ends in an fc: {layers[-1]!r}; expected an fc "
                          f"head to replace with one of {classes} outputs")
    return BluePrint(seq(*layers[:-1], fc(classes)), name=model, num_classes=classes)


def build_task(blueprint, device: str, amp: bool | str, resolution: int, batch: int, classes: int = 10,
               steps: int = 1, compiled: bool = True):
    """A one-epoch task of ``blueprint`` on ``device`` over ``steps`` seeded batches (SGD with Nesterov momentum
    and weight decay at a constant 1e-4, seed 11, AMP's dynamic loss scale from 1024: the settings
    test_gpu_cnn_training.py and benchmarks/cross_machine.py use), compiled unless ``compiled`` is False (to
    compile it under engine pins)."""
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.core.settings import Settings
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.feeder import ArrayFeeder

    dt = {False: "float32", True: "float16", "bf16": "bfloat16"}[amp]  # the feeder stages (rounds) to this
    rng = np.random.default_rng(5)
    x = rng.standard_normal((steps * batch, resolution, resolution, 3)).astype(np.float32)
    y = rng.integers(0, classes, steps * batch).astype(np.int32)
    feeder = ArrayFeeder((x, y), None, batch, shuffle=False, num_classes=classes, dtype=dt)
    s = Settings().manual_seed(11).global_batch_size(batch).amp(amp)
    if amp is True:  # FP16's dynamic loss scale from 1024 (BF16 has none)
        s.loss_scaling("dynamic", init=1024.0)
    task = (DeepLearningTask(s).device(device).quiet().model(blueprint)
            .optimizer(SGD().momentum(0.9).nesterov(True).weight_decay(1e-4))
            .scheduler(ConstantLR().base_lr(1e-4)).total_epochs(1).data(feeder))
    if compiled:
        task.compile()
    return task


def task_pair(blueprint, resolution: int, batch: int, amp: bool | str, classes: int = 10, ref: str = "cpu",
              test: str = "cuda") -> tuple:
    """``blueprint`` compiled alike on the ``ref`` and the ``test`` device, the reference's batch filled."""
    a = build_task(blueprint, ref, amp, resolution, batch, classes)
    b = build_task(blueprint, test, amp, resolution, batch, classes)
    fill_batch(a, classes)
    return a, b


def run(blueprint, resolution: int, batch: int, amp: bool | str, classes: int = 10, ref: str = "cpu",
        test: str = "cuda") -> list[OpDiff]:
    """Compile ``blueprint`` on both devices, fill a batch, and compare its training step op by op."""
    a, b = task_pair(blueprint, resolution, batch, amp, classes, ref, test)
    return compare(a, b, epoch_calls(a.program))


def arguments(description: str) -> argparse.ArgumentParser:
    """The command line of this tool and forward_flips.py: the example network, its input, AMP and the devices
    (``run``'s arguments)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="vgg16_bn")
    p.add_argument("--resolution", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--amp", action="store_true", help="FP16 AMP")
    p.add_argument("--bf16", action="store_true", help="BF16 AMP")
    p.add_argument("--ref", default="cpu")
    p.add_argument("--test", default="cuda")
    return p


def amp_of(a: argparse.Namespace) -> bool | str:
    """The parsed --amp / --bf16 as build_task's ``amp`` (False, True for FP16, "bf16")."""
    if a.amp and a.bf16:
        raise SystemExit("--amp (FP16) and --bf16 exclude each other")
    return "bf16" if a.bf16 else a.amp


def main(argv: Sequence[str] | None = None) -> int:
    p = arguments(__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    diffs = run(example(a.model), a.resolution, a.batch, amp_of(a), ref=a.ref, test=a.test)
    print(table(diffs))
    bad = first_over(diffs)
    print("first op over the bound:", "none" if bad is None else f"#{bad.index} {bad.op} (layer {bad.layer}): "
          + ", ".join(f"{o.tensor} rel {o.rel:.3e}, {o.mismatched} elements, first at {o.first_bad}"
                      for o in bad.over()))
    if a.json:
        rows: list[dict[str, Any]] = [{**asdict(d), "worst": asdict(d.worst) if d.worst else None} for d in diffs]
        Path(a.json).write_text(json.dumps({"model": a.model, "resolution": a.resolution, "batch": a.batch,
                                            "amp": amp_of(a), "ops": rows}, indent=1))
    return 0 if bad is None else 1


if __name__ == "__main__":
    sys.exit(main())
