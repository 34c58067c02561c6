"""nvJPEG decoding on the device (issue [13], GPU tests): regions of real JPEGs decoded by tr.backend.cuda.jpeg
against libjpeg-turbo's whole decode (tr.data), the statuses of files the backend does not take and of damaged
ones, decoding twice giving the same bytes, and the whole device chain (planner, nvJPEG, the CPU fallback for
what nvJPEG refuses, image_resample on CUDA) against the CPU pipeline.

The tolerance against libjpeg-turbo is nvJPEG's, not ours: the libraries' IDCT and chroma upsampling may differ.
Both are compared in the same chroma mode: interpolated (libjpeg-turbo's 'fancy' triangle upsampling, nvJPEG's
interpolation flag where the backend takes it) and replicated (libjpeg-turbo's do_fancy_upsampling off, nvJPEG's
default: the device feeder's default). Each test prints what it measured. On the H200 (2026-12-02,
benchmarks/RESULTS.md) the hardware engine's interpolated regions were libjpeg-turbo's pixels: mean |difference|
0.000, largest 1 grey level; the bounds below leave room for other GPUs' backends."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core.norm import NormMode
from tr.data import ImageFolder, _native
from tr.data.jpeg_plan import COL, JpegPlanner, decode_regions
from tr.data.transforms import Compose, RandomErasing, RandomHorizontalFlip, RandomResizedCrop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tr-backend" / "tests"))
from backend_testkit import SimpleArena, op  # noqa: E402
from photos import make_photos  # noqa: E402

from tr.backend.rules.image import GEOM_COLS  # noqa: E402

pytestmark = pytest.mark.gpu

MEAN_ABS_LIMIT = 1.5  # grey levels, over a region
P999_LIMIT = 16  # the 99.9th percentile of |nvJPEG - libjpeg-turbo| over a region


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory, "photos", classes=4, per_class=12, min_side=64, max_side=500, seed=9,
                       val_per_class=1)


def _cuda(capacity: int, batch: int = 0, size: int = 0, c_out: int = 3, interpolate: bool = True, guard: int = 0,
          backend: str = "auto", **decoder_kw):
    """The backend (the decode buffer "src", the guard tensor after it when asked, the resample's tensors for a
    batch), its tensors and a decoder (``backend``, ``decoder_kw``: DeviceJpegDecoder's)."""
    from tr.backend.cuda.jpeg import DeviceJpegDecoder

    a = SimpleArena()
    t = {"src": a.add("src", (capacity,), "uint8")}
    if guard:
        t["guard"] = a.add("guard", (guard,), "uint8")
    if batch:
        t["geom"] = a.add("geom", (batch, 1, 1, GEOM_COLS), "int32")
        t["y"] = a.add("y", (batch, size, size, c_out), "fp16")
    from tr.backend.cuda import CudaBackend

    be = CudaBackend()
    be.allocate(a.layout())
    return be, t, DeviceJpegDecoder(0, backend, max_batch=max(batch, 64), interpolate=interpolate, **decoder_kw)


def _decode(be, t, dec, split, plan, call: str = "regions"):
    stream = be.ctx.stream(0)
    status = dec.decode(split.images, plan.offsets, plan.sizes, plan.geom, be.arena_ptr + t["src"].offset, stream,
                        call=call)
    be.synchronize()
    return status, be.read(t["src"]).reshape(-1)


def _region_diffs(plan, rows, got, want) -> np.ndarray:
    """(mean, 99.9th percentile, max) of |got - want| over each row's region."""
    out = []
    for k in rows:
        g = plan.geom[k]
        s, n = int(g[COL["slot"]]), int(g[COL["roi_h"]]) * int(g[COL["roi_w"]]) * 3
        d = np.abs(got[s:s + n].astype(np.int16) - want[s:s + n].astype(np.int16))
        out.append((float(d.mean()), float(np.percentile(d, 99.9)), int(d.max())))
    return np.array(out)


@pytest.mark.parametrize("interpolate", [True, False])
def test_regions_decode_as_libjpeg_turbo_within_the_documented_tolerance(photos, interpolate):
    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(len(split)), seed=3, epoch=0)
    be, t, dec = _cuda(planner.capacity(len(split)), interpolate=interpolate)
    assert ("interpolated" in dec.backend) == interpolate  # (the H200's engine takes the flag)
    status, got = _decode(be, t, dec, split, plan)
    want = decode_regions(split, plan, interpolate_chroma=interpolate)
    print(f"\nnvJPEG backend {dec.backend}: {np.bincount(status, minlength=3).tolist()} decoded/unsupported/damaged")
    assert (status != 2).all()
    assert (status == 0).sum() >= len(split) // 2  # most of the photographs are baseline
    worst = _region_diffs(plan, np.flatnonzero(status == 0), got, want)
    print(f"|nvJPEG - libjpeg-turbo|: mean {worst[:, 0].mean():.3f} (worst region {worst[:, 0].max():.3f}), "
          f"p99.9 worst {worst[:, 1].max():.0f}, max {int(worst[:, 2].max())}")
    other = _region_diffs(plan, np.flatnonzero(status == 0), got,
                          decode_regions(split, plan, interpolate_chroma=not interpolate))
    print(f"against libjpeg-turbo's other chroma upsampling: mean {other[:, 0].mean():.3f} (worst region "
          f"{other[:, 0].max():.3f}), p99.9 worst {other[:, 1].max():.0f}, max {int(other[:, 2].max())}")
    assert worst[:, 0].max() <= MEAN_ABS_LIMIT and worst[:, 1].max() <= P999_LIMIT
    _, again = _decode(be, t, dec, split, plan)
    np.testing.assert_array_equal(again, got)  # deterministic: the same bytes on a second decode


