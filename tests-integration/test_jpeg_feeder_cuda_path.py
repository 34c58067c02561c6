"""The CUDA path of DeviceJpegFeeder without a GPU: which rows go to nvJPEG, where their bytes are staged, which
are decoded on the CPU and copied up, and where every region lands. The backend's memory is host memory here and
the decoder a stand-in that decodes with libjpeg-turbo and refuses progressive files as the hardware engine
does, so after each batch the decode buffer must hold exactly tr.data's regions (the real decoder and copies:
tests-integration/test_gpu_jpeg_decode.py on the GPU). With a CPU share, libjpeg-turbo takes that share of each
batch besides the refused files, and the buffer must hold the same regions. With refused="nvjpeg" the stand-in's
decoupled call takes the progressive files in the preparation, into a side buffer, and their regions are copied
into the decode buffer with the batch."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("PIL")
pytest.importorskip("skimage")
ROOT = Path(__file__).resolve().parents[1]


class FakeDecoder:
    """nvJPEG's interface: host bytes in, regions written at device addresses (host memory here)."""

    backend = "hardware+strict (stand-in)"
    calls: list[int] = []  # images of each batched (engine) call
    side_calls: list[int] = []  # images of each decoupled call
    regions: list[tuple[int, int]] = []  # (slot, bytes) of every region the engine's calls wrote

    def __init__(self, device: int, backend: str, max_batch: int, threads: int = 4, interpolate: bool = True) -> None:
        self.max_batch = max_batch
        self.interpolate = interpolate  # nvJPEG's chroma upsampling flag: the stand-in decodes with libjpeg's

    def decode(self, data, offsets, sizes, geom, dst, stream, precheck=True, call="regions"):
        from tr.data import _native
        from tr.data.jpeg_plan import COL

        side = call == "regions_decoupled"  # the decoupled decoder takes progressive files too, on the side stream
        assert len(geom) <= self.max_batch and stream == (78 if side else 77)
        (FakeDecoder.side_calls if side else FakeDecoder.calls).append(len(geom))
        status = np.zeros(len(geom), np.int32)
        for k, (o, n, g) in enumerate(zip(offsets, sizes, geom, strict=True)):
            b = bytes(data[int(o):int(o) + int(n)])
            if _native.jpeg_needs_baseline(b) and not side:
                status[k] = 1  # the hardware engine refuses progressive files
                continue
            img = _native.decode_jpeg(b, False, 8, self.interpolate)
            y, x, h, w = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w"))
            region = np.ascontiguousarray(img[y:y + h, x:x + w])
            ctypes.memmove(int(dst) + int(g[COL["slot"]]), region.ctypes.data, region.nbytes)
            if not side:
                FakeDecoder.regions.append((int(g[COL["slot"]]), region.nbytes))
        return status


class FakeCuda:
    name = "cuda"
    device = 0

    def __init__(self, nbytes: int) -> None:
        self.mem = np.zeros(nbytes, np.uint8)
        self.arena_ptr = self.mem.ctypes.data
        self.ctx = SimpleNamespace(stream=lambda kind: 77)
        self.synchronous_writes = 0

    def host_buffers(self, batch, shape, dtype):
        return [(np.zeros(batch, np.int32), np.zeros((batch, *shape), np.dtype(dtype))) for _ in range(2)]

    def synchronize(self):
        pass

    def write_bytes(self, offset, data):
        self.synchronous_writes += 1
        self.mem[offset:offset + data.size] = data


class FakeSideStream:
    """The side stream (78) and its events: each wait must follow a record of the same event."""

    def __init__(self, device: int = 0, events: int = 2) -> None:
        self.stream, self.recorded, self.waits, self.closed = 78, [False] * events, 0, False

    def record(self, i: int) -> None:
        self.recorded[i] = True

    def wait(self, i: int, stream: int) -> None:
        assert stream == 77 and self.recorded[i]
        self.recorded[i] = False  # (the next batch of this parity records again before its wait)
        self.waits += 1

    def close(self) -> None:
        self.closed = True


