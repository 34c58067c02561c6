"""A vision model's training step on one device (VGG16-BN, ResNet-50, MobileNetV2, EfficientNet-B0 or ViT-B/16): tr vs
its strongest PyTorch twins, one run.

What is timed, on every side: the full training step (forward, loss, backward, optimizer update, AMP loss
scaling when on) on one resident synthetic batch: the batch is already on the device and the same batch is
used every step; no data pipeline, no validation. ``--warmup`` steps first (not timed), then ``--steps``
steps between two device synchronisations. Compile / capture time is excluded and reported separately.

Configuration (both frameworks; the seed's ImageNet configs, SEED_SYSTEM.md section 14): batch 256 per GPU,
AMP (FP16 autocast + dynamic loss scaling), SGD momentum 0.9 nesterov, weight decay 1e-4 on conv/fc weights
only (not on BN parameters or biases), label smoothing 0.1, constant learning rate ``--lr`` (the schedule
does not change the cost of a step), input [N, R, R, 3] random normal images (FP16 under AMP, as tr's
pipeline delivers them, else FP32) and random labels from a fixed seed. ``vit_b_16`` trains with the ViT recipe's
optimizer instead: AdamW (betas 0.9, 0.999), weight decay 0.05 on weights only (not on norms, biases, the class
token or the position embedding), on both sides; run it with ``--amp-dtype bf16`` (the ViT default).

* tr: the ``vgg16_bn`` / ``resnet50`` BluePrint of examples/models.py (its last fc follows ``--classes``;
  the input shape is the feeder's sample shape), trained for one epoch of ``--tr-batches`` batches on an
  ArrayFeeder (so the step graphs are compiled, captured and run once), then
  ``DeepLearningTask.time_train_step``: launches of the captured full-batch step graph on buffer A. Its
  compile time is split into tr.graph's compile_program, the weight initialisation, the capture of every
  step graph (on CUDA this holds the cuDNN plan building and autotuning) and the rest (backend, arena).
  ``--conv-choice`` picks how tr's convolutions choose their cuDNN engines: ``heuristic`` (default: the
  deterministic rule, the same engines on every machine of one GPU model), ``autotune`` (the opt-in: the
  fastest of the first candidates, timed at capture; row ``tr_autotune``) or ``both`` (two tr rows, each in
  its own process, and the autotuned row's speed against the rule's: what the rule costs). Each tr row
  reports how many plans each source chose (``conv_sources``: tr.task.engines.sources).
* PyTorch (benchmarks/cnn_torch.py): ``torchvision.models.vgg16_bn`` / ``resnet50`` as is, channels_last,
  autocast FP16 + GradScaler, fused SGD, cudnn.benchmark; rows: eager, the whole step captured as one CUDA
  graph (``--torch-cuda-graph``, on by default on CUDA; if that capture fails, forward + backward captured
  with the optimizer eager), torch.compile for each ``--compile-mode`` (default "default"; "max-autotune"
  compiles for minutes). Models: torchvision's ResNet-50 is v1.5 (stride on the 3x3 conv of each stage's
  first bottleneck, 1x1 projection + BN shortcuts), as tr's ``block("bottleneck")`` expands
  (tr.graph.passes); both have bias-free convs and an fc with bias. torchvision's VGG16-BN keeps its conv
  biases (tr's have none: a BN follows each conv).

A row with a skipped timed step (non-finite gradients: a loss scale still calibrating, or a diverged loss) is
not quotable: it is flagged, never the strongest PyTorch row, and no ratio is quoted for it (JSON: not_quotable);
each PyTorch row also reports the steps it skipped before timing and its loss after warm-up.

Each row runs in its own child process (``--no-isolate``: all in this one), so a crash or a failed capture
costs that row only, and no row inherits another's device memory; ``--deadline-s`` skips rows that would
start too late and bounds the others, so the table and the JSON always come out. The JSON (``--json PATH``,
or ``--json auto``: ``<json-dir>/<model>_b<batch>_<UTC date>.json``, with ``_fp32``, ``_r<res>``, ``_cpu``
for non-default runs; json-dir defaults to benchmarks/results) is rewritten after every row.

    python benchmarks/cnn.py --model vgg16_bn --json auto                   # H200: batch 256, AMP, 224
    python benchmarks/cnn.py --model resnet50 --compile-mode default,max-autotune --json auto
    python benchmarks/cnn.py --model resnet50 --skip-torch --conv-choice both --json auto  # the rule's cost
    python benchmarks/cnn.py --model resnet50 --device cpu --resolution 32 --batch 4 --steps 2 --warmup 1 \\
        --classes 10 --no-compile --json auto --json-dir /tmp                # CPU smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ("vgg16_bn", "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16")
MOMENTUM, WD, LS, SEED = 0.9, 1e-4, 0.1, 123
VIT_WD, VIT_BETAS = 0.05, (0.9, 0.999)  # the ViT recipe's AdamW (timm's, torchvision's reference recipe)
NAMES = {"tr": "tr", "tr_autotune": "tr (cuDNN autotuned)", "tr_fp16": "tr (FP16 AMP)",
         "pytorch_eager": "pytorch eager",
         "pytorch_cuda_graph": "pytorch cuda graph (step)",
         "pytorch_cuda_graph_fwd_bwd": "pytorch cuda graph (fwd+bwd)"}


# --- data ------------------------------------------------------------------------------------------

def synthetic(n: int, res: int, classes: int, dtype: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n random normal images [n, res, res, 3] and n random labels in [0, classes), from ``seed``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, res, res, 3), dtype=np.float32).astype(dtype, copy=False)
    y = rng.integers(0, classes, n, dtype=np.int32)
    return x, y


# --- tr --------------------------------------------------------------------------------------------

def tr_model(classes: int, name: str = "vgg16_bn") -> Any:
    """examples/models.py's ``name`` BluePrint with its last fc(1000) replaced by fc(classes)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.models import MODELS as EXAMPLES
    from tr.graph.blueprint import FC, BluePrint, fc, seq

    layers = EXAMPLES[name].root.layers
    if not (isinstance(layers[-1], FC) and layers[-1].out == 1000):
        raise SystemExit(f"examples/models.py's {name} no longer ends in fc(1000): {layers[-1]!r}")
    return BluePrint(seq(*layers[:-1], fc(classes)), name=name, num_classes=classes)


