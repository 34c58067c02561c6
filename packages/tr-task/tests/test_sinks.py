"""tr.task.sinks: the CSV and JSON-lines logs of log_to(), their append rules, and bad log_to() input."""

import csv
import json
import logging
import math

import pytest

from tr.core.errors import ConfigError
from tr.task import plots, sinks
from tr.task.report import EpochRecord
from tr.task.sinks import CsvSink, JsonlSink, MetricsLog, record_fields

RECS = [EpochRecord(1, 2.25, 0.1, 1.5, val_loss=2.0, top1=0.25, top5=0.75),
        EpochRecord(2, 1.125, 0.05, 1.25, skipped_steps=3)]


def _csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_csv_has_one_header_and_appends_across_opens(tmp_path):
    path = tmp_path / "m.csv"
    a = CsvSink(path)
    a.write(RECS[0])
    CsvSink(path).write(RECS[1])  # a second run(): same file, no second header
    rows = _csv_rows(path)
    assert rows[0] == record_fields()
    assert len(rows) == 3
    first = dict(zip(rows[0], rows[1]))
    assert float(first["train_loss"]) == 2.25 and float(first["top1"]) == 0.25 and int(first["epoch"]) == 1
    second = dict(zip(rows[0], rows[2]))
    assert second["val_loss"] == "" and second["top1"] == "" and int(second["skipped_steps"]) == 3


def test_csv_of_other_columns_keeps_its_header(tmp_path, caplog):
    path = tmp_path / "m.csv"
    path.write_text("epoch,train_loss,old_column\n1,0.5,x\n")
    with caplog.at_level(logging.WARNING, logger="tr"):
        CsvSink(path).write(RECS[0])
    assert any("appending in the file's columns" in r.getMessage() for r in caplog.records)
    assert _csv_rows(path) == [["epoch", "train_loss", "old_column"], ["1", "0.5", "x"], ["1", "2.25", ""]]


def test_jsonl_lines_equal_the_records_and_non_finite_is_null(tmp_path):
    path = tmp_path / "m.jsonl"
    sink = JsonlSink(path)
    for r in RECS:
        sink.write(r)
    sink.write(EpochRecord(3, math.nan, 0.01, 1.0))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {f: getattr(RECS[0], f) for f in record_fields()}
    assert lines[1] == {f: getattr(RECS[1], f) for f in record_fields()}
    assert lines[2]["train_loss"] is None and lines[2]["epoch"] == 3


def test_log_to_a_file_is_an_error(tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    with pytest.raises(ConfigError, match="needs a directory, but .*taken' is a file"):
        MetricsLog(f)
    with pytest.raises(ConfigError, match="cannot create the directory .*taken/sub"):
        MetricsLog(f / "sub")
    with pytest.raises(ConfigError, match="takes a directory path, got 3"):
        MetricsLog(3)
    with pytest.raises(ConfigError, match=r"log_to\(plots=...\) must be True, False or None, got 'yes'"):
        MetricsLog(tmp_path / "d", plots="yes")


def test_missing_extras_are_an_error_when_required_and_a_notice_otherwise(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(plots, "plots_available", lambda: False)
    monkeypatch.setattr(sinks, "tensorboard_available", lambda: False)
    with pytest.raises(ConfigError, match=r"plots=True\) needs matplotlib.*pip install 'tr-task\[plots\]'"):
        MetricsLog(tmp_path, plots=True)
    with pytest.raises(ConfigError, match=r"tensorboard=True\) needs tensorboard"):
        MetricsLog(tmp_path, plots=False, tensorboard=True)
    with caplog.at_level(logging.INFO, logger="tr"):
        m = MetricsLog(tmp_path)
    assert not m.plots and not m.tensorboard
    msgs = [r.getMessage() for r in caplog.records]
    assert any("matplotlib is not installed: log_to() writes no plots" in s for s in msgs)
    assert any("tensorboard is not installed" in s for s in msgs)


def test_a_failing_sink_is_dropped_and_the_others_go_on(tmp_path, caplog):
    m = MetricsLog(tmp_path, plots=False, tensorboard=False).open()

    class Broken:
        def write(self, rec):
            raise OSError("disk full")

        def close(self):
            pass

    m._sinks.insert(0, Broken())
    with caplog.at_level(logging.ERROR, logger="tr"):
        m.write(RECS[0])
        m.write(RECS[1])
    m.close()
    assert sum("disk full" in r.getMessage() for r in caplog.records) == 1
    assert len((tmp_path / sinks.JSONL_NAME).read_text().splitlines()) == 2


def test_the_images_decoded_on_the_cpu_reach_the_logs_and_the_table(tmp_path):
    import io

    from tr.task.report import EpochTable

    rec = EpochRecord(3, 0.5, 0.01, 2.0, cpu_decoded=17)
    CsvSink(tmp_path / "m.csv").write(rec)
    JsonlSink(tmp_path / "m.jsonl").write(rec)
    rows = _csv_rows(tmp_path / "m.csv")
    assert int(dict(zip(rows[0], rows[1]))["cpu_decoded"]) == 17
    assert json.loads((tmp_path / "m.jsonl").read_text())["cpu_decoded"] == 17
    out = io.StringIO()
    EpochTable(out, validate=False).row(rec)
    assert "(17 images decoded on the CPU: the device decoder refused them)" in out.getvalue()
