"""The baseline task and the observers test_public_api_effects.py's table proves effects with: a small CNN task on
the CPU backend (its plan, its trained weights, a run's history) and the first batches PREPROCESSOR_SETTING's
pipeline delivers (also for JPEG folders, the transfer ops, the caches)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import renaissance as R
from tr.core.norm import NormMode
from tr.data import ArrayDataset, Preprocessor, PreprocessorSettings
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

BATCH, H, C, K = 8, 4, 2, 3


# --- the baseline and what is observed ------------------------------------------------------------------------


def _data(n: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, H, H, C)).astype(np.float32)
    return x, (np.arange(n) % K).astype(np.int32)


def _feeder(batch: int = BATCH, seed: int = 0) -> ArrayFeeder:
    x, y = _data(seed=seed)
    return ArrayFeeder((x, y), (x[:8], y[:8]), batch, seed=1, num_classes=K)


MODEL = R.seq(R.conv(4, 3, p=1), R.bn(), R.relu(), R.gap(), R.fc(K))


def task(settings: R.Settings | None = None, model=MODEL, feeder=None, **chain) -> DeepLearningTask:
    """The baseline task; ``chain`` replaces a chain call (name=args tuple) or adds one."""
    calls = {"device": ("cpu",), "quiet": (), "model": (model,), "optimizer": (R.SGD(),),
             "scheduler": (R.ConstantLR(0.1),), "total_epochs": (1,), "data": (feeder or _feeder(),)}
    calls.update(chain)
    t = DeepLearningTask(settings or R.Settings().global_batch_size(BATCH))
    for name, args in calls.items():
        t = getattr(t, name)(*args)
    return t


def plan(t: DeepLearningTask) -> list[tuple]:
    """Every op call of the compiled plan with its part and attributes, step by step in branch order."""
    t = t if t.compiled else t.compile()
    return [(name, i, b.stream.name, b.after, c.part, c.op, tuple(sorted((k, repr(a)) for k, a in c.attrs.items())))
            for name, step in sorted(t.program.steps.items()) for i, b in enumerate(step.branches)
            for c in b.calls]


def weights(t: DeepLearningTask, epochs: int = 0) -> bytes:
    t = t if t.compiled else t.compile()
    if epochs:
        t.run(epochs=epochs)
    return b"".join(v.tobytes() for _, v in sorted(t.weights().items()))


def differs(observe: Callable[[DeepLearningTask], object], **changed) -> None:
    """``observe`` gives another value for the task with ``changed`` than for the baseline."""
    settings = changed.pop("settings", None)
    model = changed.pop("model", MODEL)
    base, other = observe(task()), observe(task(settings, model, **changed))
    assert base != other


def run_differs(**changed) -> None:
    differs(lambda t: weights(t, 1), **changed)


def plan_differs(**changed) -> None:
    differs(plan, **changed)


# --- PREPROCESSOR_SETTING: observed on the first batches the pipeline delivers ----------------------------------

def _pre(configure: Callable[[PreprocessorSettings], PreprocessorSettings] = lambda s: s) -> PreprocessorSettings:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 255, (20, 6, 6, 1), dtype=np.uint8)
    y = (np.arange(20) % K).astype(np.int32)
    ds = ArrayDataset((x[:16], y[:16]), (x[16:], y[16:]), num_classes=K)
    return configure(PreprocessorSettings().dataset(ds).preprocess_workers(1).seed(3)).commit()


def batches(s: PreprocessorSettings, train: bool = True) -> list[tuple[bytes, bytes]]:
    f = PipelineFeeder(s, 4, seed=3)
    out = []
    for k, buf, n in f.epoch(0, train):
        labels, data = f.buffers()[buf]
        out.append((labels[:n].tobytes(), data[:n].tobytes()))
        f.release(k)
    f.close()
    return out


def pre_differs(configure, train: bool = True, observe=batches) -> None:
    assert observe(_pre(), train) != observe(_pre(configure), train)


def _head_ops(s: PreprocessorSettings, train: bool) -> list[str]:
    """The ops at the head of the training step of a task fed by the feeder these settings give."""
    from tr.graph.steps import Part
    from tr.task.pipeline import feeder_from_preprocessor

    settings = R.Settings().global_batch_size(4).manual_seed(3)
    t = task(settings, feeder=feeder_from_preprocessor(settings, pre=s)).compile()
    return [c.op for c in t.program.step("train_a").calls_of(Part.FIRST_FWD_A.value)]


def _jpeg_batches_differ(configure, observe=batches) -> None:
    """The first batches of a JPEG folder (128 px photographs-to-be, made by Pillow) cropped to 16 px, plain and
    configured (or what ``observe`` sees of the two settings): for settings that act on JPEG decoding only."""
    import tempfile
    from pathlib import Path

    image = pytest.importorskip("PIL.Image")
    from tr.data import ImageFolder, RandomResizedCrop, _native

    if not _native.jpeg_available():
        pytest.skip("tr-data was built without libjpeg-turbo")
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as tmp:
        for c in ("a", "b", "c"):  # (MODEL's three classes)
            (Path(tmp) / c).mkdir()
            for i in range(4):
                px = (rng.random((8, 8, 3)) * 255).astype(np.uint8).repeat(16, 0).repeat(16, 1)
                image.fromarray(px).save(Path(tmp) / c / f"{i}.jpg", quality=90)
        ds = ImageFolder(tmp)

        def pre(conf):
            return conf(PreprocessorSettings().dataset(ds).preprocess_workers(1).seed(3)
                        .normalization(NormMode.IMAGENET).train_transforms(RandomResizedCrop(16))).commit()

        assert observe(pre(lambda s: s)) != observe(pre(configure))


def _transfer_ops(s: PreprocessorSettings) -> list[str]:
    """The ops of the training transfer graph of a task fed by the feeder these settings give."""
    from tr.task.pipeline import feeder_from_preprocessor

    settings = R.Settings().global_batch_size(4).manual_seed(3)
    t = task(settings, feeder=feeder_from_preprocessor(settings, pre=s)).compile()
    return [c.op for c in t.program.step("transfer_a").calls]


def _opened(configure) -> dict:
    """The arguments PreprocessorSettings hands the dataset loader (a named dataset: no files are read)."""
    import tr.data.settings as ds

    seen: dict = {}

    def fake(name, path, download, workers):
        seen.update(download=download, workers=workers)
        return "opened"

    orig, ds.open_dataset = ds.open_dataset, fake
    try:
        configure(PreprocessorSettings().dataset("mnist", "/nonexistent")).open_dataset()
    finally:
        ds.open_dataset = orig
    return seen


def _after_pass(s: PreprocessorSettings, train: bool, read: Callable[[Preprocessor], object]) -> object:
    """``read(preprocessor)`` after one whole pass (epoch 0) of a PipelineFeeder over ``s``."""
    f = PipelineFeeder(s, 4, seed=3)
    for k, _b, _n in f.epoch(0, train):
        f.release(k)
    value = read(f.pre)
    f.close()
    return value


def _sdmp_cached(s: PreprocessorSettings, train: bool) -> tuple[int, ...]:
    """The epochs SDMP has computed ahead after training epoch 0 (its batches are the same bytes either way)."""
    return _after_pass(s, True, lambda pre: pre.sdmp_cached_epochs)


def _cpvs_ready(s: PreprocessorSettings, train: bool) -> bool:
    return _after_pass(s, False, lambda pre: pre.cpvs_ready)
