"""A fingerprint of what tr computes, to prove that a refactor changed no arithmetic: two trees compared byte for byte.

For each configuration below, the JSON holds
- the compiled plan: the arena size, every tensor (name, offset, slot bytes, shape, dtype, allocated) in plan order,
  every step the task captures by name, as its branches (stream, the branches it waits for, its op calls: op,
  layer, each argument a tensor by name/offset/bytes/shape/dtype or a span by its byte range, attributes with
  enums by name; never a call's label or part, which are for printouts), the variants and the initialisation
  specs;
- the weights right after compile() (each initialised tensor's SHA-256);
- unless --no-train: every state tensor of a checkpoint taken after two CPU epochs (master weights, FP16 copies,
  EMA, BN statistics, optimizer moments, counters, loss scale, dropout seed) and each epoch's metrics, bit-exact.

The configurations (CONFIGS) are small, so all of them train in seconds on a CPU: the README MLP on MNIST digits,
a ResNet with AMP, AdamW and EMA, VGG-style with dropout and LARS, MobileNet-style with AMP, a resident input
augmented on the device, biased convs with Adam and clipping, a residual with the BCE loss and SEMA.

Only API that outlives a change of the memory layout's internals is read (Program.tensors/layout/inits and its
steps, DTensor's name/offset/slot_bytes/shape/dtype, layout.span, backend.read, task.save): no region, no span
class. The steps are Program.steps where the compiler names them; a tree whose Program still holds per-GraphId
buckets (Program.graphs) has its steps joined here exactly as its executor joined them (old_tree_steps), so the
two trees compare step by step.

    python tools/plan_identity.py --json OUT.json [--no-train]
    python tools/plan_identity.py --compare A.json B.json

--compare exits 0 when the fingerprints are equal, 1 naming each differing configuration's count of differences
per section (layout, ops, initial weights, metrics, trained state) and the first ones of each, 2 when a file is
not a fingerprint. It imports nothing of tr, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import hashlib
import json
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 2  # 2: the plan's ops by step (plan.steps), not by (variant, GraphId) bucket
ROOT = Path(__file__).resolve().parents[1]
MNIST_DIRS = (ROOT / "data" / "mnist", ROOT.parent / "shared" / "data" / "mnist")
# sizes that leave a partial last batch (128 a batch), so the *_last plan variants run too
TRAIN_SAMPLES, VAL_SAMPLES, EPOCHS, SEED = 2000, 500, 2, 11


# --- canonical descriptions ---------------------------------------------------------------------------------
def sha(a: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and C-order bytes."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str} {a.shape}|".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def canonical(v: Any) -> Any:
    """A JSON value that is a function of ``v``'s contents only (no addresses, no set or dict order); floats as
    repr strings (exact, and NaN/inf survive JSON), enums by member name."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, np.ndarray):
        return {"array": sha(v)}
    if isinstance(v, Mapping):
        return {str(k): canonical(v[k]) for k in sorted(v, key=str)}
    if isinstance(v, (list, tuple)):
        return [canonical(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((canonical(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {type(v).__name__: {f.name: canonical(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    r = repr(v)
    if " at 0x" in r:
        raise TypeError(f"no deterministic description of a {type(v).__name__} ({r}); expected a number, string, "
                        f"enum, sequence, mapping, dataclass or array")
    return r


def describe_tensor(t: Any) -> list[Any]:
    return [t.name, t.offset, t.slot_bytes, list(t.shape.dims), t.dtype.name, bool(t.allocated)]


def describe_arg(program: Any, v: Any, tensor_type: type) -> Any:
    """A tensor argument by what it is (not its region); a span argument by the bytes it covers (an empty one as
    "empty": where an empty range starts is no arithmetic)."""
    if v is None:
        return None
    if isinstance(v, tensor_type):
        return [v.name, v.offset, v.nbytes, list(v.shape.dims), v.dtype.name]
    lo, hi = program.layout.span(v)
    return ["span", lo, hi] if hi > lo else ["span", "empty"]


# a step as its branches, each (stream, indices of the branches it waits for, op calls)
Branches = list[tuple[Any, tuple[int, ...], list[Any]]]


def describe_call(program: Any, c: Any, tensor_type: type) -> dict[str, Any]:
    """An op call by what it computes: its op, layer, attributes and arguments (not its label or part)."""
    return {"op": c.op, "layer": c.layer, "attrs": canonical(dict(c.attrs)),
            "args": {k: describe_arg(program, c.args[k], tensor_type) for k in sorted(c.args)}}


def old_tree_steps(program: Any) -> dict[str, Branches]:
    """The steps a tree without Program.steps captured (tr.task.executor.capture_steps and tr.task.ema.capture_ema,
    whose ema_start and sema_switch copies the task built itself),
    by the names the compiler gives them, each as its (stream, after, calls) branches: the training steps as the
    executor's branches (a branch with no calls dropped unless it is on the first branch's stream), every other step
    one chain on COMP_1."""
    from tr.core.graph_id import GraphId as G
    from tr.core.phase import StreamKind
    from tr.task.executor import branches, gather, train_step_branches, val_step_order

    def chain(variant: str, order: tuple[Any, ...]) -> Branches:
        return [(StreamKind.COMP_1, (), gather(program, variant, order))]

    steps: dict[str, Branches] = {}
    for b, ab in ((0, "a"), (1, "b")):
        for name, variant, last in ((f"train_{ab}", "train", False), (f"train_last_{ab}", "train_last", True)):
            steps[name] = [(x.stream, tuple(x.after), list(x.calls))
                           for x in branches(program, variant, train_step_branches(b, last))]
        steps[f"val_{ab}"] = chain("val", val_step_order(b, False))
        steps[f"val_last_{ab}"] = chain("val_last", val_step_order(b, True))
        steps[f"transfer_{ab}"] = chain("train", ((G.TRANSFER_A, G.TRANSFER_B)[b],))
        steps[f"val_transfer_{ab}"] = chain("val", ((G.RESIDENT_VAL_A, G.RESIDENT_VAL_B)[b],))
    for name, variant, gid in (("clear_metrics", "train", G.CLEAR_METRICS),
                               ("epoch_begin", "train", G.CAST_MAIN_FP32_TO_FP16),
                               ("epoch_order", "train", G.RESIDENT_TRAIN_BEGIN),
                               ("val_begin", "val", G.RESIDENT_VAL_BEGIN),
                               ("epoch_end", "train", G.UPDATE_BN_INF_PARAMS),
                               ("val_end", "val", G.VAL_RESULT_COMM)):
        steps[name] = chain(variant, (gid,))
    if any(gid == G.INF_EMA_A and calls for (_, gid), calls in program.graphs.items()):
        steps["ema_prepare"] = chain("val", (G.CAST_EMA_FP32_TO_FP16,))
        from tr.task.ema import EMA_WEIGHTS, MASTER_WEIGHTS, _copy  # (the old tree's, built by the task)
        steps["ema_start"] = [(StreamKind.COMP_1, (), [_copy(MASTER_WEIGHTS, EMA_WEIGHTS, "")])]
        steps["sema_switch"] = [(StreamKind.COMP_1, (), [_copy(EMA_WEIGHTS, MASTER_WEIGHTS, "")])]
        for b, ab in ((0, "a"), (1, "b")):
            steps[f"val_ema_{ab}"] = chain("val", val_step_order(b, False, True))
            steps[f"val_ema_last_{ab}"] = chain("val_last", val_step_order(b, True, True))
    return steps


def plan_steps(program: Any) -> dict[str, Branches]:
    """Every step by name as its (stream, after, calls) branches: Program.steps, or old_tree_steps."""
    if hasattr(program, "steps"):
        return {name: [(b.stream, tuple(b.after), list(b.calls)) for b in step.branches]
                for name, step in program.steps.items()}
    return old_tree_steps(program)


def describe_plan(program: Any) -> dict[str, Any]:
    """The plan; a step with no calls at all is left out (whether a tree keeps empty steps is no arithmetic), but
    a step's branches are kept as given, empty ones too (where one waits is part of the step)."""
    from tr.tensor.dtensor import DTensor

    steps = {}
    for name, parts in plan_steps(program).items():
        if any(calls for _, _, calls in parts):
            steps[name] = [{"stream": canonical(stream), "after": list(after),
                            "calls": [describe_call(program, c, DTensor) for c in calls]}
                           for stream, after, calls in parts]
    return {
        "arena_bytes": program.layout.total_bytes,
        "tensors": [describe_tensor(t) for t in program.tensors],
        "steps": {k: steps[k] for k in sorted(steps)},
        "variants": {k: [v.batch, v.resolution, v.train] for k, v in sorted(program.variants.items())},
        "inits": [[i.tensor.name, i.kind, i.fan_in, i.fan_out, repr(float(i.value)), i.layer] for i in program.inits],
    }


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def init_hashes(task: Any) -> dict[str, str]:
    """Every initialised tensor's SHA-256 (its bytes in the arena now), by name."""
    inits = task.program.inits
    return dict(zip(_unique([i.tensor.name for i in inits]), (sha(task.backend.read(i.tensor)) for i in inits)))


_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a .safetensors file (the format: an 8-byte header length, a JSON header, the data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=_ST_DTYPES[h["dtype"]]).reshape(h["shape"])
    return out


def state_hashes(task: Any) -> dict[str, str]:
    """Every tensor a checkpoint of ``task`` holds (task.save: the weights, FP16 copies, EMA, BN statistics,
    optimizer moments, counters, loss scale), by its checkpoint name."""
    with tempfile.TemporaryDirectory(prefix="plan_identity_") as d:
        task.save(Path(d) / "ck")
        state = read_safetensors(Path(d) / "ck" / "state.safetensors")
    return {k: sha(state[k]) for k in sorted(state)}


def history(result: Any) -> list[dict[str, Any]]:
    """Each epoch's numbers (not its timings)."""
    keys = ("epoch", "train_loss", "lr", "val_loss", "top1", "top5", "skipped_steps", "ema_top1", "ema_top5")
    return [{k: canonical(getattr(r, k)) for k in keys} for r in result.history]


# --- the configurations ----------------------------------------------------------------------------------------
def mnist_dir() -> Path:
    from tr.core.errors import DataError

    for d in MNIST_DIRS:
        if any(d.glob("train-images-idx3-ubyte*")):
            return d
    raise DataError(f"no MNIST idx files in {' or '.join(map(str, MNIST_DIRS))}; expected the repository's "
                    f"data/mnist")


def mnist_subset(train: int = TRAIN_SAMPLES, val: int = VAL_SAMPLES) -> Any:
    """The first ``train`` training and ``val`` test digits of the bundled MNIST, as a tr.data data set."""
    from tr.data import MNIST, ArrayDataset

    m = MNIST(mnist_dir())
    tr_, va = m.load("train"), m.load("val")
    return ArrayDataset((tr_.images[:train], tr_.labels[:train]), (va.images[:val], va.labels[:val]), num_classes=10)


def synthetic(n: int, res: int, classes: int, dtype: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, res, res, 3)).astype(np.float32).astype(dtype)
    return x, rng.integers(0, classes, n).astype(np.int32)


def array_feeder(batch: int, res: int, classes: int, amp: bool, train: int, val: int) -> Any:
    from tr.task.feeder import ArrayFeeder

    dt = np.float16 if amp else np.float32
    return ArrayFeeder(synthetic(train, res, classes, dt, 5), synthetic(val, res, classes, dt, 6) if val else None,
                       batch, seed=SEED, num_classes=classes, dtype=dt)


def settings(batch: int, amp: bool) -> Any:
    from tr.core.settings import Settings

    s = Settings().manual_seed(SEED).global_batch_size(batch).amp(amp)
    return s.loss_scaling("dynamic", init=1024.0) if amp else s


def task(blueprint: Any, s: Any, feeder: Any, optimizer: Any, scheduler: Any, epochs: int = EPOCHS) -> Any:
    from tr.task.deep_learning import DeepLearningTask

    return (DeepLearningTask(s).device("cpu").quiet().model(blueprint).optimizer(optimizer).scheduler(scheduler)
            .total_epochs(epochs).data(feeder))


def mlp_mnist() -> Any:
    """The README's MLP on real MNIST digits through tr.data's pipeline (MNIST normalisation), FP32, SGD momentum."""
    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import CosineAnnealingLR
    from tr.core.norm import NormMode
    from tr.data.settings import PreprocessorSettings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.pipeline import PipelineFeeder

    pre = PreprocessorSettings().dataset(mnist_subset()).normalization(NormMode.MNIST).preprocess_workers(2)
    model = seq(fc(1024, True), relu(), fc(512, True), relu(), fc(256, True), relu(), fc(10, True))
    return (task(model, settings(128, False), PipelineFeeder(pre, 128, SEED),
                 SGD().momentum(0.9).weight_decay(1e-4), CosineAnnealingLR(0.05).warmup(1))
            .loss(CrossEntropyLoss().label_smoothing(0.1)))


def resnet_amp() -> Any:
    """A two-stage ResNet (cbr stem, basic blocks, the second strided with a projection, GAP, fc) at 32px on
    synthetic data: AMP with dynamic loss scaling, AdamW, an EMA validated each epoch."""
    from tr.algo.optimizer import AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.graph.blueprint import block, cbr, fc, gap, seq

    model = seq(cbr(16, 3, 1, 1), block("basic", 16), block("basic", 32, stride=2), gap(), fc(4))
    return (task(model, settings(16, True), array_feeder(16, 32, 4, True, 64, 32), AdamW().weight_decay(1e-2),
                 ConstantLR().base_lr(1e-3)).ema(0.99))


def vgg_lars() -> Any:
    """VGG-style convs with max pools, a dropout head and LARS."""
    from tr.algo.optimizer import LARS
    from tr.algo.scheduler import ConstantLR
    from tr.graph.blueprint import cbr, dropout, fc, flatten, maxpool, relu, seq

    model = seq(cbr(16, 3, 1, 1), cbr(16, 3, 1, 1), maxpool(2, 2), cbr(32, 3, 1, 1), maxpool(2, 2), flatten(),
                fc(64), relu(), dropout(0.5), fc(10))
    return task(model, settings(8, False), array_feeder(8, 32, 10, False, 16, 8), LARS().momentum(0.9),
                ConstantLR().base_lr(0.1))


def mobilenet_amp() -> Any:
    """MobileNet-style: strided stem conv + BN + relu6, a depthwise conv, inverted residuals (one with SE and
    silu), a dropout head, AMP, SGD with Nesterov."""
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import ConstantLR
    from tr.graph.blueprint import bn, conv, dropout, fc, gap, mbconv, relu6, seq

    model = seq(conv(16, 3, 2, 1), bn(), relu6(), conv(16, 3, 1, 1, groups=16), bn(), relu6(), mbconv(1, 16),
                mbconv(4, 24, 2), mbconv(4, 24, 1, se=0.25, act="silu"), conv(64, 1), bn(), relu6(), gap(),
                dropout(0.2), fc(10))
    return task(model, settings(8, True), array_feeder(8, 32, 10, True, 16, 8),
                SGD().momentum(0.9).nesterov(True).weight_decay(4e-5), ConstantLR().base_lr(0.05))


def resident_mnist() -> Any:
    """MNIST digits resident in the arena, augmented on the device (tr.graph.resident)."""
    from tr.algo.optimizer import AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.core.norm import NormMode
    from tr.data import Pad, RandomCrop, RandomErasing, RandomHorizontalFlip, RandomRotation, RandomScale
    from tr.data.settings import PreprocessorSettings
    from tr.graph.blueprint import fc, relu, seq
    from tr.task.resident import ResidentFeeder

    pre = (PreprocessorSettings().dataset(mnist_subset(512, 128)).normalization(NormMode.MNIST)
           .train_transforms(Pad(2), RandomCrop(28), RandomRotation(20, fill=0), RandomScale(0.8, 1.2),
                             RandomErasing(0.5), RandomHorizontalFlip())
           .device_augment(True))
    return task(seq(fc(64, True), relu(), fc(10, True)), settings(64, False), ResidentFeeder(pre, 64, SEED),
                AdamW(), ConstantLR().base_lr(1e-3))


def conv_bias() -> Any:
    """Convs with bias (no BN), an average pool, Adam, gradient clipping."""
    from tr.algo.optimizer import Adam
    from tr.algo.scheduler import ConstantLR
    from tr.graph.blueprint import avgpool, conv, fc, gap, relu, seq

    model = seq(conv(8, 3, 1, 1, bias=True), relu(), avgpool(2, 2), conv(16, 3, 1, 1, bias=True), relu(), gap(),
                fc(10))
    return task(model, settings(8, False), array_feeder(8, 16, 10, False, 16, 8), Adam(),
                ConstantLR().base_lr(1e-3)).grad_clip(1.0)


def residual_bce() -> Any:
    """Channel padding, an explicit add2 residual, a max pool after a relu (not fused into a BN), a flatten, the
    BCE-with-logits loss, SEMA and a per-batch schedule."""
    from tr.algo.onehot_loss import BCEWithLogitsLoss
    from tr.algo.optimizer import SGD
    from tr.algo.scheduler import CosineAnnealingLR
    from tr.graph.blueprint import add2, channel_padding, conv, fc, flatten, identity, maxpool, relu, seq

    model = seq(channel_padding(8), conv(16, 3, 1, 1), relu(), maxpool(3, 2, 1),
                add2(identity(), seq(conv(16, 3, 1, 1), relu(), conv(16, 3, 1, 1))), relu(), flatten(), fc(10))
    return (task(model, settings(8, False), array_feeder(8, 16, 10, False, 36, 12), SGD().momentum(0.9),
                 CosineAnnealingLR(0.05).warmup(1).step_by_batch())
            .loss(BCEWithLogitsLoss().label_smoothing(0.1)).sema(0.9))


CONFIGS: dict[str, Callable[[], Any]] = {
    "mlp_mnist": mlp_mnist, "resnet_amp": resnet_amp, "vgg_lars": vgg_lars, "mobilenet_amp": mobilenet_amp,
    "resident_mnist": resident_mnist, "conv_bias": conv_bias, "residual_bce": residual_bce}


def _spec_plans() -> dict[str, Callable[[], Any]]:
    """Plans compiled from a CompileSpec alone (no task, no data, never trained): the inputs, collectives and
    optimizer mixes the task configurations above do not reach (device JPEG decode, data parallelism's gradient
    buckets at world 2 and 4, LARS under AMP, EMA at world > 1)."""
    from tr.graph.blueprint import block, cbr, dropout, fc, flatten, gap, maxpool, relu, seq
    from tr.graph.compiler import compile_program
    from tr.graph.jpeg_input import JpegInput
    from tr.graph.resident import ResidentInput
    from tr.graph.spec import CompileSpec

    def resnet() -> Any:
        return seq(cbr(16, 3, 1, 1), block("basic", 16), block("basic", 32, stride=2), gap(), fc(10))

    def vgg() -> Any:
        return seq(cbr(16, 3, 1, 1), cbr(16, 3, 1, 1), maxpool(2, 2), cbr(32, 3, 1, 1), maxpool(2, 2), flatten(),
                   fc(64), relu(), dropout(0.5), fc(10))

    def mlp() -> Any:
        return seq(fc(64, True), relu(), fc(10, True))

    norm = (("mean", (0.5, 0.5, 0.5)), ("std", (0.25, 0.25, 0.25)))
    base = dict(num_classes=10, batch=8, last_train_batch=4, val_batch=8, last_val_batch=4, lr_table_steps=20)
    cases = {
        "spec_jpeg_amp_w2": (resnet, dict(input_shape=(32, 32, 4), amp=True, world_size=2,
                                          jpeg=JpegInput(100000, norm, False))),
        "spec_jpeg_jitter": (resnet, dict(input_shape=(32, 32, 3), jpeg=JpegInput(100000, norm, True))),
        "spec_resnet_amp_w2_ema": (resnet, dict(input_shape=(32, 32, 4), amp=True, world_size=2, ema_decay=0.9,
                                                optimizer="adamw")),
        "spec_vgg_lars_amp": (vgg, dict(input_shape=(32, 32, 4), amp=True, optimizer="lars")),
        "spec_vgg_lars_amp_ema_w4": (vgg, dict(input_shape=(32, 32, 4), amp=True, optimizer="lars_nesterov",
                                               ema_decay=0.9, world_size=4)),
        "spec_mlp_amp_w2": (mlp, dict(input_shape=(28, 28, 1), amp=True, world_size=2)),
        "spec_resident_w2": (mlp, dict(input_shape=(28, 28, 1), world_size=2, resident=ResidentInput(
            600, 100, (28, 28, 1), (("crop_slot", 2),), (("mean", (0.1307,)), ("std", (0.3081,)))))),
        "spec_vgg_adam_w2_ema": (vgg, dict(input_shape=(32, 32, 3), world_size=2, optimizer="adam", ema_decay=0.9)),
    }
    one_input = "input" in {f.name for f in dataclasses.fields(CompileSpec)}  # (older trees: resident= and jpeg=)

    def spec(kw: dict[str, Any]) -> Any:
        if one_input:
            kw = {("input" if k in ("jpeg", "resident") else k): v for k, v in kw.items()}
        return CompileSpec(**{**base, **kw})

    return {name: (lambda m=m, kw=kw: compile_program(m(), spec(kw))) for name, (m, kw) in cases.items()}


def fingerprint_one(build: Callable[[], Any], train: bool) -> dict[str, Any]:
    from tr.core.errors import ConfigError

    t = build()
    try:
        t.compile()
        out = {"plan": describe_plan(t.program), "initial": init_hashes(t)}
        if train:
            result = t.run()
            out["history"] = history(result)
            losses = [r.train_loss for r in result.history] + [r.val_loss for r in result.history
                                                                if r.val_loss is not None]
            if not np.all(np.isfinite(losses)):  # NaN weights would hide every later difference
                raise ConfigError(f"{build.__name__} trains to non-finite losses {losses}; expected a configuration "
                                  f"that trains")
            out["trained"] = state_hashes(t)
        return out
    finally:
        if t.feeder is not None:
            t.feeder.close()


def fingerprint(train: bool = True, names: list[str] | None = None, log: Callable[[str], None] | None = None
                ) -> dict[str, Any]:
    """Every configuration's fingerprint (``names``: only those), each trained when ``train``."""
    from tr.core.errors import ConfigError

    unknown = [n for n in names or () if n not in CONFIGS]
    if unknown:
        raise ConfigError(f"unknown configuration(s) {unknown}; expected some of {list(CONFIGS)}")
    configs = {}
    for name, build in CONFIGS.items():
        if names is not None and name not in names:
            continue
        t0 = time.perf_counter()
        configs[name] = fingerprint_one(build, train)
        if log is not None:
            log(f"{name}: {time.perf_counter() - t0:.1f} s")
    if names is None:
        configs.update({name: {"plan": describe_plan(plan())} for name, plan in _spec_plans().items()})
    return {"format": FORMAT, "trained": train, "configs": configs}


PLAN_SECTIONS = ("arena_bytes", "tensors", "steps", "inits", "variants")


def plan_digests(fp: dict[str, Any]) -> dict[str, dict[str, str]]:
    """sha256 of each plan section of each configuration (canonical JSON): what a committed reference keeps, so a
    test can hold the plans of this tree to another tree's without storing megabytes. Plans only: numbers drawn
    or trained with numpy may differ across numpy builds, the plan may not."""
    return {name: {s: hashlib.sha256(json.dumps(c["plan"][s], sort_keys=True).encode()).hexdigest()
                   for s in PLAN_SECTIONS} for name, c in sorted(fp["configs"].items())}


# --- comparison (no tr import) ---------------------------------------------------------------------------------
# sections in the order their differences are worth reading: where the layout first moves, then the ops, then
# whether the numbers moved with it
SECTIONS = ("plan.arena_bytes", "plan.tensors", "plan.steps", "plan.inits", "plan.variants", "initial", "history",
            "trained")
SHOWN_PER_SECTION = 3


def _leaves(v: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, f"{path}.{k}" if path else k)
    elif isinstance(v, list) and v and any(isinstance(x, (dict, list)) for x in v):
        for i, x in enumerate(v):
            yield from _leaves(x, f"{path}[{i}]")
        yield f"{path}.<length>", len(v)
    else:
        yield path, v


def _section(path: str) -> str:
    return next((s for s in SECTIONS if path == s or path.startswith((s + ".", s + "["))), path.split(".")[0])


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Per configuration and section, every leaf that differs or is in one fingerprint only."""
    out: dict[str, dict[str, list[str]]] = {}
    ca, cb = a.get("configs", {}), b.get("configs", {})
    for name in list(ca) + [n for n in cb if n not in ca]:
        if name not in ca or name not in cb:
            out[name] = {"configuration": [f"only in {'A' if name in ca else 'B'}"]}
            continue
        la, lb = dict(_leaves(ca[name], "")), dict(_leaves(cb[name], ""))
        by_section: dict[str, list[str]] = {}
        for p in list(la) + [p for p in lb if p not in la]:
            if la.get(p, ()) != lb.get(p, ()):
                by_section.setdefault(_section(p), []).append(
                    f"{p}: A={la.get(p, '<absent>')!r} B={lb.get(p, '<absent>')!r}")
        if by_section:
            order = {s: i for i, s in enumerate(SECTIONS)}
            out[name] = {s: by_section[s] for s in sorted(by_section, key=lambda s: order.get(s, len(order)))}
    return out


class Unreadable(Exception):
    """A --compare input that is not a fingerprint of this tool (exit 2: neither equal nor different)."""


def _load(path: Path) -> dict[str, Any]:
    try:
        fp = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise Unreadable(f"cannot read a fingerprint from {path}: {e}") from None
    if not isinstance(fp, dict) or fp.get("format") != FORMAT or not isinstance(fp.get("configs"), dict):
        raise Unreadable(f"{path} is not a format-{FORMAT} fingerprint of this tool (format "
                         f"{fp.get('format') if isinstance(fp, dict) else None!r})")
    return fp


def compare(path_a: Path, path_b: Path, shown: int = SHOWN_PER_SECTION) -> int:
    """0 and a one-line summary when the fingerprints are equal; else 1, each differing configuration's count per
    section and its first ``shown`` differences of each."""
    a, b = _load(path_a), _load(path_b)
    diff = differences(a, b)
    if a["trained"] != b["trained"]:
        print(f"A {'was' if a['trained'] else 'was not'} trained, B {'was' if b['trained'] else 'was not'}")
    if diff:
        for name, sections in diff.items():
            counts = ", ".join(f"{s} {len(rows)}" for s, rows in sections.items())
            print(f"{name}: {sum(map(len, sections.values()))} difference(s) ({counts})")
            for rows in sections.values():
                for r in rows[:shown]:
                    print(f"  {r}")
        return 1
    configs = a["configs"].values()
    weights = sum(len(c.get("initial", {})) + len(c.get("trained", {})) for c in configs)
    trained = sum("trained" in c for c in configs)
    print(f"identical: {len(a['configs'])} plans, {weights} weight tensors ({trained} configurations trained)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--json", type=Path, help="write this tree's fingerprint here")
    g.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two fingerprints")
    g.add_argument("--digest", type=Path, help="write the plan sections' sha256 (compile only) here")
    p.add_argument("--no-train", action="store_true", help="plans and initial weights only")
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"only these configurations, of {list(CONFIGS)}")
    args = p.parse_args(argv)
    if args.compare:
        try:
            return compare(*args.compare)
        except Unreadable as e:
            print(f"plan_identity: {e}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    if args.digest:
        fp = fingerprint(False, args.only, log=lambda m: print(m, file=sys.stderr))
        args.digest.parent.mkdir(parents=True, exist_ok=True)
        args.digest.write_text(json.dumps({"format": FORMAT, "plans": plan_digests(fp)}, indent=1, sort_keys=True)
                               + "\n")
        print(f"wrote {args.digest}: {len(fp['configs'])} plans in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 0
    fp = fingerprint(not args.no_train, args.only, log=lambda m: print(m, file=sys.stderr))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}: {len(fp['configs'])} plans in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
