"""Progressive resizing end to end on the CPU backend: a small CNN fed by tr.data's pipeline trains each epoch at
its scheduled side (the captured step of that side, on batches the pipeline made at that side), validates at the
final side, resumes across a switch to the unbroken run's bytes, and bad schedules are refused naming the problem."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.norm import NormMode
from tr.core.settings import Settings
from tr.data import ArrayDataset, CenterCrop, PreprocessorSettings, RandomHorizontalFlip, RandomResizedCrop, Resize
from tr.graph.blueprint import bn, conv, fc, gap, maxpool, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

_rng = np.random.default_rng(3)
DS = ArrayDataset((_rng.integers(0, 256, (24, 40, 40, 3), dtype=np.uint8), np.arange(24) % 3),
                  (_rng.integers(0, 256, (8, 40, 40, 3), dtype=np.uint8), np.arange(8) % 3), num_classes=3)
CNN = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2), conv(16, 3, 1, 1), bn(), relu(), maxpool(2), gap(), fc(3))


def _feeder(side: int = 32, workers: int = 2) -> PipelineFeeder:
    pre = (PreprocessorSettings().dataset(DS).preprocess_workers(workers).normalization(NormMode.IMAGENET)
           .train_transforms(RandomResizedCrop(side, scale=(0.4, 1.0)), RandomHorizontalFlip())
           .val_transforms(Resize(36), CenterCrop(side)))
    return PipelineFeeder(pre, 8, seed=5)


def _task(settings: Settings | None = None, epochs: int = 4, model=CNN, feeder=None) -> DeepLearningTask:
    s = settings or Settings().progressive_resizing(16, 32, 1, 2, multiple=16)  # sides 16, 16, 32, 32
    return (DeepLearningTask(s.manual_seed(4).global_batch_size(8)).device("cpu").quiet().model(model)
            .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(ConstantLR(0.05))
            .data(feeder or _feeder()).total_epochs(epochs))


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


def _spy(task) -> list[tuple[str, tuple[int, ...]]]:
    """Every launched graph's name and the batch shape its first convolution (or copy) read."""
    seen: list[tuple[str, tuple[int, ...]]] = []
    launch = task.backend.launch

    def spy(graph, *a):
        first = next((c for c in graph.calls if c.op in ("conv_fwd", "h2d_copy")), None)
        x = None if first is None else first.args["x" if first.op == "conv_fwd" else "data"]
        seen.append((graph.name, () if x is None else tuple(x.shape.dims)))
        return launch(graph, *a)

    task.backend.launch = spy
    return seen


def test_each_epoch_trains_at_its_side_and_validates_at_the_final_one():
    t = _task().compile()
    assert t._resolved.train_sides == (16, 16, 32, 32) and t.spec.progressive_resolutions == (16,)
    assert sorted(t._steps.sides) == [16]
    for epoch, side in enumerate((16, 16, 32, 32)):
        seen = _spy(t)
        rec = t.run(1).history[0]
        assert np.isfinite(rec.train_loss) and rec.top1 is not None
        trains = [(n, x) for n, x in seen if n.startswith("train")]
        suffix = "@16" if side == 16 else ""
        assert [n for n, _ in trains] == [f"train_a{suffix}", f"train_b{suffix}", f"train_last_a{suffix}"], epoch
        assert {x for _, x in trains} == {(8, side, side, 3)}  # the step saw batches of the epoch's side
        copies = [x for n, x in seen if n.startswith("transfer")]
        assert copies == [(8, side, side, 3)] * 3 + [(8, 32, 32, 3)] * 1  # 3 training batches, then validation
        assert {x for n, x in seen if n.startswith("val_") and x} == {(8, 32, 32, 3)}  # validation: the final side


