"""The measured check behind device_decode's "auto" CPU share (tr.task.jpeg_feeder).

nvJPEG's hardware call blocks the loop's thread until the device is idle, so a batch that calls it also delays the
launch of the next step (the transfer and the launch come after the call, with the device idle meanwhile): a cost
the share model (DeviceJpegFeeder._rebalance) does not see, and which made "auto" slower than libjpeg-turbo alone
beside ResNet-50 (benchmarks/RESULTS.md, 2026-12-04). So once the model gives a share below 1, ShareProbe times
PROBE training batches at that share, then PROBE at 1 (libjpeg-turbo alone), by the loop's period between batches
(the pipeline and the step together, as training runs them), and keeps the share with the shorter median period.
The first SETTLE periods of each phase are not counted (a batch prepared before the switch is still in flight),
nor the first period of an epoch (its boundary's work). The probe runs once a run.
"""

from __future__ import annotations

import statistics

PROBE = 8  # training batches timed at each of the two shares
SETTLE = 2  # of them, the first periods not counted


class ShareProbe:
    """States: "idle" (not started), "model" and "cpu" (timing the model's share, then 1), "done"."""

    def __init__(self) -> None:
        self.state = "idle"
        self.model_share = 1.0
        self.periods: dict[str, list[float]] = {"model": [], "cpu": []}
        self._seen = 0  # batches of the current phase
        self._last: float | None = None
        self.choice: float | None = None  # the share kept ("done")

    @property
    def active(self) -> bool:
        return self.state in ("model", "cpu")

    def start(self, model_share: float) -> None:
        """Begin timing the model's share (below 1; at 1 there is nothing to compare)."""
        if self.state != "idle" or model_share >= 1.0:
            return
        self.state, self.model_share, self._seen, self._last = "model", float(model_share), 0, None

    def new_epoch(self) -> None:
        self._last = None  # the first period of an epoch holds the epoch boundary's work

    def tick(self, now: float) -> float | None:
        """A training batch was enqueued at ``now`` (seconds): the share to switch to, or None to keep it."""
        if not self.active:
            return None
        if self._last is not None:
            self._seen += 1
            if self._seen > SETTLE:
                self.periods[self.state].append(now - self._last)
        self._last = now
        if len(self.periods[self.state]) < PROBE - SETTLE:
            return None
        if self.state == "model":
            self.state, self._seen, self._last = "cpu", 0, None
            return 1.0
        model, cpu = (statistics.median(self.periods[p]) for p in ("model", "cpu"))
        self.state = "done"
        self.choice = 1.0 if cpu < model else self.model_share
        return self.choice

    def record(self) -> dict:
        """What the probe measured, for the feeder's calibration record."""
        out: dict = {"state": self.state, "model_share": self.model_share}
        for p, ts in self.periods.items():
            if ts:
                out[f"{p}_period_s"] = statistics.median(ts)
        if self.choice is not None:
            out["choice"] = self.choice
        return out
