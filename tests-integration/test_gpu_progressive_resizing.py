"""Progressive resizing on the CUDA backend (GPU-only, skipped without a device; written without a GPU, for a
later GPU session). The CUDA side needs nothing new but the packed host-to-device copy (h2d_copy's ``packed``:
the smaller side's batch read from the start of the final side's pinned zone) and one captured graph per side's
step, which capture already makes per step.

Checked: every training copy puts on the device exactly the bytes the pipeline packed into the zone, at each
epoch's side; the first step's loss at the lower side is the CPU backend's within 1e-4 relative (FP32; a first
choice, not yet measured: the loss depends only on the initial weights and the batch there); two CUDA runs and a
CUDA resume across the switch give the same bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.norm import NormMode
from tr.core.settings import Settings
from tr.data import ArrayDataset, CenterCrop, PreprocessorSettings, RandomHorizontalFlip, RandomResizedCrop, Resize
from tr.graph.blueprint import bn, conv, fc, gap, maxpool, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.pipeline import PipelineFeeder, staging_dtype

pytestmark = pytest.mark.gpu

_rng = np.random.default_rng(3)
DS = ArrayDataset((_rng.integers(0, 256, (96, 72, 72, 3), dtype=np.uint8), np.arange(96) % 4),
                  (_rng.integers(0, 256, (32, 72, 72, 3), dtype=np.uint8), np.arange(32) % 4), num_classes=4)
CNN = seq(conv(16, 3, 1, 1), bn(), relu(), maxpool(2), conv(32, 3, 1, 1), bn(), relu(), maxpool(2), conv(32, 3, 2, 1),
          bn(), relu(), gap(), fc(4))


def _task(device: str, amp: bool = False, epochs: int = 4) -> DeepLearningTask:
    s = Settings().manual_seed(4).global_batch_size(16).amp(amp).progressive_resizing(32, 64, 1, 2)  # 32, 32, 64, 64
    pre = (PreprocessorSettings().dataset(DS).preprocess_workers(2).normalization(NormMode.IMAGENET)
           .train_transforms(RandomResizedCrop(64, scale=(0.4, 1.0)), RandomHorizontalFlip())
           .val_transforms(Resize(72), CenterCrop(64)))
    feeder = PipelineFeeder(pre, 16, seed=5, dtype=staging_dtype(s))
    return (DeepLearningTask(s).device(device).quiet().model(CNN).optimizer(SGD().momentum(0.9))
            .scheduler(ConstantLR(0.05)).data(feeder).total_epochs(epochs))


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_each_copy_puts_the_packed_batch_on_the_device(amp):
    t = _task("cuda", amp).compile()
    assert t.backend.name == "cuda" and sorted(t._steps.sides) == [32]
    be, feeder = t.backend, t.feeder
    launch, checked = be.launch, []

    def spy(graph, *a):
        out = launch(graph, *a)
        if graph.name.startswith("transfer"):
            (copy,) = graph.calls
            be.synchronize()
            n = int(np.prod(copy.args["data"].shape.dims))
            host = feeder.buffers()[copy.attrs["buffer"]][1].reshape(-1)[:n]
            assert be.read(copy.args["data"]).reshape(-1).tobytes() == host.tobytes(), graph.name
            checked.append((graph.name, copy.args["data"].shape.h))
        return out

    be.launch = spy
    t.run()
    sides = [h for name, h in checked if name.startswith("transfer") and "@" in name]
    assert sides and set(sides) == {32} and {h for _, h in checked} == {32, 64}


def test_the_first_lower_side_step_matches_the_cpu_backend():
    losses = {}
    for device in ("cpu", "cuda"):
        got = []
        t = _task(device, epochs=4).on_step(lambda k, r, got=got: got.append(float(r[0])) if k == 0 else None)
        t.compile().run(1)
        losses[device] = got[0]
    assert abs(losses["cuda"] - losses["cpu"]) <= 1e-4 * abs(losses["cpu"]), losses


def test_cuda_reruns_and_a_resume_across_the_switch_give_the_same_bytes(tmp_path):
    a, b = _task("cuda").compile(), _task("cuda").compile()
    a.run()
    b.run()
    assert _state(a) == _state(b)
    half = _task("cuda").compile()
    half.run(2)  # the next epoch is the first at 64
    half.save(tmp_path / "ck")
    resumed = _task("cuda").resume(tmp_path / "ck")
    resumed.run()
    assert _state(resumed) == _state(a)
