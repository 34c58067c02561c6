"""Where DeepLearningTask.log_to(dir) sends every epoch's record: metrics.csv, metrics.jsonl, PNG plots
(tr.task.plots, with the `plots` extra) and TensorBoard scalars (when `tensorboard` is installed).

Files are opened, appended to, flushed and fsynced once per epoch, so a crash loses at most the epoch in
flight, and a second (or resumed) run() appends to the same log instead of replacing it. The CSV header is
written only into an empty file.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Protocol

from tr.core.errors import ConfigError
from tr.core.log import get_logger
from tr.task.report import EpochRecord

log = get_logger(__name__)

CSV_NAME, JSONL_NAME, TB_DIR = "metrics.csv", "metrics.jsonl", "tensorboard"


class Sink(Protocol):
    def write(self, rec: EpochRecord) -> None: ...
    def close(self) -> None: ...


def record_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(EpochRecord)]


def record_dict(rec: EpochRecord) -> dict[str, Any]:
    return {name: getattr(rec, name) for name in record_fields()}


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class CsvSink:
    """One row per epoch under a header of the record's fields; None is an empty cell."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns = record_fields()
        existing = self._header()
        if existing is None:
            _append(path, self._line(self.columns))
        elif existing != self.columns:  # a log written by another tr version: keep its columns
            log.warning("%s has columns %s, the epoch record has %s: appending in the file's columns",
                        path, existing, self.columns)
            self.columns = existing

    def _header(self) -> list[str] | None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        with open(self.path, encoding="utf-8", newline="") as f:
            return next(csv.reader(f), None)

    @staticmethod
    def _line(values: list) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        return buf.getvalue()

    def write(self, rec: EpochRecord) -> None:
        d = record_dict(rec)
        _append(self.path, self._line(["" if d.get(c) is None else d.get(c) for c in self.columns]))

    def close(self) -> None:
        pass


def _json_value(v: Any) -> Any:
    # strict JSON (jq, JavaScript) has no NaN or Infinity: a non-finite loss is written as null
    return None if isinstance(v, float) and not math.isfinite(v) else v


class JsonlSink:
    """One JSON object per epoch and line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, rec: EpochRecord) -> None:
        d = {k: _json_value(v) for k, v in record_dict(rec).items()}
        _append(self.path, json.dumps(d, allow_nan=False) + "\n")

    def close(self) -> None:
        pass


# record field -> TensorBoard tag (grouped as TensorBoard shows them: loss, accuracy, the rest)
TB_TAGS = {"train_loss": "loss/train", "val_loss": "loss/val", "top1": "accuracy/top1", "top5": "accuracy/top5",
           "lr": "lr", "seconds": "time/epoch_seconds", "skipped_steps": "steps/skipped"}


def tensorboard_available() -> bool:
    try:
        import tensorboard.summary.writer.event_file_writer  # noqa: F401
    except ImportError:
        return False
    return True


class TensorBoardSink:
    """Scalars per epoch into <dir>/tensorboard, through tensorboard's own event writer (no torch needed)."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        logdir.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(logdir))

    def write(self, rec: EpochRecord) -> None:
        d = record_dict(rec)
        values = [self._summary.Value(tag=tag, simple_value=float(d[k]))
                  for k, tag in TB_TAGS.items() if d.get(k) is not None]
        self._writer.add_event(self._event(wall_time=time.time(), step=rec.epoch,
                                           summary=self._summary(value=values)))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _want(flag: bool | None, available: bool, option: str, module: str, install: str) -> bool:
    """None: use it when installed (a notice when not); True: required now; False: off."""
    if flag is None:
        if not available:
            log.info("%s is not installed: log_to() writes no %s (%s)", module, option, install)
        return available
    if flag and not available:
        raise ConfigError(f"log_to(..., {option}=True) needs {module}, which is not installed: {install}")
    return flag


class MetricsLog:
    """The sinks of one log directory, checked when log_to() is called, opened for each run()."""

    def __init__(self, directory: str | os.PathLike, plots: bool | None = None,
                 tensorboard: bool | None = None) -> None:
        if not isinstance(directory, (str, os.PathLike)) or str(directory) == "":
            raise ConfigError(f"log_to() takes a directory path, got {directory!r}")
        for flag, name in ((plots, "plots"), (tensorboard, "tensorboard")):
            if flag is not None and not isinstance(flag, bool):
                raise ConfigError(f"log_to({name}=...) must be True, False or None, got {flag!r}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"log_to() needs a directory, but {str(self.directory)!r} is a file")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"log_to(): cannot create the directory {str(self.directory)!r}: {e}") from e
        if not os.access(self.directory, os.W_OK):
            raise ConfigError(f"log_to(): the directory {str(self.directory)!r} is not writable")
        from tr.task.plots import plots_available

        self.plots = _want(plots, plots_available(), "plots", "matplotlib", "pip install 'tr-task[plots]'")
        self.tensorboard = _want(tensorboard, tensorboard_available(), "tensorboard", "tensorboard",
                                 "pip install 'tr-task[tensorboard]'")
        self._sinks: list[Sink] = []

    def open(self) -> MetricsLog:
        self._sinks = [CsvSink(self.directory / CSV_NAME), JsonlSink(self.directory / JSONL_NAME)]
        if self.plots:
            from tr.task.plots import PlotSink

            self._sinks.append(PlotSink(self.directory, self.directory / JSONL_NAME))
        if self.tensorboard:
            self._sinks.append(TensorBoardSink(self.directory / TB_DIR))
        return self

    def _each(self, action: str, rec: EpochRecord | None = None) -> None:
        for sink in list(self._sinks):
            try:
                if rec is None:
                    sink.close()
                else:
                    sink.write(rec)
            except OSError as e:  # a full disk must not end a long training: warn and drop that sink
                log.error("log_to(): %s %s failed (%s); that sink is off for this run", type(sink).__name__,
                          action, e)
                self._sinks.remove(sink)

    def write(self, rec: EpochRecord) -> None:
        self._each("write", rec)

    def close(self) -> None:
        self._each("close")
        self._sinks = []
