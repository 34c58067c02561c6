"""DeviceJpegFeeder on CUDA (issue [13], GPU tests): the real decoders share each batch (nvJPEG on the transfer
stream, libjpeg-turbo on native threads with its regions copied up from pinned memory), and after every batch the
decode buffer in the arena holds each sample's region: libjpeg-turbo's bytes exactly where the CPU decoded it
(every row with a CPU share of 1; with interpolated chroma too: the CPU pipeline's bytes, the exact path),
nvJPEG's within the tolerance of test_gpu_jpeg_decode.py elsewhere, both decoders in the same chroma mode
(replicated: the default). "auto" measures the share at upload. The files the engine refuses (progressive) are
libjpeg-turbo's with refused="cpu", nvJPEG's decoupled decoder's (within the same tolerance) with "nvjpeg", both
across the switch of refused="auto"'s probe; with the GPU-hybrid backend ("gpu") nvJPEG takes every file."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tr.core.norm import NormMode
from tr.data import (
    CenterCrop,
    ImageFolder,
    PreprocessorSettings,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    _native,
)
from tr.data.jpeg_plan import COL
from tr.data.seeds import epoch_order

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests"))
from backend_testkit import SimpleArena  # noqa: E402
from photos import make_photos  # noqa: E402

pytestmark = pytest.mark.gpu

MEAN_ABS_LIMIT = 1.5  # grey levels over a region (test_gpu_jpeg_decode.py's bound for nvJPEG's decode)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory, "photos", classes=4, per_class=12, min_side=64, max_side=500, seed=9,
                       val_per_class=1)


@pytest.mark.parametrize("share, interpolate, refused_to, backend", [
    (0.0, False, "cpu", "auto"), (0.5, False, "cpu", "auto"), (0.5, True, "cpu", "auto"), (1.0, False, "cpu", "auto"),
    (1.0, True, "cpu", "auto"), ("auto", False, "cpu", "auto"), (0.0, False, "nvjpeg", "auto"),
    (0.5, True, "nvjpeg", "auto"), ("auto", False, "nvjpeg", "auto"), (0.0, False, "nvjpeg", "gpu"),
    (0.5, False, "nvjpeg", "gpu")])
def test_the_decode_buffer_holds_every_region_whoever_decoded_it(photos, share, interpolate, refused_to, backend):
    from tr.backend.cuda import CudaBackend
    from tr.graph.jpeg_input import JPEG_SRC
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    batch = 16
    s = (PreprocessorSettings().dataset(ImageFolder(photos)).normalization(NormMode.IMAGENET).seed(3)
         .train_transforms(RandomResizedCrop(64), RandomHorizontalFlip()).val_transforms(Resize(72), CenterCrop(64))
         .device_decode(True, backend, cpu_share=share, interpolate_chroma=interpolate, refused=refused_to))
    feeder = DeviceJpegFeeder(s, batch, backend=backend, cpu_share=share, cpu_threads=4, interpolate_chroma=interpolate,
                              refused=refused_to)
    arena = SimpleArena()
    src = arena.add(JPEG_SRC, (feeder.capacity,), "uint8")
    be = CudaBackend()
    be.allocate(arena.layout())
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src))
    assert 0.0 <= feeder.cpu_share <= 1.0 and ("interpolated" in feeder._decoder.backend) == interpolate
    split = feeder._splits[True]
    hardware = feeder._decoder.backend.startswith("hardware")
    assert hardware == (backend == "auto") and (feeder.side_bytes > 0) == (hardware and refused_to == "nvjpeg")
    refused = feeder._planners[True].progressive & hardware  # the files the engine does not take
    diffs, exact, seen = [], 0, 0
    order = epoch_order(len(split), feeder.seed, 0, True, True)
    for k, buf, m in feeder.epoch(0, True):
        be.synchronize()  # the transfer stream has decoded batch k and copied its CPU regions
        mem = be.read(src).reshape(-1)
        geom = feeder._bufs[buf][1][:, 0, 0, :]
        hw_rows = batch - round(feeder.cpu_share * batch)
        for r in range(m):
            i = int(order[k * batch + r])
            y, x, h, w, slot = (int(geom[r, COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
            want = _native.decode_jpeg(split.encoded_bytes(i), False, 8, interpolate)[y:y + h, x:x + w]
            want = want.astype(np.int16)
            got = mem[slot:slot + h * w * 3].reshape(h, w, 3).astype(np.int16)
            taken = np.flatnonzero(~refused[order[k * batch:k * batch + m]])
            on_cpu = (refused_to == "cpu") if refused[i] else r not in taken[:hw_rows]
            if on_cpu:  # libjpeg-turbo's region, exactly
                np.testing.assert_array_equal(got, want, err_msg=f"batch {k} row {r} sample {i}")
                exact += 1
            else:
                diffs.append(float(np.abs(got - want).mean()))
        seen += m
    feeder.close()
    print(f"\nshare {share} -> {feeder.cpu_share}, {feeder._decoder.backend}: {exact} of {seen} regions from "
          f"libjpeg-turbo (exact), nvJPEG's "
          f"mean |diff| {np.mean(diffs) if diffs else 0:.3f}, worst {max(diffs, default=0):.3f}; "
          f"calibration {feeder.calibration}")
    assert seen == len(split) and exact == feeder.cpu_decoded + feeder.cpu_shared
    assert feeder.cpu_decoded == int(refused.sum()) * (refused_to == "cpu")
    assert feeder.hybrid_decoded == int(refused.sum()) * (refused_to == "nvjpeg")
    assert max(diffs, default=0.0) <= MEAN_ABS_LIMIT
    if share == 1.0:
        assert not diffs and exact == seen
    if share == 0.0:
        assert feeder.cpu_shared == 0


def test_refused_auto_switches_decoders_between_batches(photos, monkeypatch):
    """refused="auto" on the real decoders: the probe moves the engine's refusals from nvJPEG's decoupled decoder
    to libjpeg-turbo part of the way through the epoch (a stand-in clock makes libjpeg-turbo's batches faster), and
    every region is right across the switch: libjpeg-turbo's exactly, the decoupled decoder's within tolerance."""
    import tr.task.jpeg_feeder as jf
    from tr.backend.cuda import CudaBackend
    from tr.graph.jpeg_input import JPEG_SRC
    from tr.task.share_probe import PROBE

    batch = 2
    s = (PreprocessorSettings().dataset(ImageFolder(photos)).normalization(NormMode.IMAGENET).seed(3)
         .train_transforms(RandomResizedCrop(64)).device_decode(True, cpu_share=0.0, refused="auto"))
    feeder = jf.DeviceJpegFeeder(s, batch, cpu_share=0.0, cpu_threads=4, refused="auto")
    arena = SimpleArena()
    src = arena.add(JPEG_SRC, (feeder.capacity,), "uint8")
    be = CudaBackend()
    be.allocate(arena.layout())
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src))
    if not feeder._decoder.backend.startswith("hardware"):
        pytest.skip("no hardware JPEG engine: nothing is refused")
    assert feeder.side_bytes > 0 and feeder._side_on
    clock = [0.0]
    monkeypatch.setattr(jf, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    split = feeder._splits[True]
    refused = feeder._planners[True].progressive
    order = epoch_order(len(split), feeder.seed, 0, True, True)
    assert feeder.steps(True) >= 2 * (PROBE + 1) + 2
    diffs, exact, seen = [], 0, 0
    for k, buf, m in feeder.epoch(0, True):
        clock[0] += 0.030 if feeder._side_on else 0.010
        be.synchronize()
        mem = be.read(src).reshape(-1)
        geom = feeder._bufs[buf][1][:, 0, 0, :]
        for r in range(m):
            i = int(order[k * batch + r])
            y, x, h, w, slot = (int(geom[r, COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
            want = _native.decode_jpeg(split.encoded_bytes(i), False, 8, False)[y:y + h, x:x + w].astype(np.int16)
            got = mem[slot:slot + h * w * 3].reshape(h, w, 3).astype(np.int16)
            if refused[i] and np.array_equal(got, want):
                exact += 1
            else:  # the engine's or the decoupled decoder's region
                diffs.append(float(np.abs(got - want).mean()))
        seen += m
    feeder.close()
    print(f"\nrefused auto: probe {feeder.calibration.get('refused_probe')}; {feeder.cpu_decoded} refusals by "
          f"libjpeg-turbo, {feeder.hybrid_decoded} by the decoupled decoder; worst mean |diff| {max(diffs):.3f}")
    assert feeder._refused_probe.choice == "cpu" and not feeder._side_on
    assert seen == len(split) and max(diffs) <= MEAN_ABS_LIMIT
    # (epoch counters: the refusals of this pass, split between the two decoders by the switch)
    assert feeder.cpu_decoded + feeder.hybrid_decoded == int(refused[order[:seen]].sum())
    assert feeder.hybrid_decoded > 0 and feeder.cpu_decoded > 0 and exact >= feeder.cpu_decoded
