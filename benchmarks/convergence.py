"""Convergence parity (issue [14] "Trust"): tr trains to the accuracy of its PyTorch twin, not only to its first-step
gradients. Both frameworks run the same recipe in one script, seed by seed, and the JSON holds both sides.

MNIST part (default). The bundled MNIST (data/mnist, tr.data's MNIST reader) zero-padded 28 -> 32 once in memory;
training augmentation RandomCrop(32, padding=2) and nothing else, MNIST normalisation, validation on the 10,000
test digits after every epoch. Models (``Arch``, defined once here and built for both frameworks, parameter counts
compared before anything trains): ``vgg_bn`` (three stages of 2x conv3x3-BN-ReLU + maxpool, widths w, 2w, 4w, then
flatten + fc) and ``resnet_small`` (conv3x3-BN-ReLU stem, three stages of ``--blocks`` basic blocks at w, 2w, 4w,
strides 1, 2, 2, 1x1+BN projections, global average pool, fc). Recipe (``Recipe``): batch 256 (last partial batch
dropped), SGD momentum 0.9 Nesterov with tr's decoupled weight decay 5e-4 on conv/fc weights only, label smoothing
0.1, cosine from 0.1 to 1e-6 after one epoch of linear warm-up from 0, stepped every batch (tr's
CosineAnnealingLR; the twin applies tr's own LR table step by step), 10 epochs. FP32 is FP32 on both sides (no
TF32); AMP is FP16 with dynamic loss scaling (both: 65536 first, halve on overflow, double after 2000 clean steps),
skipped steps counted on both sides. tr: DeepLearningTask on the CUDA backend with the data set in the arena and
the crop inside the captured step (device_augment). Twin (benchmarks/convergence_torch.py): the data set on the
GPU, the same crop gathered there, eager steps, tr's update rule, tr's initialisation policy. Verdict per (model,
precision): |mean final (last-epoch) top-1 of tr - mean of the twin| <= 0.15 points over 3 seeds a side, every
step after the first epoch's loss-scale calibration applied.

ResNet-50 part (``--imagenet``). A folder made by tools/make_image_folder.py (scikit-image's photographs, offline;
20 classes, the quadrants of 5 photographs (``--tiles 2``), x 500 train + 50 val JPEGs, each a crop of 5-30 % of its
quadrant (``--crop-area``), short sides 144-176 px; made once under /tmp, or --images: a class a whole photograph
was separated perfectly by epoch 3 by both sides, which tells no recipe from another), ResNet-50
(examples/models.py's, fc sized to the classes; the twin torchvision's resnet50) trained 16 epochs at 128x128 with
the recipe above (2 warm-up epochs), AMP: tr's native JPEG pipeline (libjpeg-turbo in its workers) with
RandomResizedCrop(128) + RandomHorizontalFlip against torchvision's ImageFolder + DataLoader with the same
transforms; validation Resize(146) + CenterCrop(128). tr pads RGB to 4 channels under AMP (the seed's choice): its
first conv has 3,136 weights more, which see only zeros; the counts are compared without them, and the twin draws
its first conv with tr's fan-in. Verdict: at every epoch tr's mean training loss lies within the twin's mean +- 2
standard deviations over its seeds.

With CUDA each framework's runs go to a child process of its own (``--isolate``, the default there): tr's cuDNN
and torch's cannot share a process.

Every run appends its record (per epoch: training loss, validation top-1 and loss, seconds, skipped steps) to the
JSON, rewritten after each run, so a call cut off keeps what finished; ``--deadline-s`` stops starting runs that
would not finish in time. ``--merge A.json B.json`` joins the runs of several calls into one summary.

H200, three device calls (each a ``run`` of at most 600 s; carry .whl and .devdata/jpeg in every call, so that a
fresh machine's build has libjpeg-turbo for the third; the stage builds tr first where the machine lacks this tree's
build, and passes --deadline-s so that no run starts that would end past the stage's limit):

    CONV_ARGS="--precisions fp32" CONV_TAG=_fp32 bash benchmarks/h200_session.sh convergence    # call 1 (12 runs)
    CONV_ARGS="--precisions amp" CONV_TAG=_amp bash benchmarks/h200_session.sh convergence      # call 2 (12 runs)
    CONV_ARGS="--imagenet" CONV_TAG=_resnet50 bash benchmarks/h200_session.sh convergence       # call 3 (6 runs)
    python benchmarks/convergence.py --merge convergence_fp32.json convergence_amp.json --json auto   # here, no GPU

Measured on an H100 (benchmarks/RESULTS.md; most runs beside the GPU suite): an MNIST tr run 3-8 s in AMP, 15-77 s
in FP32 (tr keeps FP32 convolutions off tensor cores), its twin 15-66 s; 24 MNIST runs ~15 min, so the MNIST part
takes two or three calls. The ResNet-50 part: a tr run ~20 s (setup ~5 s, 16 epochs of 39 steps at ~0.7 s an
epoch), a twin run 127-171 s with 8 loader workers (epochs of 2.5-4.5 s; 60-70 s outside them, most likely the
spawned workers' start: the record's loader_start_s times it); the folder ~15 s. A run that did not start appears
under "not_run" in the JSON: run it again with --seeds / --models.

Directly: ``python benchmarks/convergence.py --json auto`` (every MNIST run), ``--imagenet --json auto``.
CPU smoke test of both sides (a few hundred samples, narrow models, one epoch, one seed, ~1-2 minutes here):

    python benchmarks/convergence.py --smoke --json /tmp/conv_smoke.json
    python benchmarks/convergence.py --smoke --imagenet --json /tmp/conv_smoke_r50.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ROOT / "data" / "mnist"
for _p in (str(HERE), str(ROOT / "tools")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from convergence_report import document, merge, steps_applied, table, write_json  # noqa: E402
from make_image_folder import SCALE, make_image_folder, parse_area  # noqa: E402

MNIST_MODELS = ("vgg_bn", "resnet_small")
PRECISIONS = ("fp32", "amp")


@dataclass(frozen=True)
class Recipe:
    batch: int = 256
    epochs: int = 10
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4  # tr's rule: w <- w(1 - lr wd) - lr (...), conv/fc weights only
    label_smoothing: float = 0.1
    warmup_epochs: int = 1
    eta_min: float = 1e-6


@dataclass(frozen=True)
class Arch:
    """One architecture, built by ``blueprint`` for tr and by convergence_torch.build_model for PyTorch."""

    name: str  # vgg_bn | resnet_small | resnet50
    width: int = 32
    blocks: int = 2  # resnet_small: basic blocks a stage
    classes: int = 10
    in_channels: int = 1
    side: int = 32

    @property
    def stages(self) -> tuple[tuple[int, ...], ...]:
        """vgg_bn: (width, convs) a stage, each stage ending in a 2x2 max pool; resnet_small: (width, blocks,
        stride) a stage, the first block of a stage carrying its stride; resnet50: none (examples/models.py's)."""
        w = self.width
        if self.name == "vgg_bn":
            return (w, 2), (2 * w, 2), (4 * w, 2)
        if self.name == "resnet_small":
            return (w, self.blocks, 1), (2 * w, self.blocks, 2), (4 * w, self.blocks, 2)
        return ()


def blueprint(arch: Arch) -> Any:
    from tr.graph.blueprint import BluePrint, block, cbr, fc, flatten, gap, maxpool, repeat, seq

    if arch.name == "resnet50":
        from cnn import tr_model

        return tr_model(arch.classes, "resnet50")
    if arch.name == "vgg_bn":
        body = [seq(repeat(cbr(w, 3, 1, 1), n), maxpool(2, 2)) for w, n in arch.stages]
        root = seq(*body, flatten(), fc(arch.classes))
    elif arch.name == "resnet_small":
        body = [seq(block("basic", w, stride=s), *[block("basic", w) for _ in range(n - 1)])
                for w, n, s in arch.stages]
        root = seq(cbr(arch.width, 3, 1, 1), *body, gap(), fc(arch.classes))
    else:
        raise SystemExit(f"unknown model {arch.name!r}: expected one of {MNIST_MODELS} or resnet50")
    return BluePrint(root, name=arch.name, input_shape=(arch.side, arch.side, arch.in_channels),
                     num_classes=arch.classes)


def first_conv_pad(arch: Arch, amp: bool) -> int:
    """Input channels tr's first conv has beyond the data's: RGB padded to 4 under AMP (pad_channels_to)."""
    return 4 if arch.name == "resnet50" and amp else arch.in_channels


def check_params(arch: Arch, amp: bool) -> dict:
    """Both frameworks' parameter counts (tr's from its ArchPlan, before any device work): they must agree, tr's
    first-conv weights that read the zero padding channels aside."""
    from convergence_torch import build_model, count_params

    from tr.graph.compiler import arch_plan
    from tr.graph.spec import CompileSpec

    c = first_conv_pad(arch, amp)
    n_tr = arch_plan(blueprint(arch), CompileSpec(input_shape=(arch.side, arch.side, c), num_classes=arch.classes,
                                                  batch=2, amp=amp)).num_params
    pad = (c - arch.in_channels) * 64 * 7 * 7 if arch.name == "resnet50" else 0
    n_torch = count_params(build_model(arch))
    if n_tr - pad != n_torch:
        raise SystemExit(f"{arch.name}: tr has {n_tr:,} parameters ({pad:,} of them on padding channels), the "
                         f"PyTorch twin {n_torch:,}: the architectures differ")
    return {"tr": n_tr, "tr_padding_weights": pad, "pytorch": n_torch}


def scheduler(recipe: Recipe) -> Any:
    """The recipe's schedule as tr runs it: cosine annealing after a linear warm-up, stepped every batch."""
    from tr.algo.scheduler import CosineAnnealingLR

    return CosineAnnealingLR(recipe.lr).warmup(recipe.warmup_epochs).eta_min(recipe.eta_min).step_by_batch()


def lr_table(recipe: Recipe, steps: int) -> np.ndarray:
    """tr's LR of every step (float32): the schedule the task compiles, prepared for this run's length."""
    return scheduler(recipe).prepare(recipe.epochs, steps).table()


def table_id(t: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(t, np.float32).tobytes()).hexdigest()[:12]


# --- data ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MnistData:
    train_x: np.ndarray  # (N, 32, 32, 1) uint8: the digits zero-padded 28 -> 32
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    pad: int = 2  # RandomCrop(32, padding=pad)
    side: int = 32
    mean: float = 0.1307
    std: float = 0.3081


def load_mnist(train_limit: int = 0, val_limit: int = 0) -> MnistData:
    from tr.core.norm import NormMode
    from tr.data import MNIST
    from tr.data.fused import norm_constants

    ds = MNIST(DATA)
    tr, va = ds.load("train"), ds.load("val")
    pad = lambda a, n: np.pad(a[:n or len(a)], ((0, 0), (2, 2), (2, 2), (0, 0)))  # noqa: E731
    (mean,), (std,) = norm_constants(NormMode.MNIST)
    return MnistData(pad(tr.images, train_limit), tr.labels[:train_limit or None].copy(), pad(va.images, val_limit),
                     va.labels[:val_limit or None].copy(), mean=mean, std=std)


@dataclass(frozen=True)
class Folder:
    root: Path  # train/ and val/ of class folders
    resolution: int
    val_resize: int
    workers: int
    classes: int
    train_images: int
    mean: tuple
    std: tuple


def ensure_folder(a: argparse.Namespace) -> Folder:
    """The image folder: tools/make_image_folder.py's, made into a temporary name and renamed (a cut-off call
    leaves no half folder to reuse); an existing one is reused when its classes are the ones asked for."""
    from tr.core.norm import NormMode
    from tr.data import ImageFolder, _native
    from tr.data.fused import norm_constants

    if not _native.jpeg_available():
        raise SystemExit("this tr-data build has no libjpeg-turbo, so tr cannot decode the folder's JPEGs (on the "
                         "H200: carry .devdata/jpeg from tools/fetch_device_jpeg.sh and rebuild)")
    area = f"_t{a.tiles}_a{a.crop_area[0]:g}-{a.crop_area[1]:g}" if (a.tiles, a.crop_area) != (1, SCALE) else ""
    root = a.images or Path(tempfile.gettempdir()) / (f"tr_convergence_c{a.classes}_n{a.per_class}_v{a.val_per_class}"
                                                      f"_s{a.min_side}-{a.max_side}{area}")
    if not root.exists():
        t0 = time.perf_counter()
        tmp = root.with_name(f".{root.name}.{os.getpid()}.tmp")
        n = make_image_folder(tmp, classes=a.classes, per_class=a.per_class, val_per_class=a.val_per_class,
                              min_side=a.min_side, max_side=a.max_side, seed=0, workers=a.workers, tiles=a.tiles,
                              crop_area=a.crop_area)
        os.rename(tmp, root)
        print(f"made {n} JPEGs in {root} ({time.perf_counter() - t0:.1f} s)", flush=True)
    if not (root / "train").is_dir() or not (root / "val").is_dir():
        raise SystemExit(f"{root}: needs train/ and val/ class folders (make_image_folder --val-per-class N)")
    ds = ImageFolder(root)
    if ds.num_classes != a.classes:
        raise SystemExit(f"{root} has {ds.num_classes} classes, {a.classes} asked for: pass --classes "
                         f"{ds.num_classes} or another --images")
    mean, std = norm_constants(NormMode.IMAGENET)
    return Folder(root, a.resolution, round(a.resolution * 256 / 224), a.workers, ds.num_classes,
                  len(ds.index("train").samples), tuple(mean), tuple(std))


# --- tr ------------------------------------------------------------------------------------------------

def _tr_task(arch: Arch, recipe: Recipe, amp: bool, seed: int, pre: Any, device: str) -> tuple[Any, Any]:
    from tr.algo.loss import CrossEntropyLoss
    from tr.algo.optimizer import SGD
    from tr.core.settings import Settings
    from tr.task.deep_learning import DeepLearningTask
    from tr.task.pipeline import feeder_from_preprocessor

    s = Settings().manual_seed(seed).global_batch_size(recipe.batch).amp(amp).use_tf32(False)
    feeder = feeder_from_preprocessor(s, pre=pre)
    task = (DeepLearningTask(s).device(device).quiet().model(blueprint(arch)).data(feeder)
            .loss(CrossEntropyLoss().label_smoothing(recipe.label_smoothing))
            .optimizer(SGD().momentum(recipe.momentum).nesterov(recipe.nesterov).weight_decay(recipe.weight_decay))
            .scheduler(scheduler(recipe)).total_epochs(recipe.epochs))
    return task, feeder


def _tr_train(task: Any, feeder: Any, recipe: Recipe, table: np.ndarray, amp: bool, log: Any) -> dict:
    from tr.task.executor import scalar

    t0 = time.perf_counter()
    task.compile()
    setup_s = time.perf_counter() - t0
    on_device = np.asarray(task.backend.read(task.program.tensor("lr_table")), np.float32).ravel()
    if not np.array_equal(on_device, table):
        raise RuntimeError(f"tr's LR table ({len(on_device)} steps) is not the twin's ({len(table)} steps)")
    params = sum(int(np.prod(x.shape)) for p in task.parameters() for x in p)
    epochs = []
    for _ in range(recipe.epochs):
        rec = task.run(1).history[-1]
        epochs.append({"epoch": rec.epoch, "train_loss": rec.train_loss, "val_top1": rec.top1,
                       "val_loss": rec.val_loss, "seconds": rec.seconds, "skipped_steps": rec.skipped_steps,
                       "lr": rec.lr})
        log(f"  tr epoch {rec.epoch}: loss {rec.train_loss:.4f}, top-1 {100 * rec.top1:.2f} %, "
            f"{rec.seconds:.1f} s, {rec.skipped_steps} skipped")
    scale = float(scalar(task.backend, task.program, "loss_scale")[0]) if amp else None
    return {"params": params, "steps_per_epoch": feeder.steps(True), "setup_s": setup_s, "epochs": epochs,
            "loss_scale": scale, "backend": task.backend.name}


def _tr_run(arch: Arch, recipe: Recipe, amp: bool, seed: int, pre: Any, device: str, table: np.ndarray,
            log: Any) -> dict:
    """One tr run on the data ``pre`` describes: its record. The task and its feeder are dropped and collected
    before the next run builds its own."""
    task, feeder = _tr_task(arch, recipe, amp, seed, pre, device)
    try:
        return _tr_train(task, feeder, recipe, table, amp, log)
    finally:
        del task, feeder
        gc.collect()


_DATASETS: dict[int, Any] = {}


def run_tr_mnist(arch: Arch, recipe: Recipe, amp: bool, seed: int, data: MnistData, table: np.ndarray,
                 device: str, log: Any = print) -> dict:
    """tr with the padded data set in the arena and RandomCrop(32, padding=2) in the captured step."""
    from tr.core.norm import NormMode
    from tr.data import ArrayDataset
    from tr.data.settings import PreprocessorSettings
    from tr.data.transforms import RandomCrop

    if id(data) not in _DATASETS:
        _DATASETS.clear()
        _DATASETS[id(data)] = ArrayDataset((data.train_x, data.train_y), (data.val_x, data.val_y),
                                           name="mnist32", num_classes=10)
    pre = (PreprocessorSettings().dataset(_DATASETS[id(data)]).normalization(NormMode.MNIST)
           .train_transforms(RandomCrop(data.side, padding=data.pad)).drop_last(True).device_augment(True))
    return _tr_run(arch, recipe, amp, seed, pre, device, table, log)


def run_tr_folder(arch: Arch, recipe: Recipe, amp: bool, seed: int, folder: Folder, table: np.ndarray,
                  device: str, log: Any = print) -> dict:
    """tr from the JPEG folder: its native pipeline decodes and augments in folder.workers threads."""
    from tr.core.norm import NormMode
    from tr.data import ImageFolder
    from tr.data.settings import PreprocessorSettings
    from tr.data.transforms import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize

    c = first_conv_pad(arch, amp)
    pre = (PreprocessorSettings().dataset(ImageFolder(folder.root)).preprocess_workers(folder.workers)
           .normalization(NormMode.IMAGENET)
           .train_transforms(RandomResizedCrop(folder.resolution), RandomHorizontalFlip())
           .val_transforms(Resize(folder.val_resize), CenterCrop(folder.resolution)).drop_last(True)
           .pad_channels_to(c if c != arch.in_channels else None))
    return _tr_run(arch, recipe, amp, seed, pre, device, table, log)


# --- the runs ------------------------------------------------------------------------------------------

def one_run(part: str, framework: str, arch: Arch, recipe: Recipe, precision: str, seed: int, data: Any,
            table: np.ndarray, device: str) -> dict:
    """One (framework, model, precision, seed) run as a record; an exception becomes the record's error."""
    amp = precision == "amp"
    t0 = time.perf_counter()
    head = {"part": part, "framework": framework, "model": arch.name, "precision": precision, "seed": seed,
            "lr_table": table_id(table), "lr_table_steps": len(table)}
    print(f"[{part}] {framework} {arch.name} {precision} seed {seed}", flush=True)
    try:
        if framework == "tr":
            run = run_tr_mnist if part == "mnist" else run_tr_folder
            r = run(arch, recipe, amp, seed, data, table, device)
        else:
            t_import = time.perf_counter()
            import convergence_torch as twin

            head["import_s"] = time.perf_counter() - t_import  # torch and torchvision, once a process
            if part == "mnist":
                r = twin.run_mnist(arch, recipe, amp, seed, data, table, device)
            else:
                r = twin.run_folder(arch, recipe, amp, seed, data, table, device, first_conv_pad(arch, amp))
            if device.startswith("cuda"):
                import torch

                torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001 (recorded; the next run still starts)
        traceback.print_exc()
        err = {**head, "error": f"{type(e).__name__}: {e}", "epochs": [], "wall_s": time.perf_counter() - t0}
        if "CUDNN" in str(e):  # which cuDNN files the process had mapped: the mismatch's evidence
            from cudnn_libraries import loaded_cudnn_libraries

            err["cudnn_libraries"] = loaded_cudnn_libraries()
        return err
    r["applied"] = steps_applied(r["epochs"], r["steps_per_epoch"])
    return {**head, **r, "error": None, "wall_s": time.perf_counter() - t0}


_WORKER_DATA: Any = None  # a framework process's data: loaded once by _worker_init


def _worker_init(part: str, data: Any) -> None:
    global _WORKER_DATA
    _WORKER_DATA = load_mnist(*data) if part == "mnist" else data


def _worker_run(part: str, framework: str, arch: Arch, recipe: Recipe, precision: str, seed: int,
                table: np.ndarray, device: str) -> dict:
    return one_run(part, framework, arch, recipe, precision, seed, _WORKER_DATA, table, device)


class FrameworkProcesses:
    """Each framework's runs in a child process of its own, kept for all of its runs (its data loaded once). One
    process cannot hold both: tr loads the machine's cuDNN, torch its wheel's, and whichever comes second fails with
    CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH. A child that dies becomes that run's error; the next run starts a
    new one."""

    def __init__(self, part: str, data: Any) -> None:
        self._part, self._data = part, data
        self._pools: dict[str, Any] = {}

    def run(self, framework: str, arch: Arch, recipe: Recipe, precision: str, seed: int, table: np.ndarray,
            device: str) -> dict:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        pool = self._pools.get(framework)
        if pool is None:
            pool = self._pools[framework] = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                initargs=(self._part, self._data))
        t0 = time.perf_counter()
        try:
            return pool.submit(_worker_run, self._part, framework, arch, recipe, precision, seed, table,
                               device).result()
        except BrokenProcessPool as e:
            self._pools.pop(framework).shutdown(wait=False, cancel_futures=True)
            return {"part": self._part, "framework": framework, "model": arch.name, "precision": precision,
                    "seed": seed, "lr_table": table_id(table), "lr_table_steps": len(table),
                    "error": f"the {framework} process died: {e}", "epochs": [], "wall_s": time.perf_counter() - t0}

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown()
        self._pools.clear()


