"""DeepLearningTask.log_to() on the CPU backend: the CSV and JSON lines equal the epoch records, the PNG plots
are valid, TensorBoard gets the scalars, a second run() appends, and the progress bar copes with no tty."""

import csv
import json
import struct

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import fc, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.sinks import record_fields, tensorboard_available

BATCH, CLASSES = 8, 3


def _task(epochs=2):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 2, 2, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, 32).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x[:16], y[:16]), BATCH, seed=1, num_classes=CLASSES)
    s = Settings().manual_seed(5).global_batch_size(BATCH)
    return (DeepLearningTask(s).device("cpu").quiet().model(seq(fc(8), relu(), fc(CLASSES)))
            .optimizer(SGD()).scheduler(ConstantLR().base_lr(0.05)).total_epochs(epochs).data(feeder))


def _expected(history):
    return [{f: getattr(r, f) for f in record_fields()} for r in history]


def _csv_records(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, out = rows[0], []
    for row in rows[1:]:
        d = {}
        for k, v in zip(header, row):
            d[k] = None if v == "" else int(v) if k in ("epoch", "skipped_steps") else float(v)
        out.append(d)
    return header, out


def test_csv_and_jsonl_equal_the_records_and_a_second_run_appends(tmp_path):
    log_dir = tmp_path / "logs" / "run1"  # created, parents too
    task = _task().log_to(log_dir, plots=False, tensorboard=False).compile()
    first = task.run()
    assert len(first.history) == 2
    header, rows = _csv_records(log_dir / "metrics.csv")
    assert header == record_fields()
    assert rows == _expected(first.history)  # floats written with repr: exact
    jsonl = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert jsonl == _expected(first.history)
    assert all(r["top1"] is not None and r["val_loss"] > 0 for r in jsonl)

    second = task.run(1)
    both = _expected(first.history) + _expected(second.history)
    header, rows = _csv_records(log_dir / "metrics.csv")
    assert rows == both and (log_dir / "metrics.csv").read_text().count("epoch,") == 1  # one header
    assert [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()] == both


def _png_ok(path) -> bool:
    data = path.read_bytes()
    w, h = struct.unpack(">II", data[16:24])
    return data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and w > 0 and h > 0 \
        and data.endswith(b"IEND\xaeB`\x82")


def test_plots_are_valid_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    _task().log_to(tmp_path, plots=True, tensorboard=False).compile().run()
    for name in ("loss.png", "accuracy.png", "lr.png"):
        assert _png_ok(tmp_path / name), name


@pytest.mark.skipif(not tensorboard_available(), reason="tensorboard is not installed")
def test_tensorboard_gets_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = _task().log_to(tmp_path, plots=False, tensorboard=True).compile().run()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    loss = acc.Scalars("loss/train")
    assert [e.step for e in loss] == [1, 2]
    assert [e.value for e in loss] == pytest.approx([r.train_loss for r in result.history], rel=1e-6)
    assert [e.value for e in acc.Scalars("accuracy/top1")] == pytest.approx([r.top1 for r in result.history])
    assert {"loss/val", "lr", "accuracy/top5", "time/epoch_seconds"} <= set(acc.Tags()["scalars"])


def test_log_to_a_file_fails_at_once(tmp_path):
    f = tmp_path / "metrics"
    f.write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        _task().log_to(f)


def test_training_prints_progress_lines_without_a_tty(tmp_path, monkeypatch, capsys):
    import tr.task.progress as progress

    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)  # a line after every step
    _task(epochs=1).quiet(False).compile().run()
    err = capsys.readouterr().err
    assert "epoch 1 train:" in err and "step/s" in err and "epoch 1 val:" in err
    assert "\r" not in err