def side_buffers(monkeypatch, jpeg, be) -> list[tuple[int, int]]:
    """Stand-ins for the side buffers (host memory), the side stream and the copies out of the buffers; the
    (decode-buffer offset, bytes) of each copy."""
    made: list[np.ndarray] = []
    d2d: list[tuple[int, int]] = []

    def device_buffer(nbytes, device=0):
        made.append(np.zeros(nbytes, np.uint8))
        return SimpleNamespace(ptr=made[-1].ctypes.data, size=nbytes)

    def copy(dst, src, n, stream):
        assert stream == 77 and any(b.ctypes.data <= src and src + n <= b.ctypes.data + b.size for b in made)
        d2d.append((int(dst) - be.arena_ptr - 1024, int(n)))
        ctypes.memmove(int(dst), int(src), int(n))

    monkeypatch.setattr(jpeg, "device_buffer", device_buffer)
    monkeypatch.setattr(jpeg, "d2d_async", copy)
    monkeypatch.setattr(jpeg, "SideStream", FakeSideStream)
    return d2d


def upload_on_stand_ins(feeder, monkeypatch) -> FakeCuda:
    """Upload ``feeder`` onto the stand-ins: the decoder, host memory for the device's, plain copies."""
    import tr.backend.cuda.jpeg as jpeg
    from tr.graph.jpeg_input import JPEG_SRC

    monkeypatch.setattr(jpeg, "DeviceJpegDecoder", FakeDecoder)
    monkeypatch.setattr(jpeg, "h2d_async", lambda dst, src, n, stream: ctypes.memmove(int(dst), int(src), int(n)))
    src = SimpleNamespace(offset=1024, numel=feeder.capacity, shape=SimpleNamespace(dims=(1, 1, 1, feeder.capacity)))
    be = FakeCuda(1024 + feeder.capacity)
    side_buffers(monkeypatch, jpeg, be)
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src if name == JPEG_SRC else None))
    return be


@pytest.mark.parametrize("share, interpolate, refused", [
    (0.0, False, "cpu"), (0.5, False, "cpu"), (0.5, True, "cpu"), (1.0, False, "cpu"), (1.0, True, "cpu"),
    ("auto", False, "cpu"), (0.0, False, "nvjpeg"), (0.5, True, "nvjpeg"), (1.0, False, "nvjpeg"),
    ("auto", False, "nvjpeg")])
