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
)
from tr.data.seeds import epoch_order

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests"))
from backend_testkit import SimpleArena  # noqa: E402
from jpeg_feeder_scenario import PHOTOS, check_refused_auto, refused_auto_feeder, regions  # noqa: E402
from photos import make_photos  # noqa: E402

pytestmark = pytest.mark.gpu

MEAN_ABS_LIMIT = 1.5  # grey levels over a region (test_gpu_jpeg_decode.py's bound for nvJPEG's decode)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory, "photos", **PHOTOS)


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
    worst = (0.0, "")  # the largest mean |diff| of an nvJPEG region, and where
    order = epoch_order(len(split), feeder.seed, 0, True, True)
    try:
        for k, buf, m in feeder.epoch(0, True):
            be.synchronize()  # the transfer stream has decoded batch k and copied its CPU regions
            mem = be.read(src).reshape(-1)
            hw_rows = batch - round(feeder.cpu_share * batch)
            taken = np.flatnonzero(~refused[order[k * batch:k * batch + m]])
            for g in regions(feeder, True, buf, order[k * batch:k * batch + m], mem, interpolate):
                i = g.sample
                on_cpu = (refused_to == "cpu") if refused[i] else g.row not in taken[:hw_rows]
                who = ("libjpeg-turbo" if on_cpu else "decoupled" if refused[i] else "nvJPEG") + \
                    (" (a refused file)" if refused[i] else "")
                where = f"batch {k} row {g.row} sample {i}: {who}, {g.where}"
                if on_cpu:  # libjpeg-turbo's region, exactly
                    np.testing.assert_array_equal(g.got, g.want, err_msg=where)
                    exact += 1
                else:
                    diffs.append(g.mean_abs_diff())
                    worst = max(worst, (diffs[-1], where))
            seen += m
    finally:
        feeder.close()
    print(f"\nshare {share} -> {feeder.cpu_share}, {feeder._decoder.backend}: {exact} of {seen} regions from "
          f"libjpeg-turbo (exact), nvJPEG's "
          f"mean |diff| {np.mean(diffs) if diffs else 0:.3f}, worst {worst[0]:.3f} ({worst[1]}); "
          f"calibration {feeder.calibration}")
    assert seen == len(split) and exact == feeder.cpu_decoded + feeder.cpu_shared
    assert feeder.cpu_decoded == int(refused.sum()) * (refused_to == "cpu")
    assert feeder.hybrid_decoded == int(refused.sum()) * (refused_to == "nvjpeg")
    assert worst[0] <= MEAN_ABS_LIMIT, f"mean |diff| {worst[0]:.3f} > {MEAN_ABS_LIMIT}: {worst[1]}"
    if share == 1.0:
        assert not diffs and exact == seen
    if share == 0.0:
        assert feeder.cpu_shared == 0


def test_refused_auto_switches_decoders_between_batches(photos, monkeypatch):
    """refused="auto" on the real decoders: the probe moves the engine's refusals from nvJPEG's decoupled decoder
    to libjpeg-turbo part of the way through the epoch (a stand-in clock makes libjpeg-turbo's batches faster), and
    every region is right across the switch and in the validation pass after it: libjpeg-turbo's exactly, the
    engine's and the decoupled decoder's within tolerance (tests-integration/jpeg_feeder_scenario.py, which
    test_jpeg_feeder_cuda_path.py runs on stand-ins; each batch prints its decoders and regions)."""
    from tr.backend.cuda import CudaBackend
    from tr.graph.jpeg_input import JPEG_SRC

    feeder = refused_auto_feeder(photos)
    arena = SimpleArena()
    src = arena.add(JPEG_SRC, (feeder.capacity,), "uint8")
    be = CudaBackend()
    be.allocate(arena.layout())
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src))
    print(f"\nnvJPEG {feeder._decoder.backend}; side decoder "
          f"{feeder._side_decoder.backend if feeder._side_decoder else None}, {feeder.side_bytes} side bytes")
    if not feeder._decoder.backend.startswith("hardware"):
        feeder.close()
        pytest.skip("no hardware JPEG engine: nothing is refused")

    def read() -> np.ndarray:
        be.synchronize()  # the transfer stream has decoded the batch and copied its other regions
        return be.read(src).reshape(-1)

    try:
        check_refused_auto(feeder, read, monkeypatch, MEAN_ABS_LIMIT)
    finally:
        print(f"decoupled decoders: {feeder._side_decoder.decoupled if feeder._side_decoder else None}")
        feeder.close()
