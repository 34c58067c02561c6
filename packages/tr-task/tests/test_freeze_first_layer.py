"""task.freeze_first_layer_after(epoch) on the CPU backend: the first trained layer stops moving after that epoch
while the others train on, the frozen steps leave its backward and update out, a resume across the switch gives
the unbroken run's bytes, and bad values are refused naming them."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import SGD, AdamW
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.memory import Role
from tr.core.settings import Settings
from tr.graph.blueprint import bn, channel_padding, fc, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(7)
X = _rng.standard_normal((48, 4, 4, 1)).astype(np.float32)
Y = (np.arange(48) % 3).astype(np.int32)


def _task(freeze: int | None = 2, epochs: int = 4, model=None, opt=None, clip: float | None = None):
    feeder = ArrayFeeder((X[:40], Y[:40]), (X[40:], Y[40:]), BATCH, seed=2, num_classes=3)
    t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH)).device("cpu").quiet()
         .model(model or seq(fc(8), bn(), relu(), fc(6), relu(), fc(3)))
         .optimizer(opt or AdamW().weight_decay(0.05)).scheduler(ConstantLR(0.02)).data(feeder).total_epochs(epochs))
    if clip is not None:
        t.grad_clip(clip, mode="norm")
    return t if freeze is None else t.freeze_first_layer_after(freeze)


def _layers(task) -> dict[int, dict[str, bytes]]:
    out: dict[int, dict[str, bytes]] = {}
    for i in task.program.inits:
        if i.tensor.region.role is not Role.PARAM:
            continue
        out.setdefault(i.layer, {})[i.tensor.name] = task.backend.read(i.tensor).tobytes()
    return out


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


@pytest.mark.parametrize("opt,clip", [(None, None), (SGD().momentum(0.9).weight_decay(1e-3), 1.0)])
def test_the_first_layer_stops_after_the_epoch_and_the_rest_train_on(opt, clip):
    t = _task(opt=opt, clip=clip).compile()
    first = min(_layers(t))
    seen = [_layers(t)]
    for _ in range(4):
        t.run(1)
        seen.append(_layers(t))
    assert seen[1][first] != seen[0][first] and seen[2][first] != seen[1][first]  # epochs 1 and 2 train it
    assert seen[2][first] == seen[3][first] == seen[4][first]  # then not a bit of it changes
    others = [layer for layer in seen[0] if layer != first]
    for layer in others:
        assert seen[3][layer] != seen[2][layer] and seen[4][layer] != seen[3][layer], layer


def test_the_frozen_steps_drop_the_first_layers_backward_and_update():
    t = _task().compile()
    steps = t.program.steps
    first = min(_layers(t))
    plain, frozen = steps["train_a"].calls, steps["train_a_frozen"].calls
    assert any(c.layer == first and c.part == "first_bwd_a" for c in plain)
    assert not any(c.part == "first_bwd_a" for c in frozen)
    updated = {c.args["w"].name for c in frozen if c.op == "tensor_optimizer"}
    assert updated and not any(n.startswith(f"L{first}.") for n in updated)
    assert t.launches_per_step == 2  # one captured step either way
    before = _state(t)
    assert "train_a_frozen" in t.dry_run().ran and _state(t) == before  # the dry run runs it too, then restores


def test_a_parameterless_first_layer_freezes_the_first_trained_one():
    t = _task(model=seq(channel_padding(), fc(8), relu(), fc(3))).compile()
    first = min(_layers(t))
    frozen = t.program.steps["train_a_frozen"].calls
    plain = t.program.steps["train_a"].calls
    assert len(frozen) < len(plain)
    before = None
    for epoch in range(4):
        t.run(1)
        now = _layers(t)
        if epoch >= 2:
            assert now[first] == before[first]
        before = now


def test_a_frozen_run_and_its_resume_across_the_switch_give_the_same_bytes(tmp_path):
    unbroken = _task().compile()
    unbroken.run()
    half = _task().compile()
    half.run(1)
    half.save(tmp_path / "ck")  # before the switch at epoch 2
    resumed = _task().resume(tmp_path / "ck")
    resumed.run()
    assert _state(resumed) == _state(unbroken)
    with pytest.raises(ConfigError, match="freeze_first_after"):
        _task(freeze=3).resume(tmp_path / "ck")  # another switch epoch is another configuration


def test_without_the_switch_the_plan_has_no_frozen_steps_and_trains_as_before():
    plain = _task(freeze=None).compile()
    assert "train_a_frozen" not in plain.program.steps
    plain.run(2)
    frozen_later = _task(freeze=4).compile()
    frozen_later.run(2)
    assert _state(plain) == _state(frozen_later)  # the same step until the switch


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_bad_values_are_refused_at_the_call(bad):
    with pytest.raises(ConfigError, match="freeze_first_layer_after"):
        DeepLearningTask().freeze_first_layer_after(bad)


def test_an_epoch_past_the_run_is_refused_at_compile_naming_both():
    with pytest.raises(ConfigError, match=r"freeze_first_layer_after\(5\).*total_epochs\(4\)"):
        _task(freeze=5).compile()


@pytest.mark.parametrize("mode", ["accumulate", "bf16", "fp16"])
def test_the_freeze_holds_with_accumulation_and_amp(mode):
    """The frozen steps exist in every step set: accumulation's holding micro-steps and the 16-bit plans."""
    if mode == "accumulate":
        t = _task().accumulate(2)
    else:
        feeder = ArrayFeeder((X[:40], Y[:40]), (X[40:], Y[40:]), BATCH, seed=2, num_classes=3,
                             dtype={"bf16": "bfloat16", "fp16": "float16"}[mode])
        t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH).amp(mode)).device("cpu").quiet()
             .model(seq(fc(8), bn(), relu(), fc(6), relu(), fc(3))).optimizer(AdamW().weight_decay(0.05))
             .scheduler(ConstantLR(0.02)).data(feeder).total_epochs(4).freeze_first_layer_after(2))
    t.compile()
    first = min(_layers(t))
    seen = [_layers(t)]
    for _ in range(4):
        t.run(1)
        seen.append(_layers(t))
    assert seen[1][first] != seen[0][first] and seen[2][first] == seen[3][first] == seen[4][first]
    assert all(seen[3][layer] != seen[4][layer] for layer in seen[0] if layer != first)