def environment(device: str) -> dict:
    env: dict[str, Any] = {"python": platform.python_version(), "cores": len(os.sched_getaffinity(0)),
                           "tree": os.environ.get("TR_TREE_HASH"), "device": device}
    try:
        import torch
        import torchvision

        env.update(torch=torch.__version__, torchvision=torchvision.__version__)
        if device.startswith("cuda"):
            env["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return env


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = ap.add_argument
    add("--imagenet", action="store_true", help="the ResNet-50 part on an image folder instead of MNIST")
    add("--models", help=f"comma-separated (default {','.join(MNIST_MODELS)}; with --imagenet resnet50)")
    add("--precisions", help="comma-separated fp32, amp (default both; with --imagenet amp)")
    add("--seeds", help="comma-separated seeds, each run by both frameworks (default 0,1,2)")
    add("--frameworks", default="tr,pytorch", help="tr, pytorch or both (comma-separated)")
    add("--epochs", type=int, help="default 10 (MNIST), 16 (--imagenet)")
    add("--warmup-epochs", type=int, help="linear LR warm-up epochs, default 1 (MNIST), 2 (--imagenet)")
    add("--batch", type=int, help="default 256")
    add("--lr", type=float, default=0.1, help="peak LR of the cosine schedule")
    add("--weight-decay", type=float, default=5e-4, help="tr's decoupled rule, on conv/fc weights")
    add("--label-smoothing", type=float, default=0.1)
    add("--width", type=int, help="MNIST models: the first stage's channels, then 2x and 4x (default 32)")
    add("--blocks", type=int, help="resnet_small: basic blocks a stage (default 2)")
    add("--train-limit", type=int, help="MNIST: train on the first N digits only (default 0: all 60,000)")
    add("--val-limit", type=int, help="MNIST: validate on the first N test digits (default 0: all 10,000)")
    add("--images", type=Path, help="--imagenet: the folder (train/ and val/); made when absent")
    add("--classes", type=int, help="--imagenet: classes of the folder made (default 20)")
    add("--tiles", type=int, help="--imagenet: a class is a cell of a TILES x TILES grid over a photograph (default 2)")
    add("--crop-area", type=parse_area, help="--imagenet: MIN,MAX, each JPEG's crop area as a fraction of its class's "
        "cell (default 0.05,0.3)")
    add("--per-class", type=int, help="--imagenet: training JPEGs a class (default 500)")
    add("--val-per-class", type=int, help="--imagenet: validation JPEGs a class (default 50)")
    add("--min-side", type=int, help="--imagenet: the JPEGs' shortest short side (default 144)")
    add("--max-side", type=int, help="--imagenet: their longest short side (default 176)")
    add("--resolution", type=int, help="--imagenet: the training crop's side (default 128)")
    add("--workers", type=int, help="--imagenet: tr's pipeline threads and the DataLoader's worker processes "
        "(default: every core)")
    add("--device", choices=("auto", "cuda", "cpu"), help="both frameworks' device (default auto: cuda if any)")
    add("--isolate", action=argparse.BooleanOptionalAction,
        help="each framework's runs in a child process of its own (default: on with CUDA, where the two "
             "frameworks' cuDNN libraries cannot share a process)")
    add("--deadline-s", type=float, help="start no run that would end later than this many seconds from now")
    add("--smoke", action="store_true", help="CPU smoke test: a few hundred samples, narrow models, 1 epoch, seed 0")
    add("--json", help="write the runs here after every run, or 'auto' (benchmarks/results/convergence_*.json)")
    add("--merge", nargs="+", type=Path, metavar="JSON", help="join these JSONs' runs, print the summary, stop")
    return ap.parse_args(argv)


def settle(a: argparse.Namespace) -> argparse.Namespace:
    """Fill the part's defaults; --smoke shrinks everything to a CPU-sized run (explicit values still win)."""
    part_defaults = {"models": "resnet50" if a.imagenet else ",".join(MNIST_MODELS),
                     "precisions": "amp" if a.imagenet else ",".join(PRECISIONS),
                     "epochs": 16 if a.imagenet else 10, "warmup_epochs": 2 if a.imagenet else 1}
    full = {"seeds": "0,1,2", "device": "auto", "width": 32, "blocks": 2, "train_limit": 0, "val_limit": 0,
            "batch": 256, "classes": 20, "tiles": 2, "crop_area": (0.05, 0.3), "per_class": 500,
            "val_per_class": 50, "min_side": 144, "max_side": 176,
            "resolution": 128, "workers": len(os.sched_getaffinity(0))}
    if a.smoke:
        part_defaults.update(precisions="fp32", epochs=1, warmup_epochs=1)  # (the LR rises over the one epoch)
        full.update(seeds="0", device="cpu", width=4, blocks=1, train_limit=256, val_limit=128,
                    batch=4 if a.imagenet else 32, classes=2, per_class=4, val_per_class=2, min_side=40, max_side=56,
                    resolution=32, workers=2)
    for k, v in {**full, **part_defaults}.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if not 0 < a.crop_area[0] <= a.crop_area[1] <= 1:
        raise SystemExit(f"--crop-area needs 0 < MIN <= MAX <= 1, got {a.crop_area}")
    for k in ("epochs", "batch", "width", "blocks", "classes", "tiles", "per_class", "val_per_class", "min_side",
              "resolution", "workers"):
        if getattr(a, k) < 1:
            raise SystemExit(f"--{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if not 0 <= a.warmup_epochs <= a.epochs:
        raise SystemExit(f"--warmup-epochs must lie in 0..--epochs ({a.epochs}), got {a.warmup_epochs}")
    if a.train_limit < 0 or a.val_limit < 0 or a.max_side < a.min_side:
        raise SystemExit(f"need --train-limit, --val-limit >= 0 and --max-side >= --min-side, got {a.train_limit}, "
                         f"{a.val_limit}, {a.min_side}..{a.max_side}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.merge:
        runs, sources = merge(a.merge)
        doc = document({"command": sys.argv, "merged_from": sources}, runs, [])
        print(table(runs, doc["summary_top1"], doc["summary_curves"]))
        if a.json:
            out = _json_path(a.json, "convergence", "_merged")
            write_json(out, doc)
            print(f"wrote {out}")
        return 0
    a = settle(a)
    t_start = time.perf_counter()
    device = a.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    part = "imagenet" if a.imagenet else "mnist"
    frameworks = [f for f in a.frameworks.split(",") if f]
    precisions = [p for p in a.precisions.split(",") if p]
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        raise SystemExit(f"--seeds takes comma-separated integers, got {a.seeds!r}") from None
    models = [m for m in a.models.split(",") if m]
    allowed = ("resnet50",) if a.imagenet else MNIST_MODELS
    if set(frameworks) - {"tr", "pytorch"} or set(precisions) - set(PRECISIONS) or set(models) - set(allowed):
        raise SystemExit(f"--frameworks takes tr, pytorch; --precisions fp32, amp; --models {', '.join(allowed)}; "
                         f"got {a.frameworks!r}, {a.precisions!r}, {a.models!r}")
    recipe = Recipe(batch=a.batch, epochs=a.epochs, lr=a.lr, weight_decay=a.weight_decay,
                    label_smoothing=a.label_smoothing, warmup_epochs=a.warmup_epochs)
    if a.imagenet:
        data = ensure_folder(a)
        archs = [Arch(m, classes=data.classes, in_channels=3, side=a.resolution) for m in models]
        n_train = data.train_images
    else:
        data = load_mnist(a.train_limit, a.val_limit)
        archs = [Arch(m, width=a.width, blocks=a.blocks) for m in models]
        n_train = len(data.train_y)
    steps = n_train // recipe.batch
    if steps < 1:
        raise SystemExit(f"{n_train} training samples give no batch of {recipe.batch}")
    table_ = lr_table(recipe, steps)
    params = {}
    for arch in archs:
        for p in precisions:
            params[f"{arch.name}/{p}"] = check_params(arch, p == "amp")
    print(f"{part}: {n_train} training samples, {steps} steps an epoch, device {device}; parameters: " + "; ".join(
        f"{k} tr {v['tr']:,}" + (f" ({v['tr_padding_weights']:,} on padding channels)" if v["tr_padding_weights"]
                                 else "") + f", pytorch {v['pytorch']:,}" for k, v in params.items()), flush=True)
    out = _json_path(a.json, "convergence" if part == "mnist" else "convergence_resnet50",
                     "_cpu_smoke" if a.smoke else "") if a.json else None
    meta = {"command": sys.argv, "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "part": part, "environment": environment(device), "recipe": asdict(recipe),
            "models": [asdict(x) for x in archs], "parameters": params, "steps_per_epoch": steps,
            "train_samples": n_train, "lr_table": {"id": table_id(table_), "steps": len(table_),
                                                   "peak": float(table_.max()), "last": float(table_[-1])},
            "data": ({**{k: str(v) if isinstance(v, Path) else v for k, v in asdict(data).items()},
                      "tiles": a.tiles, "crop_area": list(a.crop_area)} if a.imagenet else
                     {"train": n_train, "val": len(data.val_y), "pad_to": 32, "augment": "RandomCrop(32, padding=2)"}),
            "smoke": a.smoke}
    isolate = a.isolate if a.isolate is not None else device.startswith("cuda")
    procs = FrameworkProcesses(part, data if a.imagenet else (a.train_limit, a.val_limit)) if isolate else None
    runs: list[dict] = []
    not_run: list[dict] = []
    took: dict[tuple, float] = {}
    for precision in precisions:  # a call cut short keeps whole precisions first
        for arch in archs:
            for seed in seeds:
                for fw in frameworks:
                    # this configuration's last run, else the framework's longest, else the longest of any
                    est = took.get((fw, arch.name, precision), max((v for k, v in took.items() if k[0] == fw),
                                                                    default=max(took.values(), default=0.0)))
                    now = time.perf_counter() - t_start
                    if a.deadline_s is not None and now + est > a.deadline_s:
                        not_run.append({"framework": fw, "model": arch.name, "precision": precision, "seed": seed,
                                        "why": f"deadline: {now:.0f} s gone, ~{est:.0f} s needed, {a.deadline_s:.0f} "
                                               "s allowed"})
                        print(f"not started (deadline): {fw} {arch.name} {precision} seed {seed}", flush=True)
                        continue
                    r = (procs.run(fw, arch, recipe, precision, seed, table_, device) if procs else
                         one_run(part, fw, arch, recipe, precision, seed, data, table_, device))
                    took[(fw, arch.name, precision)] = r["wall_s"]
                    runs.append(r)
                    if out is not None:
                        write_json(out, document(meta, runs, not_run))
    if procs:
        procs.close()
    doc = document(meta, runs, not_run)
    print()
    print(table(runs, doc["summary_top1"], doc["summary_curves"]))
    if out is not None:
        write_json(out, doc)
        print(f"wrote {out}")
    return 1 if any(r["error"] for r in runs) else 0


def _json_path(arg: str, stem: str, tag: str) -> Path:
    if arg != "auto":
        return Path(arg)
    return HERE / "results" / f"{stem}_{datetime.now(timezone.utc).date().isoformat()}{tag}.json"


if __name__ == "__main__":
    sys.exit(main())
