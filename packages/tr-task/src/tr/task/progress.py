"""Progress of one pass over an epoch (training or validation): steps done, rate and ETA.

On a terminal it is a tqdm bar on stderr, shown only once the pass has run ``delay`` seconds (short epochs
stay silent) and cleared when the pass ends, so the epoch table stays clean. Elsewhere (a log file, CI, a
batch job) a live bar would fill the log with carriage returns: the same text is printed as a plain line
at most every ``every`` seconds, so a long epoch still shows that it moves.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm

PLAIN_EVERY = 30.0  # seconds between two plain lines when not on a tty (tests set it to 0)


def is_tty(out: TextIO) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    def __init__(self, total: int, label: str, enabled: bool = True, out: TextIO | None = None,
                 delay: float = 2.0, every: float | None = None) -> None:
        self.total, self.label = total, label
        self.out = out or sys.stderr
        self.enabled = enabled
        self.every = PLAIN_EVERY if every is None else every
        self.start = self.last = time.perf_counter()
        self.lines = 0  # plain lines printed (not a tty)
        self._bar: tqdm | None = None
        if enabled and is_tty(self.out):
            self._bar = tqdm(total=total, desc=label, unit="step", file=self.out, delay=delay, leave=False,
                             dynamic_ncols=True, mininterval=0.1)

    def update(self, done: int) -> None:
        """``done`` steps of the pass are finished (cumulative)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            return
        now = time.perf_counter()
        if now - self.last >= self.every and done < self.total:
            self.last = now
            self.out.write(self.text(done, now - self.start) + "\n")
            self.out.flush()
            self.lines += 1

    def text(self, done: int, elapsed: float) -> str:
        """'<label>:  40%|####  | 4/10 [00:02<00:03, 2.00step/s]': tqdm's meter, the same on and off a tty."""
        return tqdm.format_meter(done, self.total, elapsed, prefix=self.label, unit="step", ascii=True, ncols=80)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