@pytest.mark.parametrize("strict, interpolate", [(True, True), (False, False)])
def test_whole_image_calls_give_the_regions_pixels(photos, strict, interpolate):
    """The calls the stage benchmark compares (device_decode_stages.py): whole images through nvjpegDecodeBatched,
    interleaved or planar, hold the pixels the region call gives for the same decoder (within nvJPEG's tolerance
    against libjpeg-turbo: the calls may upsample chroma at a region's edge differently); a region that is not the
    whole image is refused for them (nvJPEG would write past it)."""
    from tr.backend.cuda.jpeg import DeviceJpegDecoder
    from tr.core.errors import ConfigError

    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(16), seed=2, epoch=0)
    ok = np.flatnonzero(~planner.progressive[plan.indices])  # the engine's files
    sizes = plan.shapes[ok, 0].astype(np.int64) * plan.shapes[ok, 1] * 3
    whole = plan.geom[ok].copy()
    whole[:, COL["slot"]] = np.concatenate([[0], np.cumsum(-(-sizes // 256) * 256)[:-1]])
    whole[:, COL["roi_y"]] = whole[:, COL["roi_x"]] = 0
    whole[:, COL["roi_h"]], whole[:, COL["roi_w"]] = plan.shapes[ok, 0], plan.shapes[ok, 1]
    be, t, _ = _cuda(int(whole[-1, COL["slot"]] + sizes[-1] + planner.capacity(16)))
    dec = DeviceJpegDecoder(0, "auto", 16, strict=strict, interpolate=interpolate)
    assert ("interpolated" in dec.backend) <= interpolate and ("strict" in dec.backend) <= strict
    dst, stream = be.arena_ptr + t["src"].offset, be.ctx.stream(0)
    got = {}
    for call, geom in (("regions", plan.geom[ok]), ("whole", whole), ("whole_planar", whole)):
        status = dec.decode(split.images, plan.offsets[ok], plan.sizes[ok], geom, dst, stream, False, call)
        be.synchronize()
        assert (status == 0).all(), (call, status)
        got[call] = be.read(t["src"]).reshape(-1).copy()
    diffs = []
    for j, g in enumerate(plan.geom[ok]):
        y, x, h, w, s = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
        H, W, S = int(whole[j, COL["roi_h"]]), int(whole[j, COL["roi_w"]]), int(whole[j, COL["slot"]])
        region = got["regions"][s:s + h * w * 3].reshape(h, w, 3)
        inter = got["whole"][S:S + H * W * 3].reshape(H, W, 3)
        planar = got["whole_planar"][S:S + H * W * 3].reshape(3, H, W).transpose(1, 2, 0)
        for a, b in ((inter[y:y + h, x:x + w], region), (planar, inter)):
            d = np.abs(a.astype(np.int16) - b.astype(np.int16))
            diffs.append((float(d.mean()), int(d.max())))
    diffs = np.array(diffs)  # (region vs whole, planar vs interleaved) alternating
    print(f"\n{dec.backend}: region vs whole image mean |diff| {diffs[0::2, 0].max():.3f} (max "
          f"{int(diffs[0::2, 1].max())}), planar vs interleaved {diffs[1::2, 0].max():.3f} "
          f"(max {int(diffs[1::2, 1].max())})")
    assert diffs[:, 0].max() <= MEAN_ABS_LIMIT
    with pytest.raises(ConfigError, match="needs its region to be the image"):
        dec.decode(split.images, plan.offsets[ok], plan.sizes[ok], plan.geom[ok], dst, stream, False, "whole")


def test_a_damaged_file_is_reported_and_the_batch_still_decodes(photos):
    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(8), seed=1, epoch=0)
    data = split.images.copy()
    o, n = int(plan.offsets[3]), int(plan.sizes[3])
    data[o + n // 3:o + n] = 0x55  # entropy data garbled to the end, the header whole
    be, t, dec = _cuda(planner.capacity(8))
    status = dec.decode(data, plan.offsets, plan.sizes, plan.geom, be.arena_ptr + t["src"].offset, be.ctx.stream(0))
    be.synchronize()
    assert status[3] == 2
    assert (np.delete(status, 3) != 2).all()


def test_the_device_chain_is_the_cpu_pipeline_up_to_the_decoders_difference(photos):
    split = ImageFolder(photos).load("train")
    size, batch = 64, 32
    comp = Compose([RandomResizedCrop(size), RandomHorizontalFlip(), RandomErasing(0.5)], NormMode.IMAGENET,
                   "float16", pad_channels_to=4)
    planner = JpegPlanner(split, comp)
    plan = planner.plan(np.arange(batch), seed=8, epoch=1)
    be, t, dec = _cuda(planner.capacity(batch), batch, size, 4)
    status, _ = _decode(be, t, dec, split, plan)
    fallback = np.flatnonzero(status == 1)
    if fallback.size:  # what nvJPEG does not take is decoded on the CPU into its region
        cpu = decode_regions(split, plan)
        for k in fallback:
            g = plan.geom[k]
            s, n = int(g[COL["slot"]]), int(g[COL["roi_h"]]) * int(g[COL["roi_w"]]) * 3
            be.write_bytes(t["src"].offset + s, cpu[s:s + n])
    be.write(t["geom"], plan.geom.reshape(batch, 1, 1, GEOM_COLS))
    g = be.capture("resample", [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], mean=comp.mean,
                                   std=comp.std)])
    be.launch(g)
    be.synchronize()
    got = be.read(t["y"]).astype(np.float32)
    diffs = []
    for k, i in enumerate(plan.indices):
        want = comp(_native.decode_jpeg(split.encoded_bytes(int(i)), False, 8), seed=8, epoch=1, index=int(i))
        d = np.abs(got[k] - want.astype(np.float32)) * 255 * 0.226  # back to grey levels (ImageNet's std)
        diffs.append(float(d.mean()))
        if status[k] == 1:  # decoded by libjpeg-turbo: the CPU pipeline's bytes
            np.testing.assert_array_equal(got[k], want.astype(np.float32))
    print(f"\ndevice chain vs CPU pipeline: mean |diff| {np.mean(diffs):.3f} grey levels, worst sample "
          f"{np.max(diffs):.3f}; {fallback.size} of {batch} decoded on the CPU")
    assert np.max(diffs) <= MEAN_ABS_LIMIT


@pytest.mark.parametrize("interpolate", [True, False])
def test_the_decoder_writes_nothing_outside_the_regions(photos, interpolate):
    """nvJPEG writes each image's region of interest and not a byte more: the decode buffer's bytes between and
    after the regions (and a guard tensor after the buffer) keep what was there, in either chroma mode, for every
    crop the planner draws (at the images' edges too)."""
    split = ImageFolder(photos).load("train")
    n = len(split)
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    cap = planner.capacity(n)
    be, t, dec = _cuda(cap, interpolate=interpolate, guard=4096)
    assert n <= 64  # (the decoder's batch)
    for seed in (1, 2, 3):
        plan = planner.plan(np.arange(n), seed=seed, epoch=0)
        be.write(t["src"], np.full(cap, 0xA5, np.uint8))
        be.write(t["guard"], np.full(4096, 0x5A, np.uint8))
        ok = np.flatnonzero(~planner.progressive[plan.indices])
        status = dec.decode(split.images, plan.offsets[ok], plan.sizes[ok], plan.geom[ok],
                            be.arena_ptr + t["src"].offset, be.ctx.stream(0), False)
        be.synchronize()
        assert (status == 0).all(), status
        mem = be.read(t["src"]).reshape(-1)
        outside = np.ones(cap, bool)
        for g in plan.geom[ok]:
            s = int(g[COL["slot"]])
            outside[s:s + int(g[COL["roi_h"]]) * int(g[COL["roi_w"]]) * 3] = False
        bad = np.flatnonzero(outside & (mem != 0xA5))
        assert bad.size == 0, f"{dec.backend}, seed {seed}: {bad.size} bytes written outside the regions: {bad[:8]}"
        assert (be.read(t["guard"]).reshape(-1) == 0x5A).all(), f"{dec.backend}: the guard after the buffer written"


# ---- the GPU-hybrid backend's decoupled path (csrc/cuda/jpeg_decoupled.hpp) --------------------------------------
# gpu_huffman_pixels: 1_000_000 (the default) leaves these photographs' Huffman decoding to the host threads; 0 sends
# every baseline file's to the GPU (NVJPEG_BACKEND_GPU_HYBRID's decoder): both decoders are checked.
HUFFMAN = [pytest.param(1_000_000, id="cpu-huffman"), pytest.param(0, id="gpu-huffman")]


def _jpeg_kind(b: bytes) -> str:
    """'progressive', 'gray', '444', '420' or 'other', from the file's frame header (SOF0/1/2)."""
    i = 2
    while i + 4 <= len(b):
        if b[i] != 0xFF:
            i += 1
            continue
        marker = b[i + 1]
        if marker in (0x01, 0xFF) or 0xD0 <= marker <= 0xD8:
            i += 1 if marker == 0xFF else 2
            continue
        if marker in (0xC0, 0xC1, 0xC2):
            n = b[i + 9]
            hv = [(b[i + 11 + 3 * c] >> 4, b[i + 11 + 3 * c] & 15) for c in range(n)]
            if marker == 0xC2:
                return "progressive"
            if n == 1:
                return "gray"
            if n == 3 and hv == [(1, 1)] * 3:
                return "444"
            if n == 3 and hv == [(2, 2), (1, 1), (1, 1)]:
                return "420"
            return "other"
        i += 2 + int.from_bytes(b[i + 2:i + 4], "big")
    return "other"


def _kinds(split, plan) -> np.ndarray:
    return np.array([_jpeg_kind(split.encoded_bytes(int(i))) for i in plan.indices])


@pytest.mark.parametrize("gpu_huffman_pixels", HUFFMAN)
@pytest.mark.parametrize("interpolate", [True, False])
def test_hybrid_regions_decode_as_libjpeg_turbo_for_each_kind_of_file(photos, interpolate, gpu_huffman_pixels):
    """The GPU-hybrid backend's regions (the decoupled path) are libjpeg-turbo's within nvJPEG's tolerance, in the
    chroma mode the decoder was made with, for baseline 4:2:0, 4:4:4 and gray files (every one of them decoded)
    and for the progressive files it takes (how many it takes is printed)."""
    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(len(split)), seed=4, epoch=0)
    be, t, dec = _cuda(planner.capacity(len(split)), interpolate=interpolate, backend="gpu",
                       gpu_huffman_pixels=gpu_huffman_pixels)
    assert dec.backend.startswith("gpu") and "cpu-huffman" in dec.decoupled
    status, got = _decode(be, t, dec, split, plan)
    kinds = _kinds(split, plan)
    mode = "interpolated" in dec.backend
    print(f"\n{dec.backend} ({dec.decoupled}), gpu_huffman_pixels {gpu_huffman_pixels}: " + ", ".join(
        f"{k} {np.bincount(status[kinds == k], minlength=3).tolist()}" for k in np.unique(kinds)) +
        " decoded/unsupported/damaged")
    assert (status != 2).all()
    for kind in ("420", "444", "gray"):
        assert (kinds == kind).any(), f"the photographs have no {kind} file"
        assert (status[kinds == kind] == 0).all(), (kind, status[kinds == kind])
    ok = np.flatnonzero(status == 0)
    want = decode_regions(split, plan, interpolate_chroma=mode)
    diffs = _region_diffs(plan, ok, got, want)
    for kind in np.unique(kinds[ok]):
        d = diffs[kinds[ok] == kind]
        print(f"  {kind}: |hybrid - libjpeg-turbo| mean {d[:, 0].mean():.3f} (worst region {d[:, 0].max():.3f}), "
              f"p99.9 worst {d[:, 1].max():.0f}, max {int(d[:, 2].max())}")
    other = _region_diffs(plan, ok, got, decode_regions(split, plan, interpolate_chroma=not mode))
    print(f"  against libjpeg-turbo's other chroma upsampling: mean {other[:, 0].mean():.3f}")
    assert diffs[:, 0].max() <= MEAN_ABS_LIMIT and diffs[:, 1].max() <= P999_LIMIT


@pytest.mark.parametrize("gpu_huffman_pixels", [
    pytest.param(1_000_000, id="cpu-huffman"),
    pytest.param(0, id="gpu-huffman"),  # (reports it too: passed on the H200, 2026-12-04, three machines)
])
def test_hybrid_reports_a_damaged_file_and_decodes_the_rest(photos, gpu_huffman_pixels):
    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(12), seed=1, epoch=0)
    kinds = _kinds(split, plan)
    bad = int(np.flatnonzero(kinds != "progressive")[1])  # a baseline file, not the first (the batch goes on)
    data = split.images.copy()
    o, n = int(plan.offsets[bad]), int(plan.sizes[bad])
    data[o + n // 3:o + n] = 0x55  # entropy data garbled to the end, the header whole
    be, t, dec = _cuda(planner.capacity(12), backend="gpu", gpu_huffman_pixels=gpu_huffman_pixels)
    status = dec.decode(data, plan.offsets, plan.sizes, plan.geom, be.arena_ptr + t["src"].offset, be.ctx.stream(0))
    be.synchronize()
    print(f"\n{dec.backend}: statuses {status.tolist()} (damaged: {bad})")
    assert status[bad] == 2
    others = np.delete(np.arange(12), bad)
    assert (status[others] != 2).all() and (status[others[kinds[others] != "progressive"]] == 0).all()
    got = be.read(t["src"]).reshape(-1)
    ok = others[status[others] == 0]
    diffs = _region_diffs(plan, ok, got, decode_regions(split, plan, interpolate_chroma="interpolated" in dec.backend))
    assert diffs[:, 0].max() <= MEAN_ABS_LIMIT and diffs[:, 1].max() <= P999_LIMIT


@pytest.mark.parametrize("gpu_huffman_pixels", HUFFMAN)
def test_hybrid_writes_nothing_outside_the_decoded_regions(photos, gpu_huffman_pixels):
    """Mirrors test_the_decoder_writes_nothing_outside_the_regions for the decoupled path, with every file of the
    batch (progressive ones too): only the regions of decoded files are written, not a byte between or after
    them, nor in a refused file's region."""
    split = ImageFolder(photos).load("train")
    n = len(split)
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    cap = planner.capacity(n)
    be, t, dec = _cuda(cap, interpolate=False, guard=4096, backend="gpu", gpu_huffman_pixels=gpu_huffman_pixels)
    for seed in (1, 2, 3):
        plan = planner.plan(np.arange(n), seed=seed, epoch=0)
        be.write(t["src"], np.full(cap, 0xA5, np.uint8))
        be.write(t["guard"], np.full(4096, 0x5A, np.uint8))
        status, mem = _decode(be, t, dec, split, plan)
        assert (status != 2).all(), status
        outside = np.ones(cap, bool)
        for g in plan.geom[status == 0]:
            s = int(g[COL["slot"]])
            outside[s:s + int(g[COL["roi_h"]]) * int(g[COL["roi_w"]]) * 3] = False
        wrong = np.flatnonzero(outside & (mem != 0xA5))
        assert wrong.size == 0, f"{dec.backend}, seed {seed}: {wrong.size} bytes written outside: {wrong[:8]}"
        assert (be.read(t["guard"]).reshape(-1) == 0x5A).all(), f"{dec.backend}: the guard after the buffer written"


def test_hybrid_statuses_and_pixels_are_the_same_on_every_call_and_thread_count(photos):
    """Two calls give the same statuses and bytes; so do 1 and 3 host threads (a batch of 48 through 2 and 6 slots:
    each slot reused many times within a call, and across calls while the stream may still hold its last use)."""
    split = ImageFolder(photos).load("train")
    n = len(split)
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(n), seed=6, epoch=0)
    runs = []
    for threads in (3, 1):
        be, t, dec = _cuda(planner.capacity(n), backend="gpu", threads=threads)
        for _ in range(2):
            be.write(t["src"], np.zeros(planner.capacity(n), np.uint8))
            status, mem = _decode(be, t, dec, split, plan)
            runs.append((status.copy(), mem.copy()))
    print(f"\n{dec.backend}: {np.bincount(runs[0][0], minlength=3).tolist()} decoded/unsupported/damaged")
    for status, mem in runs[1:]:
        np.testing.assert_array_equal(status, runs[0][0])
        np.testing.assert_array_equal(mem, runs[0][1])