@contextlib.contextmanager
def timed_phases(phases: dict[str, float]) -> Iterator[None]:
    """Time the parts of DeepLearningTask.compile() by wrapping the functions it calls (where they exist)."""
    targets = [("tr.graph.compiler", "compile_program", "graph_compile_s"),
               ("tr.task.deep_learning", "initialize_program", "init_weights_s"),
               ("tr.task.deep_learning", "capture_steps", "capture_s")]
    undo = []
    for module, attr, key in targets:
        try:
            mod = importlib.import_module(module)
            fn = getattr(mod, attr)
        except (ImportError, AttributeError):
            continue

        def wrapped(*args: Any, _fn: Any = fn, _key: str = key, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kw)
            finally:
                phases[_key] = phases.get(_key, 0.0) + time.perf_counter() - t0

        setattr(mod, attr, wrapped)
        undo.append((mod, attr, fn))
    try:
        yield
    finally:
        for mod, attr, fn in undo:
            setattr(mod, attr, fn)


def engines(graph: Any) -> dict[str, int]:
    """How often each engine ran in a captured CUDA graph: the first two words of every native op's info."""
    infos = [getattr(op, "info", "") for op in getattr(graph, "ops", None) or []]
    return dict(Counter(" ".join(i.split()[:2]) for i in infos if i))


