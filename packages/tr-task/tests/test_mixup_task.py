"""task.mixup() on the CPU backend: every training step mixes its batch on the device with the draw of the step's
advanced seed stream (tr.core.mixup.draw of dropout_seed, which the run seeds from its seed and rank and a
checkpoint keeps), the loss reads that lam; a run is the same bytes twice and a resumed run gives the unbroken
run's bytes; validation neither mixes nor reads lam; bad settings are refused when configured."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.loss import CrossEntropyLoss
from tr.algo.onehot_loss import BCEWithLogitsLoss
from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core import mixup as mx
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import conv, fc, gap, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH, H, W = 8, 6, 6
_rng = np.random.default_rng(0)
X = _rng.standard_normal((8 * BATCH + 16, H, W, 3)).astype(np.float32)
Y = (X.reshape(len(X), -1)[:, :4].argmax(1)).astype(np.int32)


def _task(plain: bool = False, **mix: float) -> DeepLearningTask:
    n = 8 * BATCH
    feeder = ArrayFeeder((X[:n], Y[:n]), (X[n:], Y[n:]), BATCH, shuffle=True, num_classes=4)
    t = (DeepLearningTask(Settings().manual_seed(7).global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(conv(8, 3), relu(), gap(), fc(4))).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR(0.05))
         .loss(CrossEntropyLoss().label_smoothing(0.1)).data(feeder).total_epochs(4))
    return t if plain else t.mixup(**mix)


def _state(t) -> dict[str, bytes]:
    return {x.name: t.backend.read(x).tobytes() for x in checkpoint.state_tensors(t.program)}


def _stream(t) -> int:
    return int(np.asarray(t.backend.read(t.program.named["dropout_seed"])).reshape(-1).view("<u8")[0])


def test_each_step_mixes_with_the_draw_of_its_advanced_stream():
    cfg = mx.MixupConfig(0.8, 1.0, prob=0.9, switch_prob=0.5)
    task = _task(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.9, switch_prob=0.5).compile()
    seen = []

    def step(_k, _result):
        key = _stream(task)  # the model has no dropout: the mixup op is the stream's only reader
        lam = task.backend.read(task.program.named["mixup_lam"]).reshape(-1)[0]
        d = mx.draw(key, cfg, H, W)
        assert lam == d.lam32
        seen.append((d.lam, d.cutmix))

    task.on_step(step)
    task.run(2)
    assert len(seen) == 16 and len({lam for lam, _ in seen}) > 8
    assert any(c for _, c in seen) and any(not c and lam != 1.0 for lam, c in seen)


def test_a_mixup_run_is_the_same_bytes_twice_and_differs_from_a_plain_one():
    a, b, plain = _task().compile(), _task().compile(), _task(plain=True).compile()
    ha, hb = a.run(2).history, b.run(2).history
    assert _state(a) == _state(b) and [r.train_loss for r in ha] == [r.train_loss for r in hb]
    plain.run(2)
    assert _state(plain) != _state(a)


def test_a_resumed_mixup_run_gives_the_unbroken_run_s_bytes(tmp_path):
    full = _task().compile()
    full.run(4)
    part = _task().compile()
    part.run(2)
    part.save(tmp_path / "ck")
    resumed = _task().resume(tmp_path / "ck")
    resumed.run(2)
    assert _state(resumed) == _state(full)
    for other in ({"prob": 0.5}, {"plain": True}):  # another mixing is another run
        with pytest.raises(ConfigError, match="mixup"):
            _task(**other).resume(tmp_path / "ck")


def test_validation_neither_mixes_nor_reads_lam():
    task = _task().compile()
    calls = [c for name, s in task.program.steps.items() if name.startswith("val") for c in s.calls]
    assert calls and not any(c.op == "mixup" or "lam" in c.args for c in calls)
    train = [c for name, s in task.program.steps.items() if name.startswith("train") for c in s.calls]
    assert any(c.op == "mixup" for c in train)
    assert all(c.args.get("lam") is not None for c in train if c.op in ("softmax_ce_fwd", "softmax_ce_bwd"))


@pytest.mark.parametrize("kw,match", [({"mixup_alpha": 0.0, "cutmix_alpha": 0.0}, "both are 0"),
                                      ({"mixup_alpha": -0.1}, "mixup_alpha"), ({"prob": 1.5}, "prob"),
                                      ({"switch_prob": -0.5}, "switch_prob"), ({"cutmix_alpha": True}, "cutmix")])
def test_bad_settings_are_refused_when_configured(kw, match):
    with pytest.raises(ConfigError, match=match):
        _task(**kw)


def test_a_loss_without_soft_targets_is_refused():
    with pytest.raises(ConfigError, match="softmax_ce"):
        _task().loss(BCEWithLogitsLoss()).compile()