def test_hybrid_refuses_a_region_outside_its_image(photos):
    from tr.core.errors import ConfigError

    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(4), seed=1, epoch=0)
    geom = plan.geom.copy()
    geom[2, COL["roi_x"]] = int(plan.shapes[2, 1]) - int(geom[2, COL["roi_w"]]) + 1  # one column past the edge
    be, t, dec = _cuda(planner.capacity(4), backend="gpu")
    with pytest.raises(ConfigError, match="lies outside it"):
        dec.decode(split.images, plan.offsets, plan.sizes, geom, be.arena_ptr + t["src"].offset, be.ctx.stream(0))
    be.synchronize()
    status, _ = _decode(be, t, dec, split, plan)  # the decoder still works after the refusal
    assert (status != 2).all()


def test_a_hardware_decoder_takes_progressive_files_through_the_decoupled_call(photos):
    """What the engine refuses (progressive files) can go to the same decoder with call="regions_decoupled"
    (NVJPEG_BACKEND_HYBRID's decoder on the hardware handle) instead of libjpeg-turbo; how many it takes is
    printed, and those it decodes are libjpeg-turbo's within the tolerance."""
    from tr.core.errors import DeviceUnavailableError

    split = ImageFolder(photos).load("train")
    planner = JpegPlanner(split, Compose([RandomResizedCrop(64)], NormMode.IMAGENET, "float16"))
    plan = planner.plan(np.arange(len(split)), seed=5, epoch=0)
    try:
        be, t, dec = _cuda(planner.capacity(len(split)), backend="hardware", interpolate=False)
    except DeviceUnavailableError as e:
        pytest.skip(f"no hardware JPEG decoder: {e}")
    kinds = _kinds(split, plan)
    engine, _ = _decode(be, t, dec, split, plan)
    assert dec.decoupled == ""  # made at the first decoupled call
    status, got = _decode(be, t, dec, split, plan, call="regions_decoupled")
    prog = kinds == "progressive"
    counts = [np.bincount(x[prog], minlength=3).tolist() for x in (engine, status)]
    print(f"\n{dec.backend} ({dec.decoupled}): {int(prog.sum())} progressive files, decoded/unsupported/damaged by "
          f"the engine {counts[0]}, by the decoupled call {counts[1]}")
    assert "cpu-huffman" in dec.decoupled and (status != 2).all() and (status[~prog] == 0).all()
    ok = np.flatnonzero(status == 0)
    diffs = _region_diffs(plan, ok, got, decode_regions(split, plan, interpolate_chroma=False))
    assert diffs[:, 0].max() <= MEAN_ABS_LIMIT and diffs[:, 1].max() <= P999_LIMIT
