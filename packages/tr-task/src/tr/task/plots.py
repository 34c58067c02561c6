"""PNG plots of a log_to() directory: loss.png (train and validation loss), accuracy.png (top-1/top-5, when
the task validates) and lr.png, drawn from metrics.jsonl, so they cover every run appended to the log.

Needs matplotlib (`pip install 'tr-task[plots]'`). Only its object API is used (no pyplot): the user's
pyplot backend and open figures are left alone, and nothing needs a display.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from tr.task.report import EpochRecord

PLOT_NAMES = ("loss.png", "accuracy.png", "lr.png")


def plots_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl; a line cut short by a crash is skipped."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _series(rows: list[dict], key: str, xs: list[float], scale: float = 1.0) -> tuple[list, list]:
    pts = [(x, r[key] * scale) for x, r in zip(xs, rows)
           if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in pts], [p[1] for p in pts]


def _save(fig, path: Path) -> None:
    # written beside and renamed: a crash while drawing never leaves a half-written PNG
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png", dpi=100)
    os.replace(tmp, path)


def draw(rows: list[dict[str, Any]], directory: Path) -> list[Path]:
    """Draws the plots of ``rows`` into ``directory``; returns the files written."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if not rows:
        return []
    epochs = [r.get("epoch") for r in rows]
    consecutive = epochs == list(range(1, len(rows) + 1))
    # several runs in one log restart their epoch numbers: plot them one after the other
    xs = [float(e) for e in epochs] if consecutive else [float(i) for i in range(1, len(rows) + 1)]
    xlabel = "epoch" if consecutive else "epoch (all runs of this log, in order)"
    panels = [("loss.png", "loss", [("train_loss", "train", 1.0), ("val_loss", "validation", 1.0)]),
              ("accuracy.png", "accuracy (%)", [("top1", "top-1", 100.0), ("top5", "top-5", 100.0)]),
              ("lr.png", "learning rate", [("lr", "lr", 1.0)])]
    written = []
    for name, ylabel, lines in panels:
        series = [(label, *_series(rows, key, xs, scale)) for key, label, scale in lines]
        if not any(x for _, x, _ in series):
            continue  # e.g. no validation: no accuracy plot
        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.add_subplot()
        for label, x, y in series:
            if x:
                ax.plot(x, y, marker="." if len(x) < 50 else None, label=label)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(series) > 1:
            ax.legend()
        fig.tight_layout()
        _save(fig, directory / name)
        written.append(directory / name)
    return written


class PlotSink:
    """Redraws the plots at most every ``every`` seconds while training (drawing takes a few tenths of a
    second, longer than a small model's epoch) and always when the run ends."""

    def __init__(self, directory: Path, jsonl: Path, every: float = 30.0) -> None:
        self.directory, self.jsonl, self.every = directory, jsonl, every
        self._last = -math.inf
        self._dirty = False

    def write(self, rec: EpochRecord) -> None:
        self._dirty = True
        if time.perf_counter() - self._last >= self.every:
            self._draw()

    def _draw(self) -> None:
        draw(read_jsonl(self.jsonl), self.directory)
        self._last = time.perf_counter()
        self._dirty = False

    def close(self) -> None:
        if self._dirty:
            self._draw()