def test_the_cuda_path_fills_the_decode_buffer_with_tr_data_s_regions(tmp_path, monkeypatch, share, interpolate,
                                                                      refused):
    sys.path.insert(0, str(ROOT / "tools"))
    from jpeg_feeder_scenario import regions
    from make_image_folder import make_image_folder

    import tr.backend.cuda.jpeg as jpeg
    from tr.core.norm import NormMode
    from tr.data import ImageFolder, PreprocessorSettings, RandomHorizontalFlip, RandomResizedCrop
    from tr.data.seeds import epoch_order
    from tr.graph.jpeg_input import JPEG_SRC
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    make_image_folder(tmp_path / "img", classes=3, per_class=9, min_side=40, max_side=90, seed=2)
    ds = ImageFolder(tmp_path / "img")
    s = (PreprocessorSettings().dataset(ds).normalization(NormMode.IMAGENET).seed(4)
         .train_transforms(RandomResizedCrop(24), RandomHorizontalFlip())
         .device_decode(True, cpu_share=share, interpolate_chroma=interpolate, refused=refused))
    feeder = DeviceJpegFeeder(s, batch=8, cpu_share=s.device_dec_cpu_share, cpu_threads=3,
                              interpolate_chroma=s.device_dec_interpolate_chroma, refused=s.device_dec_refused)
    progressive = feeder._planners[True].progressive
    assert 0 < progressive.sum() < len(progressive)  # both paths are taken
    copies: list[tuple[int, int]] = []  # (offset in the decode buffer, bytes)

    def h2d(dst, src, n, stream):
        assert stream == 77
        copies.append((int(dst) - be.arena_ptr - 1024, int(n)))
        ctypes.memmove(int(dst), int(src), int(n))

    monkeypatch.setattr(jpeg, "DeviceJpegDecoder", FakeDecoder)
    monkeypatch.setattr(jpeg, "h2d_async", h2d)
    src = SimpleNamespace(offset=1024, numel=feeder.capacity, shape=SimpleNamespace(dims=(1, 1, 1, feeder.capacity)))
    be = FakeCuda(1024 + feeder.capacity)
    d2d = side_buffers(monkeypatch, jpeg, be)
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src if name == JPEG_SRC else None))
    assert feeder._decoder.interpolate is interpolate  # both decoders upsample chroma alike
    assert (feeder.side_bytes > 0) == (refused == "nvjpeg")
    if share == "auto":  # measured: both decoders timed on the first batch
        assert 0.0 <= feeder.cpu_share <= 1.0 and feeder.calibration["rows"] > 0
        assert feeder.calibration["device_s"] > 0 and feeder.calibration["cpu_s"] > 0
    else:
        assert feeder.cpu_share == share
    FakeDecoder.calls, FakeDecoder.side_calls, FakeDecoder.regions = [], [], []
    split = feeder._splits[True]
    seen = shared = 0
    for epoch in (0, 1):
        hw_rows = 8 - round(feeder.cpu_share * 8)  # ("auto": re-balanced after each epoch)
        calls_before, side_before = len(FakeDecoder.calls), len(FakeDecoder.side_calls)
        order = epoch_order(len(split), feeder.seed, epoch, True, True)
        done_copies, done_regions, done_side = len(copies), len(FakeDecoder.regions), len(d2d)
        for k, buf, m in feeder.epoch(epoch, True):
            mine, theirs, side = copies[done_copies:], FakeDecoder.regions[done_regions:], d2d[done_side:]
            done_copies, done_regions, done_side = len(copies), len(FakeDecoder.regions), len(d2d)
            for o, n in mine:  # a copy (a run of CPU rows and the padding between them) covers no nvJPEG region
                assert all(o + n <= s0 or s0 + z <= o for s0, z in theirs), (o, n, theirs)
                assert all(o + n <= s0 or s0 + z <= o for s0, z in side), (o, n, side)
            if share == 1.0:  # every row on the CPU, at its slot: one copy a run between the side buffer's rows
                assert len(mine) <= 1 + len(side) and (refused == "nvjpeg" or len(mine) == 1)
            for g in regions(feeder, True, buf, order[k * 8:k * 8 + m], be.mem[1024:], interpolate):
                # each row's region holds tr.data's decode of its sample's box
                np.testing.assert_array_equal(g.got, g.want, err_msg=f"epoch {epoch} batch {k} row {g.row} sample "
                                              f"{g.sample}")
            np.testing.assert_array_equal(feeder._bufs[buf][0][:m], split.labels[order[k * 8:k * 8 + m]])
            seen += m
        # every progressive file, decoded on the CPU or by the decoupled decoder (one call a batch that has any)
        assert feeder.decoded_on_cpu() == (int(progressive.sum()) if refused == "cpu" else 0)
        assert feeder.hybrid_decoded == (int(progressive.sum()) if refused == "nvjpeg" else 0)
        assert sum(FakeDecoder.side_calls[side_before:]) == feeder.hybrid_decoded
        shared += feeder.cpu_shared
        assert max(FakeDecoder.calls[calls_before:], default=0) <= hw_rows
        assert feeder.device_decoded == sum(FakeDecoder.calls[calls_before:]) + feeder.hybrid_decoded
    assert seen == 2 * len(split) and be.synchronous_writes == 0
    assert len(d2d) == sum(FakeDecoder.side_calls)  # a copy a region out of the side buffer
    if refused == "nvjpeg":  # the transfer stream waited for the side stream before each batch's copies
        assert feeder._side_stream.waits == len(FakeDecoder.side_calls)
    cpu_rows = 2 * int(progressive.sum()) * (refused == "cpu") + shared
    # (a copy a CPU-decoded region, packed, without a share; with one, a copy a run of them)
    assert len(copies) == cpu_rows if share == 0.0 else len(copies) <= cpu_rows
    assert sum(FakeDecoder.calls) + sum(FakeDecoder.side_calls) + cpu_rows == seen  # each sample decoded once
    if share == 0.0:
        assert shared == 0
    if share == 1.0:
        assert FakeDecoder.calls == [] and shared == 2 * (len(split) - int(progressive.sum()))
    if share == 0.5:
        assert shared > 0 and FakeDecoder.calls
    if share == "auto":  # re-balanced after each epoch where both decoders worked
        assert all(0.0 <= e["share"] <= 1.0 for e in feeder.calibration.get("epochs", []))
        # 10 batches of 8: nvJPEG took 2 a batch in 50 ms calls (10 ms an image: 30 ms waiting for the device),
        # libjpeg-turbo the other 6 in 10 ms each; balanced: 8 * 10 - 30 = 20 * h, h = 2.5 rows for nvJPEG
        feeder.calibration["row_s"] = 0.010
        feeder.hybrid_decoded = 0
        feeder._probe.state = "done"  # (as when the probe kept the model's share: the model alone from here)
        feeder.times.update(decode_call_s=0.5, cpu_decode_s=0.6, refused_decode_s=0.0)
        feeder._batches, feeder._calls, feeder.device_decoded = 10, 10, 20
        feeder.cpu_decoded, feeder.cpu_shared = 15, 45
        feeder._rebalance(5)
        assert feeder.cpu_share == 0.6875 and feeder._hw_rows == 2
        last = feeder.calibration["epochs"][-1]
        assert last["epoch"] == 6 and last["batches"] == 10 and last["share"] == 0.6875
        assert last["wait_s"] == pytest.approx(0.03) and last["cpu_row_s"] == pytest.approx(0.01)
        # the CPU alone is done before the device wait: nvJPEG is not called; its last wait is kept
        feeder.times.update(decode_call_s=0.9, cpu_decode_s=0.3)
        feeder._rebalance(6)
        assert feeder.cpu_share == 1.0 and feeder._hw_rows == 0
        feeder.times.update(decode_call_s=0.0, cpu_decode_s=0.3)
        feeder.device_decoded = feeder._calls = 0
        feeder._rebalance(7)
        assert feeder.cpu_share == 1.0 and feeder.calibration["wait_s"] == pytest.approx(0.07)
        # an epoch that called nvJPEG in 2 of its 10 batches (2 rows each, 30 ms waiting a call): the wait is a
        # call's, not spread over the 8 batches without one (0.006 s: the share would swing back to nvJPEG)
        feeder.times.update(decode_call_s=2 * (0.03 + 2 * 0.010), cpu_decode_s=0.76)
        feeder._batches, feeder._calls, feeder.device_decoded = 10, 2, 4
        feeder.cpu_decoded, feeder.cpu_shared = 0, 76
        feeder._rebalance(8)
        assert feeder.calibration["wait_s"] == pytest.approx(0.03) and feeder.cpu_share == 0.6875
        # the probe found libjpeg-turbo alone faster: the share stays 1 whatever the model says; while it runs,
        # the share is the probe's
        feeder._probe.choice = 1.0
        feeder._rebalance(9)
        assert feeder.cpu_share == 1.0 and feeder.calibration["epochs"][-1]["share"] == 0.6875
        feeder._probe.state = "cpu"
        feeder._set_share(1.0, 9, "probe")
        feeder._probe.state, feeder._probe.choice = "model", None
        feeder._rebalance(10)
        assert feeder.cpu_share == 1.0
    feeder.close()


