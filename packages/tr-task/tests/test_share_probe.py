"""ShareProbe (tr.task.share_probe): the model's CPU share timed against libjpeg-turbo alone, the faster kept."""

from __future__ import annotations

import pytest

from tr.task.share_probe import PROBE, SETTLE, ShareProbe


def _run(probe: ShareProbe, period: float, t: float) -> tuple[float, list[float]]:
    """Tick batches ``period`` seconds apart until the probe asks for a share; (the time, the shares asked)."""
    asked = []
    for _ in range(4 * PROBE):
        t += period
        share = probe.tick(t)
        if share is not None:
            asked.append(share)
            return t, asked
    return t, asked


@pytest.mark.parametrize("model_period, cpu_period, kept", [(0.040, 0.035, 1.0), (0.030, 0.035, 0.75)])
def test_the_faster_share_is_kept(model_period, cpu_period, kept):
    probe = ShareProbe()
    assert probe.tick(1.0) is None  # idle: nothing timed
    probe.start(0.75)
    assert probe.active and probe.state == "model"
    t, asked = _run(probe, model_period, 0.0)
    assert asked == [1.0] and probe.state == "cpu"  # then libjpeg-turbo alone
    t, asked = _run(probe, cpu_period, t)
    assert asked == [kept] and probe.state == "done" and probe.choice == kept
    rec = probe.record()
    assert rec["model_period_s"] == pytest.approx(model_period) and rec["cpu_period_s"] == pytest.approx(cpu_period)
    assert len(probe.periods["model"]) == len(probe.periods["cpu"]) == PROBE - SETTLE
    assert probe.tick(t + 1.0) is None  # once a run


def test_settling_batches_and_epoch_boundaries_are_not_timed():
    probe = ShareProbe()
    probe.start(0.5)
    t = 0.0
    for _ in range(SETTLE + 1):  # the first tick has no period; the next SETTLE are the switch's
        t += 9.0
        probe.tick(t)
    assert probe.periods["model"] == []
    probe.tick(t + 0.02)
    assert probe.periods["model"] == [pytest.approx(0.02)]
    probe.new_epoch()
    probe.tick(t + 50.0)  # after an epoch boundary: no period
    probe.tick(t + 50.03)
    assert probe.periods["model"] == [pytest.approx(0.02), pytest.approx(0.03)]


def test_a_model_share_of_one_needs_no_probe():
    probe = ShareProbe()
    probe.start(1.0)
    assert probe.state == "idle" and not probe.active
    probe.start(0.5)
    probe.state = "done"
    probe.start(0.25)  # (once a run)
    assert probe.state == "done"