def run_tr(a: argparse.Namespace, fp16: bool = False) -> dict:
    """tr's row; ``fp16``: FP16 AMP whatever --amp-dtype says (row tr_fp16, beside a BF16 run's rows)."""
    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD, AdamW
    from tr.algo.scheduler import ConstantLR
    from tr.core.memory import Role
    from tr.core.settings import Settings
    from tr.task import engines as task_engines
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.executor import scalar
    from tr.task.feeder import ArrayFeeder

    mode = (fp16 and "fp16") or (a.amp_dtype if a.amp else "off")  # tr's AMP: settings.amp's argument
    staged = {"off": np.float32, "fp16": np.float16, "bf16": np.float32}[mode]  # (bf16: the feeder rounds)
    x, y = synthetic(a.batch * a.tr_batches, a.resolution, a.classes, staged, SEED)
    if a.tr_pad_channels and a.tr_pad_channels > x.shape[-1]:  # as pad_channels_to: zero channels, made on the host
        x = np.concatenate([x, np.zeros((*x.shape[:-1], a.tr_pad_channels - x.shape[-1]), x.dtype)], axis=-1)
    feeder = ArrayFeeder((x, y), None, a.batch, seed=SEED, shuffle=False, drop_last=True,
                         dtype="bfloat16" if mode == "bf16" else staged, num_classes=a.classes)
    settings = Settings().amp(mode).manual_seed(SEED).global_batch_size(a.batch).use_tf32(a.tf32)
    if a.loss_scale_init and mode == "fp16":
        settings.loss_scaling("dynamic", init=a.loss_scale_init)
    task = (DeepLearningTask(settings).device(a.device).quiet().model(tr_model(a.classes, a.model))
            .loss(CrossEntropyLoss().label_smoothing(LS))
            .optimizer(AdamW().betas(*VIT_BETAS).weight_decay(VIT_WD) if a.model.startswith("vit") else
                       SGD().momentum(MOMENTUM).nesterov(True).weight_decay(WD))
            .scheduler(ConstantLR().base_lr(a.lr)).total_epochs(1).data(feeder))
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    with timed_phases(phases):
        task.compile()
    compile_s = time.perf_counter() - t0
    phases["other_s"] = compile_s - sum(phases.values())
    t0 = time.perf_counter()
    epoch = task.run()  # one epoch of a.tr_batches steps: the captured graphs run once before timing
    epoch_s = time.perf_counter() - t0
    be, prog = task.backend, task.program
    skipped_epoch = int(scalar(be, prog, "skipped")[0])  # the untimed epoch's
    if a.warmup > 0:
        task.time_train_step(a.warmup, 0)  # the untimed warm-up launches (their skips are not the timed steps')
    skipped0 = int(scalar(be, prog, "skipped")[0])
    step_s = task.time_train_step(a.steps, 0)
    skipped = int(scalar(be, prog, "skipped")[0]) - skipped0
    loss = float(scalar(be, prog, "result")[0])  # the last timed step's loss
    params = sum(int(np.prod(i.tensor.shape.dims)) for i in prog.inits if i.tensor.region.role is Role.PARAM)
    out = {"images_per_s": a.batch / step_s, "ms_per_step": step_s * 1e3, "compile_s": compile_s,
           "compile_split_s": phases, "first_epoch_s": epoch_s, "first_epoch_steps": a.tr_batches,
           "first_epoch_train_loss": epoch.history[-1].train_loss, "arena_bytes": int(prog.layout.total_bytes),
           "arena_gib": prog.layout.total_bytes / 2**30, "launches_per_step": task.launches_per_step,
           "ops": prog.num_ops, "backend": be.name, "trainable_params": params,
           "skipped_steps_timed": skipped, "skipped_steps_untimed": skipped0,
           "skipped_steps_first_epoch": skipped_epoch, "last_loss": loss,
           "loss_scale_end": float(scalar(be, prog, "loss_scale")[0]) if mode == "fp16" else None}
    steps = getattr(task, "_steps", None)
    if steps is not None and steps.train:
        out["engines"] = engines(steps.train[0])
    out["conv_sources"] = task_engines.sources(task_engines.used(task))  # plans by source: heuristic, timed, ...
    if a.host_steps > 0:
        out["host_us_per_step"] = task.host_us_per_step(a.host_steps)
    del task, be, prog
    gc.collect()
    return out


