"""The measured checks behind device_decode's "auto" settings (tr.task.jpeg_feeder): two ways of feeding the same
training loop, timed one after the other, the faster kept.

ShareProbe, for ``cpu_share="auto"``: nvJPEG's hardware call blocks the loop's thread until the device is idle,
so a batch that calls it also delays the launch of the next step (the transfer and the launch come after the
call, with the device idle meanwhile): a cost the share model (DeviceJpegFeeder._rebalance) does not see, and
which made "auto" slower than libjpeg-turbo alone beside ResNet-50 (benchmarks/RESULTS.md, 2026-12-04). So once
the model gives a share below 1, it times PROBE training batches at that share, then PROBE at 1 (libjpeg-turbo
alone), and keeps the share with the shorter median period.

RefusedProbe, for ``refused="auto"``: the files the hardware engine refuses decoded by nvJPEG's decoupled decoder
or by libjpeg-turbo. The decoupled decoder lifts a pipeline-bound loop but slows one beside a step that keeps the
GPU busy (benchmarks/RESULTS.md) (its GPU phase waits for the step): which one wins is the model's and
the data's, so it is timed the same way, PROBE batches each.

Both time the loop's period between batches (the pipeline and the step together, as training runs them). The
first SETTLE periods of each phase are not counted (a batch prepared before the switch is still in flight), nor
the first period of an epoch (its boundary's work). Each runs once a run.
"""

from __future__ import annotations

import statistics
from typing import Any

PROBE = 8  # training batches timed at each of the two settings
SETTLE = 2  # of them, the first periods not counted


class ArmProbe:
    """Two settings (arms) timed in turn. States: "idle" (not started), the arms' names while timing them (the
    first, then the second), "done" (``choice``: the setting kept)."""

    def __init__(self, first: str, second: str) -> None:
        self.names = (first, second)
        self.state = "idle"
        self.values: dict[str, Any] = {}
        self.periods: dict[str, list[float]] = {first: [], second: []}
        self._seen = 0  # batches of the current phase
        self._last: float | None = None
        self.choice: Any = None  # the setting kept ("done")

    @property
    def active(self) -> bool:
        return self.state in self.names

    def begin(self, first: Any, second: Any) -> None:
        """Time ``first`` from the next batch on (the caller switches to it), then ``second``."""
        if self.state != "idle":
            return
        self.values = dict(zip(self.names, (first, second), strict=True))
        self.state, self._seen, self._last = self.names[0], 0, None

    def new_epoch(self) -> None:
        self._last = None  # the first period of an epoch holds the epoch boundary's work

    def tick(self, now: float) -> Any:
        """A training batch was enqueued at ``now`` (seconds): the setting to switch to, or None to keep it."""
        if not self.active:
            return None
        if self._last is not None:
            self._seen += 1
            if self._seen > SETTLE:
                self.periods[self.state].append(now - self._last)
        self._last = now
        if len(self.periods[self.state]) < PROBE - SETTLE:
            return None
        first, second = self.names
        if self.state == first:
            self.state, self._seen, self._last = second, 0, None
            return self.values[second]
        a, b = (statistics.median(self.periods[p]) for p in self.names)
        self.state = "done"
        self.choice = self.values[second] if b < a else self.values[first]
        return self.choice

    def record(self) -> dict:
        """What the probe measured, for the feeder's calibration record."""
        out: dict = {"state": self.state}
        for p, ts in self.periods.items():
            if ts:
                out[f"{p}_period_s"] = statistics.median(ts)
        if self.choice is not None:
            out["choice"] = self.choice
        return out


class ShareProbe(ArmProbe):
    """The model's CPU share ("model") against libjpeg-turbo alone ("cpu", a share of 1)."""

    def __init__(self) -> None:
        super().__init__("model", "cpu")
        self.model_share = 1.0

    def start(self, model_share: float) -> None:
        """Begin timing the model's share (below 1; at 1 there is nothing to compare)."""
        if self.state != "idle" or model_share >= 1.0:
            return
        self.model_share = float(model_share)
        self.begin(self.model_share, 1.0)

    def record(self) -> dict:
        return {**super().record(), "model_share": self.model_share}


class RefusedProbe(ArmProbe):
    """The engine's refusals decoded by nvJPEG's decoupled decoder ("nvjpeg") against libjpeg-turbo ("cpu")."""

    def __init__(self) -> None:
        super().__init__("nvjpeg", "cpu")

    def start(self) -> None:
        self.begin("nvjpeg", "cpu")
