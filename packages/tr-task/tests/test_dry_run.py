"""task.dry_run() on the CPU backend: one training and one validation step, then nothing trained (a following
run() gives an unbroken run's bytes), and a report whose numbers are the Program's."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.optimizer import Adam
from tr.algo.scheduler import ConstantLR
from tr.core.errors import PhaseError
from tr.core.settings import Settings
from tr.graph.blueprint import bn, dropout, fc, relu, seq
from tr.task import checkpoint, engines
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(3)
X = _rng.standard_normal((52, 4, 4, 1)).astype(np.float32)
Y = (np.arange(52) % 3).astype(np.int32)


def _task(ema: bool = False) -> DeepLearningTask:
    feeder = ArrayFeeder((X[:36], Y[:36]), (X[36:], Y[36:]), BATCH, seed=2, num_classes=3)
    t = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(fc(16), bn(), relu(), dropout(0.3), fc(3))).optimizer(Adam()).scheduler(ConstantLR(0.01))
         .data(feeder).total_epochs(2))
    return t.ema(0.9) if ema else t


def _state(task) -> dict[str, bytes]:
    return {t.name: task.backend.read(t).tobytes() for t in checkpoint.state_tensors(task.program)}


def _history(result) -> list[tuple[float, ...]]:
    return [(r.train_loss, r.val_loss, r.top1, r.ema_top1) for r in result.history]


@pytest.mark.parametrize("ema", [False, True])
def test_a_dry_run_trains_nothing(ema):
    plain = _task(ema).compile()
    plain_result = plain.run()
    dry = _task(ema).compile()
    before = _state(dry)
    report = dry.dry_run()
    assert _state(dry) == before  # weights, moments, EMA, statistics, counters, dropout seed: as compiled
    assert "train_a" in report.ran and "val_a" in report.ran and ("val_ema_a" in report.ran) == ema
    assert np.isfinite(report.train_result[0]) and np.isfinite(report.val_result[0])
    assert _history(dry.run()) == _history(plain_result)
    assert _state(dry) == _state(plain)  # byte for byte


def test_the_report_holds_the_programs_numbers():
    t = _task().compile()
    r = t.dry_run()
    prog = t.program
    assert r.arena_bytes == prog.layout.total_bytes == sum(r.bytes_by_role.values())
    for role in ("PARAM", "GRAD", "MOMENT1", "MOMENT2", "SCALAR", "INPUT"):
        want = sum(e - s for reg, (s, e) in prog.layout.regions.items() if reg.role.name == role)
        assert r.bytes_by_role[role] == want > 0
    assert r.ops_per_step == {n: len(s.calls) for n, s in prog.steps.items()}
    assert r.ops_per_step["train_a"] > r.ops_per_step["val_a"] > 0
    assert r.launches_per_step == t.launches_per_step == 2
    assert r.engines == engines.used(t) == {"backend": "cpu", "convolutions": []}
    assert len(r.host_buffers) == 2 and r.host_buffer_bytes == sum(a.nbytes + b.nbytes for a, b in t.feeder.buffers())
    # the validation batch's numbers are predict()'s on it (the first 8 validation samples, in order)
    logits = t.predict(X[36:44]).astype(np.float64)
    top1 = float(np.mean(np.argmax(logits, axis=1) == Y[36:44]))
    assert r.val_result[1] == pytest.approx(top1)
    assert "arena" in str(r) and "launches per training step: 2" in str(r)


def test_a_dry_run_needs_a_compiled_task():
    with pytest.raises(PhaseError, match="compile"):
        _task().dry_run()
