"""tr.task.plots: PNG files drawn from a metrics.jsonl, valid and atomic; throttled while training."""

import json
import struct
import zlib

import pytest

pytest.importorskip("matplotlib")

from tr.task.plots import PlotSink, draw, read_jsonl  # noqa: E402
from tr.task.report import EpochRecord  # noqa: E402


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature and the IHDR chunk's CRC."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:29]
    assert struct.unpack(">I", data[29:33])[0] == zlib.crc32(kind + body)
    assert data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the file is complete
    return struct.unpack(">II", body[:8])


def _rows(n, val=True):
    return [{"epoch": i + 1, "train_loss": 2.0 / (i + 1), "lr": 0.1 * 0.9 ** i, "seconds": 1.0,
             "val_loss": 2.1 / (i + 1) if val else None, "top1": 0.1 * i if val else None,
             "top5": 0.2 * i if val else None, "skipped_steps": 0} for i in range(n)]


def test_draw_writes_three_valid_pngs(tmp_path):
    written = draw(_rows(4), tmp_path)
    assert [p.name for p in written] == ["loss.png", "accuracy.png", "lr.png"]
    for p in written:
        assert png_size(p) == (640, 400)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["accuracy.png", "loss.png", "lr.png"]  # no tmp left


def test_no_validation_means_no_accuracy_plot(tmp_path):
    assert [p.name for p in draw(_rows(3, val=False), tmp_path)] == ["loss.png", "lr.png"]


def test_a_line_cut_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(2)) + '{"epoch": 3, "train_lo')
    assert [r["epoch"] for r in read_jsonl(path)] == [1, 2]


def test_plot_sink_draws_at_once_then_at_most_every_interval_and_at_close(tmp_path):
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in _rows(1)))
    sink = PlotSink(tmp_path, jsonl, every=3600.0)
    sink.write(EpochRecord(1, 2.0, 0.1, 1.0))
    first = (tmp_path / "lr.png").stat().st_mtime_ns
    (tmp_path / "lr.png").unlink()
    with jsonl.open("a") as f:
        f.write(json.dumps(_rows(2)[1]) + "\n")
    sink.write(EpochRecord(2, 1.0, 0.09, 1.0))
    assert not (tmp_path / "lr.png").exists() and first > 0  # throttled
    sink.close()
    png_size(tmp_path / "lr.png")
