"""tr.task.progress: a tqdm bar on a terminal, plain lines with rate and ETA elsewhere, nothing when off."""

import io
import re

from tr.task.progress import Progress


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_tty_prints_plain_lines_with_rate_and_eta():
    out = io.StringIO()
    p = Progress(10, "epoch 1 train", out=out, every=0.0)
    for k in range(10):
        p.update(k + 1)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 9 == p.lines  # every step but the last (the epoch table follows)
    assert "\r" not in out.getvalue()
    assert re.match(r"epoch 1 train: +40%\|.*\| 4/10 \[\d\d:\d\d<\d\d:\d\d, .*step/s\]", lines[3]), lines[3]


def test_not_a_tty_waits_for_the_interval():
    out = io.StringIO()
    p = Progress(100, "val", out=out, every=3600.0)
    for k in range(100):
        p.update(k + 1)
    assert out.getvalue() == ""


def test_a_tty_gets_a_tqdm_bar_that_is_cleared():
    out = FakeTty()
    p = Progress(5, "epoch 2 train", out=out, delay=0.0)
    for k in range(5):
        p.update(k + 1)
    p._bar.refresh()  # tqdm redraws at most every 0.1 s: force the last state
    text = out.getvalue()
    assert text.startswith("\repoch 2 train:   0%") and re.search(r"\| 5/5 \[\d\d:\d\d<00:00, .*step/s\]$", text)
    p.close()
    assert re.fullmatch(r"\r +\r", out.getvalue()[len(text):])  # leave=False: the line is cleared


def test_disabled_writes_nothing():
    out = FakeTty()
    p = Progress(5, "x", enabled=False, out=out, delay=0.0, every=0.0)
    for k in range(5):
        p.update(k + 1)
    p.close()
    assert out.getvalue() == ""