# --- rows ------------------------------------------------------------------------------------------

def run_row(a: argparse.Namespace, key: str) -> dict:
    """Run one row in this process; an exception becomes {"error": ...} (the traceback goes to stderr)."""
    try:
        if key in ("tr", "tr_autotune", "tr_fp16"):  # read at every capture: set before the task compiles
            os.environ["TR_CUDNN_AUTOTUNE"] = "1" if key == "tr_autotune" else "0"
            return run_tr(a, fp16=key == "tr_fp16")
        from cnn_torch import run_torch

        variant = key.removeprefix("pytorch_").replace("compile_", "compile:", 1)
        return run_torch(a, variant)
    except Exception as e:  # report it; the other rows stand on their own
        traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"error": f"{type(e).__name__}: {first}"[:400]}


def run_child(a: argparse.Namespace, argv: list[str], key: str, timeout: float) -> dict:
    """Run one row in a child process (its own session: a timeout kills it and its compile workers)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "row.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--row", key, "--row-out", str(out)]
        p = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s (killed)"}
        finally:  # also on SIGTERM (SystemExit): the row's session, inductor's compile workers included
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if out.exists():
            return json.loads(out.read_text())
        return {"error": f"the row's process exited with code {rc} and wrote no result"}


def row_keys(a: argparse.Namespace) -> list[str]:
    keys = [] if a.skip_tr else [k for k, c in (("tr", "heuristic"), ("tr_autotune", "autotune"))
                                 if a.conv_choice in (c, "both")]
    if not a.skip_tr and a.amp and a.amp_dtype == "bf16" and a.tr_fp16_row:
        keys.append("tr_fp16")
    if not a.skip_torch:
        keys.append("pytorch_eager")
        if a.torch_cuda_graph:
            keys.append("pytorch_cuda_graph")
        keys += [f"pytorch_compile_{m}" for m in a.compile_modes]
    return keys


def label(key: str) -> str:
    return NAMES.get(key, key.replace("pytorch_compile_", "pytorch compile "))


# --- the run ---------------------------------------------------------------------------------------

def environment(a: argparse.Namespace) -> dict:
    env: dict = {"command": [sys.executable, *sys.argv],
                 "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None
    except Exception:
        env["git_commit"] = None
    env["tree"] = os.environ.get("TR_TREE_HASH")  # set by h200_session.sh (the device copy has no .git)
    try:
        import torch
        import torchvision

        env.update(torch=torch.__version__, torchvision=torchvision.__version__, torch_cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
        if a.device == "cuda" and torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    except Exception as e:
        env["torch_error"] = f"{type(e).__name__}: {e}"
    if a.device == "cuda":
        try:
            env["nvidia_driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:
            env["nvidia_driver"] = None
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def auto_json(a: argparse.Namespace) -> Path:
    """benchmarks/results naming: <model>_b<batch>_<UTC date>.json, tagged when the run is not the default."""
    tags = ("_bf16" if a.amp_dtype == "bf16" else "") if a.amp else ("_tf32" if a.tf32 else "_fp32")
    if a.conv_choice == "autotune":
        tags += "_autotune"
    if a.resolution != 224:
        tags += f"_r{a.resolution}"
    if a.classes != 1000:
        tags += f"_c{a.classes}"
    if a.device != "cuda":
        tags += f"_{a.device}"
    if a.tr_pad_channels:
        tags += f"_pad{a.tr_pad_channels}"
    day = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return a.json_dir / f"{a.model}_b{a.batch}{tags}_{day}.json"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=MODELS, default="vgg16_bn")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--resolution", type=int, default=224, help="input H = W (a multiple of 32)")
    ap.add_argument("--batch", type=int, default=256, help="batch per step (per GPU)")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                    help="FP16 mixed precision (default: on with --device cuda, off with --device cpu)")
    ap.add_argument("--amp-dtype", choices=("fp16", "bf16"), default="fp16",
                    help="AMP's 16-bit type on both sides: fp16 (loss-scaled) or bf16 (no loss scale)")
    ap.add_argument("--tr-fp16-row", action=argparse.BooleanOptionalAction, default=True,
                    help="with --amp-dtype bf16: also tr with FP16 AMP (row tr_fp16), BF16's cost against it")
    ap.add_argument("--tf32", action="store_true", help="FP32 runs: allow TF32 tensor cores on both sides")
    ap.add_argument("--steps", type=int, default=50, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before the timed ones")
    ap.add_argument("--tr-pad-channels", type=int, default=None, metavar="C",
                    help="tr's images padded with zero channels to C (4 or 8: the first conv on tensor-core "
                         "shapes; tr's pipelines pad while they normalise, PreprocessorSettings.pad_channels_to)")
    ap.add_argument("--loss-scale-init", type=float, default=None,
                    help="FP16 AMP: both sides' first loss scale (default 65536, GradScaler's and tr's)")
    ap.add_argument("--lr", type=float, help="constant learning rate (both sides; default 0.01, vit_b_16 1e-3)")
    ap.add_argument("--tr-batches", type=int, default=2, help="batches in tr's one untimed epoch (>= 2: A and B)")
    ap.add_argument("--host-steps", type=int, default=20,
                    help="steps for tr's host_us_per_step (transfer + step launches); 0 skips it")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode(s), comma-separated: default, reduce-overhead, max-autotune, ...")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--torch-cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                    help="the PyTorch step captured as one CUDA graph (default: on with --device cuda)")
    ap.add_argument("--no-torch-fused", dest="torch_fused", action="store_false",
                    help="PyTorch: foreach SGD instead of the fused one (CUDA; no CUDA-graph row then)")
    ap.add_argument("--conv-choice", choices=("heuristic", "autotune", "both"), default="heuristic",
                    help="tr's cuDNN engines: the deterministic rule, autotuned (row tr_autotune), or both rows")
    ap.add_argument("--skip-tr", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                    help="each row in its own child process (default)")
    ap.add_argument("--row-timeout", type=float, default=1800.0, help="seconds one row may take (isolated rows)")
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="wall-clock budget of the whole run: rows that would start with less than "
                         "--min-row-s left are skipped, the others bounded by it (0: none)")
    ap.add_argument("--min-row-s", type=float, default=45.0)
    ap.add_argument("--json", help="write every figure and the environment to this path, or 'auto'")
    ap.add_argument("--json-dir", type=Path, default=HERE / "results", help="where --json auto writes")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row (a child of an isolated run)
    ap.add_argument("--row-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.device == "cpu" and a.amp and a.amp_dtype == "fp16":
        ap.error("--amp needs --device cuda (FP16 autocast on the CPU is neither the seed's config nor fast); "
                 "leave it out, pass --no-amp, or --amp-dtype bf16 (a CPU smoke test of both sides)")
    if a.amp is False and a.amp_dtype != "fp16":
        ap.error("--amp-dtype bf16 with --no-amp: leave one out")
    a.amp_note = None
    if a.lr is None:
        a.lr = 1e-3 if a.model.startswith("vit") else 0.01
    if a.amp is None:
        a.amp = a.device == "cuda" or a.amp_dtype == "bf16"
        if not a.amp:
            a.amp_note = "AMP off: --device cpu runs FP32"
    if a.torch_cuda_graph is None:
        a.torch_cuda_graph = a.device == "cuda" and a.torch_fused
    elif a.torch_cuda_graph and a.device != "cuda":
        ap.error("--torch-cuda-graph needs --device cuda")
    for name in ("resolution", "batch", "steps", "warmup", "tr_batches"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.resolution % 32:
        ap.error("--resolution must be a multiple of 32 (five stride-2 stages)")
    if a.classes < 2:
        ap.error("--classes must be >= 2")
    if a.tr_batches < 2:
        ap.error("--tr-batches must be >= 2 (the epoch must fill both staging buffers)")
    if a.tr_pad_channels is not None and not 3 <= a.tr_pad_channels <= 64:
        ap.error(f"--tr-pad-channels must lie in 3..64, got {a.tr_pad_channels}")
    if a.loss_scale_init is not None and not 0 < a.loss_scale_init < float("inf"):
        ap.error(f"--loss-scale-init must be a finite number > 0, got {a.loss_scale_init}")
    modes = [] if a.no_compile else [m.strip() for m in a.compile_mode.split(",") if m.strip()]
    a.compile_modes = [m for m in modes if m != "none"]
    a.json_path = None if not a.json else auto_json(a) if a.json == "auto" else Path(a.json)
    return a


def amp_name(a: argparse.Namespace) -> str:
    if a.amp:
        return "AMP BF16" if a.amp_dtype == "bf16" else "AMP"
    return "FP32" + (" (TF32)" if a.tf32 else "")


def quotable(r: dict) -> bool:
    """A row whose every timed step applied its update: a step skipped for non-finite gradients costs less than
    one that steps, so a row with any is not compared with anything."""
    return "images_per_s" in r and not r.get("skipped_steps_timed")


def strongest(results: dict[str, dict]) -> str | None:
    """The fastest quotable PyTorch row."""
    rows = {k: v for k, v in results.items() if k.startswith("pytorch") and quotable(v)}
    return max(rows, key=lambda k: rows[k]["images_per_s"]) if rows else None


def report(a: argparse.Namespace, results: dict[str, dict]) -> None:
    base = results.get("pytorch_eager", {}).get("images_per_s")
    best = strongest(results)
    print()
    print(f"{a.model} training step, {a.device}, batch {a.batch}, {a.resolution}x{a.resolution}x3, "
          f"{a.classes} classes, {amp_name(a)}, "
          f"{a.steps} timed steps after {a.warmup}")
    print(f"{'framework':<32} {'images/s':>10} {'ms/step':>9} {'vs eager':>9} {'compile s':>10}  note")
    for key, r in results.items():
        if "images_per_s" not in r:
            print(f"{label(key):<32} {'failed':>10} {'':>9} {'':>9} {'':>10}  {r.get('error', '')[:90]}")
            continue
        vs = f"{(r['images_per_s'] / base - 1) * 100:+.1f}%" if base else "-"
        comp = r.get("compile_s", r.get("capture_s"))
        note = []
        if r.get("skipped_steps_timed"):
            note.append(f"NOT QUOTABLE: {r['skipped_steps_timed']}/{a.steps} timed steps skipped (non-finite grads)")
        if key == best:
            note.append("strongest PyTorch")
        print(f"{label(key):<32} {r['images_per_s']:>10.1f} {r['ms_per_step']:>9.2f} {vs:>9} "
              f"{'' if comp is None else f'{comp:.1f}':>10}  {'; '.join(note)}")
    t = results.get("tr", {})
    if "images_per_s" in t:
        split = ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in t["compile_split_s"].items())
        print(f"tr: compile {t['compile_s']:.1f} s ({split}), arena {t['arena_gib']:.2f} GiB, "
              f"{t['launches_per_step']} launches/step, {t.get('host_us_per_step', float('nan')):.0f} us host/step, "
              f"backend {t['backend']}, engines {t.get('engines', {})}")
        if best and quotable(t):
            print(f"tr vs strongest PyTorch ({label(best)}): "
                  f"{(t['images_per_s'] / results[best]['images_per_s'] - 1) * 100:+.1f} %")
        elif not quotable(t):
            print("tr vs PyTorch: not quoted (tr skipped timed steps)")
        else:
            print("tr vs PyTorch: not quoted (no PyTorch row applied every timed update)")
    f16 = results.get("tr_fp16", {})
    if "images_per_s" in t and "images_per_s" in f16:
        print(f"tr BF16 {t['images_per_s']:.1f} images/s vs tr FP16 {f16['images_per_s']:.1f}: "
              f"{(t['images_per_s'] / f16['images_per_s'] - 1) * 100:+.2f} %")
    tuned = results.get("tr_autotune", {})
    if "images_per_s" in t and "images_per_s" in tuned:
        print(f"tr autotuned {tuned['images_per_s']:.1f} images/s vs the deterministic rule {t['images_per_s']:.1f}: "
              f"{(tuned['images_per_s'] / t['images_per_s'] - 1) * 100:+.2f} % (plans by source: autotuned "
              f"{tuned.get('conv_sources')}, rule {t.get('conv_sources')})")
    for key, r in results.items():
        if "compile_s" in r and not key.startswith("tr"):
            print(f"{label(key)}: compile (first step) {r['compile_s']:.1f} s")
    notes = next((r["notes"] for r in results.values() if "notes" in r), [])
    for n in notes:
        print(f"note: {n}")


def write_json(a: argparse.Namespace, results: dict[str, dict], env: dict) -> None:
    if a.json_path is None:
        return
    base = results.get("pytorch_eager", {}).get("images_per_s")
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()
              if k not in ("json", "json_path", "json_dir", "amp_note", "row", "row_out")}
    doc = {"workload": f"{a.model}_train_step", "config": config, "amp_note": a.amp_note, "environment": env,
           "results": results,
           "vs_pytorch_eager": {k: v["images_per_s"] / base for k, v in results.items()
                                if base and "images_per_s" in v}}
    doc["not_quotable"] = sorted(k for k, v in results.items() if "images_per_s" in v and not quotable(v))
    best = strongest(results)
    if best:
        doc["strongest_pytorch"] = best
        if quotable(results.get("tr", {})):
            doc["tr_vs_strongest_pytorch"] = results["tr"]["images_per_s"] / results[best]["images_per_s"]
    if all("images_per_s" in results.get(k, {}) for k in ("tr", "tr_fp16")):
        doc["tr_vs_tr_fp16"] = results["tr"]["images_per_s"] / results["tr_fp16"]["images_per_s"]
    if all("images_per_s" in results.get(k, {}) for k in ("tr", "tr_autotune")):
        doc["tr_autotune_vs_tr"] = results["tr_autotune"]["images_per_s"] / results["tr"]["images_per_s"]
    a.json_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.json_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(a.json_path)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    if a.row:  # a child: one row, its result to --row-out
        r = run_row(a, a.row)
        if a.row_out:
            a.row_out.write_text(json.dumps(r))
        return
    if a.amp_note:
        print(a.amp_note, flush=True)
    t_start = time.monotonic()
    env = environment(a)
    results: dict[str, dict] = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout around us: the finally below still runs
    try:
        run_rows(a, argv, results, env, t_start)
    finally:
        write_json(a, results, env)
        report(a, results)
        if a.json_path:
            print(f"wrote {a.json_path}")


def run_rows(a: argparse.Namespace, argv: list[str], results: dict[str, dict], env: dict, t_start: float) -> None:
    keys = row_keys(a)
    i = 0
    while i < len(keys):
        key = keys[i]
        i += 1
        left = a.deadline_s - (time.monotonic() - t_start) if a.deadline_s > 0 else float("inf")
        if left < a.min_row_s:
            results[key] = {"error": f"not run: {max(left, 0):.0f} s left of --deadline-s {a.deadline_s:.0f}"}
            continue
        print(f"\n=== {label(key)} ===", flush=True)
        t0 = time.monotonic()
        r = run_child(a, argv, key, min(a.row_timeout, left)) if a.isolate else run_row(a, key)
        r["row_wall_s"] = time.monotonic() - t0
        results[key] = r
        if key == "pytorch_cuda_graph" and "error" in r:  # PyTorch's partial-capture recipe instead
            keys.insert(i, "pytorch_cuda_graph_fwd_bwd")
        if not a.isolate and not key.startswith("tr"):
            gc.collect()
            with contextlib.suppress(Exception):
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
        write_json(a, results, env)
        status = f"{r['images_per_s']:.1f} images/s" if "images_per_s" in r else r.get("error", "?")
        print(f"=== {label(key)}: {status} ({r['row_wall_s']:.0f} s) ===", flush=True)


if __name__ == "__main__":
    main()