def test_the_task_s_feeder_takes_the_cpu_share_threads_and_chroma_of_the_settings(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    from tr.core.settings import Settings
    from tr.data import ImageFolder, PreprocessorSettings, RandomResizedCrop
    from tr.task.pipeline import feeder_from_preprocessor

    make_image_folder(tmp_path / "img", classes=2, per_class=3, min_side=40, max_side=60, seed=1)
    s = (PreprocessorSettings().dataset(ImageFolder(tmp_path / "img")).train_transforms(RandomResizedCrop(24))
         .device_decode(True, cpu_share=0.25, cpu_threads=3, interpolate_chroma=True, refused="cpu"))
    feeder = feeder_from_preprocessor(Settings().global_batch_size(4), pre=s)
    assert (feeder.cpu_share_setting, feeder.cpu_threads, feeder.interpolate_chroma) == (0.25, 3, True)
    assert feeder.refused == "cpu"
    assert not feeder_from_preprocessor(Settings().global_batch_size(4), pre=s.copy().device_decode(True)) \
        .interpolate_chroma
    with pytest.raises(Exception, match=r"cpu_share must be a number in \[0, 1\]"):
        type(feeder)(s, batch=4, cpu_share=2.0)
    with pytest.raises(Exception, match=r"refused must be 'nvjpeg', 'cpu' or 'auto', got 'gpu'"):
        type(feeder)(s, batch=4, refused="gpu")


def test_auto_re_balances_early_in_the_epoch_and_at_its_end(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    from tr.data import ImageFolder, PreprocessorSettings, RandomResizedCrop
    from tr.task.jpeg_feeder import REBALANCE_AFTER, DeviceJpegFeeder

    make_image_folder(tmp_path / "img", classes=2, per_class=10, min_side=40, max_side=60, seed=3)
    s = PreprocessorSettings().dataset(ImageFolder(tmp_path / "img")).train_transforms(RandomResizedCrop(24))
    feeder = DeviceJpegFeeder(s.device_decode(True), batch=2, cpu_share="auto", cpu_threads=2)
    upload_on_stand_ins(feeder, monkeypatch)
    assert feeder.steps(True) == 10 > REBALANCE_AFTER
    for _ in feeder.epoch(0, True):
        pass
    assert [e["batches"] for e in feeder.calibration["epochs"]] == [REBALANCE_AFTER, 10]
    feeder.close()


@pytest.mark.parametrize("faster", ["nvjpeg", "cpu"])
def test_refused_auto_times_both_decoders_and_keeps_the_faster(tmp_path, monkeypatch, faster):
    """refused="auto": the first training batches run with the engine's refusals on the decoupled decoder, then on
    libjpeg-turbo, timed by the loop's period (a stand-in clock here: a batch takes 10 ms with the faster one, 30 ms
    with the other); the faster is kept for the run, and the CPU share's re-balance waits for that probe."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    import tr.task.jpeg_feeder as jf
    from tr.data import ImageFolder, PreprocessorSettings, RandomResizedCrop
    from tr.task.share_probe import PROBE, SETTLE

    make_image_folder(tmp_path / "img", classes=2, per_class=20, min_side=40, max_side=60, seed=5)
    s = PreprocessorSettings().dataset(ImageFolder(tmp_path / "img")).train_transforms(RandomResizedCrop(24))
    feeder = jf.DeviceJpegFeeder(s.device_decode(True, refused="auto"), batch=2, cpu_share="auto", cpu_threads=2,
                                 refused="auto")
    progressive = int(feeder._planners[True].progressive.sum())
    assert progressive > 0
    upload_on_stand_ins(feeder, monkeypatch)
    assert feeder.side_bytes > 0 and feeder._side_on  # the decoupled decoder's buffers, and its arm first
    clock = [0.0]
    monkeypatch.setattr(jf, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    steps = feeder.steps(True)
    assert steps == 20 >= 2 * (PROBE + 1)  # both arms timed within the first epoch
    arms = []
    for _k, _buf, _n in feeder.epoch(0, True):
        arms.append("nvjpeg" if feeder._side_on else "cpu")
        clock[0] += 0.010 if arms[-1] == faster else 0.030
    probe = feeder._refused_probe
    assert probe.state == "done" and probe.choice == faster and feeder._side_on == (faster == "nvjpeg")
    # (the switch follows batch PROBE's tick: a first period, SETTLE settling ones, PROBE - SETTLE timed)
    assert arms[:PROBE] == ["nvjpeg"] * PROBE and arms[PROBE] == "cpu"
    rec = feeder.calibration["refused_probe"]
    assert rec["choice"] == faster and len(probe.periods["nvjpeg"]) == len(probe.periods["cpu"]) == PROBE - SETTLE
    assert rec[f"{faster}_period_s"] < rec[f"{'cpu' if faster == 'nvjpeg' else 'nvjpeg'}_period_s"]
    # the share's early re-balance waited for the probe (none after 8 batches); the epoch's end re-balanced
    assert [e["batches"] for e in feeder.calibration["epochs"]] == [steps]
    side_calls = len(FakeDecoder.side_calls)
    for _ in feeder.epoch(1, True):
        clock[0] += 0.010
    if faster == "nvjpeg":  # every refused file of the epoch by the decoupled decoder
        assert feeder.hybrid_decoded == progressive and feeder.decoded_on_cpu() == 0
        assert sum(FakeDecoder.side_calls[side_calls:]) == progressive
    else:  # by libjpeg-turbo: the decoupled decoder no longer called
        assert feeder.hybrid_decoded == 0 and feeder.decoded_on_cpu() == progressive
        assert len(FakeDecoder.side_calls) == side_calls
    assert feeder.calibration["epochs"][1]["batches"] == jf.REBALANCE_AFTER  # the share's own turn now
    feeder.close()


def test_the_gpu_test_s_refused_auto_scenario_runs_on_the_stand_ins(tmp_path_factory, monkeypatch):
    """test_gpu_jpeg_feeder.py's refused="auto" scenario (jpeg_feeder_scenario.py) on the stand-ins, on the same
    photos (a val split among them): its set-up, its expectations and the validation pass after the probe are
    checked on every CPU run, not first on the H200 (where its first run failed building the feeder: no val
    chain). The stand-in decodes with libjpeg-turbo, so every region must be exact."""
    from jpeg_feeder_scenario import PHOTOS, check_refused_auto, refused_auto_feeder
    from photos import make_photos

    feeder = refused_auto_feeder(make_photos(tmp_path_factory, "photos", **PHOTOS))
    be = upload_on_stand_ins(feeder, monkeypatch)
    FakeDecoder.side_calls = []
    try:
        counts = check_refused_auto(feeder, lambda: be.mem[1024:], monkeypatch, 0.0)
    finally:
        feeder.close()
    assert counts["exact"] == counts["seen"] == len(feeder._splits[True])
    assert sum(FakeDecoder.side_calls) == counts["decoupled"] > 0 and counts["libjpeg_turbo"] > 0


def test_a_split_whose_chain_the_device_cannot_run_is_named(tmp_path):
    """A data set with a val split needs a val chain the device runs, even where training never validates: the
    error names the split and its setting (it said only "got nothing", which the GPU test above once hit)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    from tr.core.errors import ConfigError
    from tr.data import CenterCrop, ImageFolder, PreprocessorSettings, RandomResizedCrop
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    make_image_folder(tmp_path / "img", classes=2, per_class=3, min_side=40, max_side=60, seed=1, val_per_class=1)
    s = PreprocessorSettings().dataset(ImageFolder(tmp_path / "img")).train_transforms(RandomResizedCrop(24))
    with pytest.raises(ConfigError, match=r"the val split's chain \(val_transforms\): .*got nothing"):
        DeviceJpegFeeder(s.copy().device_decode(True), batch=2)
    with pytest.raises(ConfigError, match=r"the train split's chain \(train_transforms\): .*got CenterCrop"):
        DeviceJpegFeeder(s.copy().train_transforms(CenterCrop(24)).val_transforms(RandomResizedCrop(24))
                         .device_decode(True), batch=2)