def test_a_resume_before_and_across_the_switch_gives_the_unbroken_runs_bytes(tmp_path):
    unbroken = _task().compile()
    unbroken.run()
    for done in (1, 2):  # in the first side's epochs, and right at the switch (epoch 3 trains at 32)
        half = _task().compile()
        half.run(done)
        half.save(tmp_path / f"ck{done}")
        resumed = _task().resume(tmp_path / f"ck{done}")
        resumed.run()
        assert _state(resumed) == _state(unbroken), done
    with pytest.raises(ConfigError, match=r"another configuration .*settings\.res_ramp"):
        _task(Settings().progressive_resizing(16, 32, 0, 2, multiple=16)).resume(tmp_path / "ck2")
    with pytest.raises(ConfigError, match=r"another configuration .*settings\.train_res_begin: the checkpoint has 16"):
        _task(Settings()).resume(tmp_path / "ck2")  # no schedule at all
    longer = _task(epochs=5).resume(tmp_path / "ck2")  # an explicit ramp's past does not change with the run
    longer.run()
    assert longer._resolved.train_sides == (16, 16, 32, 32, 32)


def test_the_same_bytes_for_any_worker_count():
    runs = []
    for workers in (1, 3):
        t = _task(Settings().progressive_resizing(16, 32, 0, 1, multiple=16), epochs=2,
                  feeder=_feeder(workers=workers)).compile()
        t.run()
        runs.append(_state(t))
    assert runs[0] == runs[1]


def test_a_whole_run_ramp_does_not_stretch_on_resume(tmp_path):
    ramp = _task(Settings().train_resolution(32, 64), epochs=3, feeder=_feeder(64))
    t = ramp.compile()
    assert t._resolved.train_sides == (32, 64, 64)
    t.run(2)
    t.save(tmp_path / "ck")
    with pytest.raises(ConfigError, match=r"resolution schedule then trains epoch 1 \(from 0\) at 32, where the "
                                          r"checkpoint trained it at 64"):
        _task(Settings().train_resolution(32, 64), epochs=4, feeder=_feeder(64)).resume(tmp_path / "ck")


def test_bad_schedules_are_refused_at_compile_naming_the_problem():
    strided = seq(conv(8, 3, 2, 1), bn(), relu(), maxpool(2), conv(16, 3, 2, 1), relu(), gap(), fc(3))
    with pytest.raises(ConfigError, match=r"training side 20 is not a multiple of 8, the network's total stride: "
                                          r"layer \d+ \(.*\) takes the 32x32 input down by 8"):
        _task(Settings().progressive_resizing(20, 32, 0, 3, multiple=4), model=strided).compile()
    with pytest.raises(ConfigError, match=r"progressive_resizing\(16, 64, .*\) grows past the compiled maximum: the "
                                          r"data's transforms make 32x32 samples"):
        _task(Settings().progressive_resizing(16, 64, 0, 2, multiple=16)).compile()
    with pytest.raises(ConfigError, match=r"the last epoch trains at 16, not the final side 32 \(end_ramp 9 is past "
                                          r"the last epoch 3"):
        _task(Settings().progressive_resizing(16, 32, 1, 9, multiple=16)).compile()
    x = _rng.standard_normal((16, 32, 32, 3)).astype(np.float32)
    arrays = ArrayFeeder((x, np.arange(16) % 3), None, 8, seed=1, num_classes=3)
    with pytest.raises(ConfigError, match=r"progressive resizing: ArrayFeeder serves one sample shape \(32, 32, 3\)"):
        _task(feeder=arrays).compile()
    center = (PreprocessorSettings().dataset(DS).normalization(NormMode.IMAGENET)
              .train_transforms(Resize(36), CenterCrop(32)).val_transforms(Resize(36), CenterCrop(32)))
    with pytest.raises(ConfigError, match=r"CenterCrop"):
        _task(feeder=PipelineFeeder(center, 8, seed=5)).compile()


def test_a_dry_run_launches_every_sides_step_and_changes_nothing():
    plain = _task(epochs=4).compile()
    plain.run(3)
    t = _task(epochs=4).compile()
    t.run(1)
    seen = _spy(t)
    report = t.dry_run()
    assert {"train_a", "train_a@16"} <= set(report.ran)
    assert ("transfer_a@16", (8, 16, 16, 3)) in seen and ("transfer_a", (8, 32, 32, 3)) in seen
    t.run(2)  # the second epoch at 16 and the third at 32: the bytes of the run without the dry run
    assert _state(t) == _state(plain)
