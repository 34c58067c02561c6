"""End-to-end behaviour of DeepLearningTask on the CPU backend: determinism, NaN skipping, phase errors."""

import logging

import numpy as np
import pytest

from tr.algo.optimizer import SGD, AdamW
from tr.algo.scheduler import ConstantLR
from tr.core.errors import PhaseError
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, dropout, fc, maxpool, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH, CLASSES = 8, 4


def _data(n=64, h=6, c=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, h, h, c)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int32)


def _task(x, y, amp=False, opt=None, epochs=2, model=None):
    s = Settings().manual_seed(11).global_batch_size(BATCH).amp(amp)
    if amp:  # GradScaler's first scale (65536) overflows this model's first FP16 step: a skip of its own
        s.loss_scaling("dynamic", init=8192.0)
    feeder = ArrayFeeder((x, y), (x[:16], y[:16]), BATCH, seed=3, num_classes=CLASSES,
                         dtype=np.float16 if amp else np.float32)
    bp = model or seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2), fc(16), relu(), dropout(0.3), fc(CLASSES))
    return (DeepLearningTask(s).device("cpu").quiet().model(bp).optimizer(opt or SGD().momentum(0.9))
            .scheduler(ConstantLR().base_lr(0.05)).total_epochs(epochs).data(feeder))


def test_same_seed_gives_byte_identical_weights():
    x, y = _data()
    a = _task(x, y).compile()
    b = _task(x, y).compile()
    a.run()
    b.run()
    wa, wb = a.weights(), b.weights()
    assert wa.keys() == wb.keys() and len(wa) > 4
    for k in wa:
        assert wa[k].tobytes() == wb[k].tobytes(), k


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_nan_in_a_batch_skips_the_step_and_training_goes_on(amp, caplog):
    x, y = _data(n=32)
    x[BATCH * 2 + 3, 0, 0, 0] = np.nan  # one pixel of one sample of batch 2 (epoch order not shuffled below)
    task = _task(x, y, amp=amp, opt=AdamW().weight_decay(1e-4), epochs=1)
    task.feeder.shuffle = False
    task.compile()
    scale0 = float(task.backend.read(task.program.tensor("loss_scale")).reshape(-1)[0])
    before = {k: v.copy() for k, v in task.weights().items()}
    with caplog.at_level(logging.WARNING, logger="tr"):
        result = task.run()
    assert result.skipped_steps == 1 and result.history[0].skipped_steps == 1
    assert any("1 step(s) with non-finite gradients skipped" in r.getMessage() for r in caplog.records)
    after = task.weights()
    assert all(np.isfinite(v).all() for v in after.values())
    assert any(not np.array_equal(before[k], after[k]) for k in before)  # the other steps trained
    scale1 = float(task.backend.read(task.program.tensor("loss_scale")).reshape(-1)[0])
    assert scale1 == (scale0 / 2 if amp else scale0)


def test_planning_calls_after_compile_raise():
    x, y = _data()
    task = _task(x, y).compile()
    with pytest.raises(PhaseError, match="model\\(\\) is only allowed in phase PLANNING.*COMPILED"):
        task.model(seq(fc(3)))
    with pytest.raises(PhaseError, match="optimizer\\(\\)"):
        task.optimizer(SGD())
    with pytest.raises(PhaseError, match="already COMPILED"):
        task.compile()


def test_validation_metrics_are_reported():
    x, y = _data()
    r = _task(x, y, model=seq(fc(16), relu(), fc(CLASSES))).compile().run()
    assert r.best_epoch in (1, 2) and 0 <= r.best_top1 <= 1 and r.history[0].val_loss > 0
    assert r.history[0].top5 == 1.0  # 4 classes: top-5 is always right
