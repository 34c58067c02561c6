"""The CUDA path of DeviceJpegFeeder without a GPU: which rows go to nvJPEG, where their bytes are staged, which
are decoded on the CPU and copied up, and where every region lands. The backend's memory is host memory here and
the decoder a stand-in that decodes with libjpeg-turbo and refuses progressive files as the hardware engine
does, so after each batch the decode buffer must hold exactly tr.data's regions (the real decoder and copies:
tests-integration/test_gpu_jpeg_decode.py on the GPU)."""

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
    calls: list[int] = []

    def __init__(self, device: int, backend: str, max_batch: int) -> None:
        self.max_batch = max_batch

    def decode(self, data, offsets, sizes, geom, dst, stream, precheck=True):
        from tr.data import _native
        from tr.data.jpeg_plan import COL

        assert len(geom) <= self.max_batch and stream == 77
        FakeDecoder.calls.append(len(geom))
        status = np.zeros(len(geom), np.int32)
        for k, (o, n, g) in enumerate(zip(offsets, sizes, geom, strict=True)):
            b = bytes(data[int(o):int(o) + int(n)])
            if _native.jpeg_needs_baseline(b):
                status[k] = 1  # the hardware engine refuses progressive files
                continue
            img = _native.decode_jpeg(b, False, 8)
            y, x, h, w = (int(g[COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w"))
            region = np.ascontiguousarray(img[y:y + h, x:x + w])
            ctypes.memmove(int(dst) + int(g[COL["slot"]]), region.ctypes.data, region.nbytes)
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

    def write_bytes(self, offset, data):
        self.synchronous_writes += 1
        self.mem[offset:offset + data.size] = data


def test_the_cuda_path_fills_the_decode_buffer_with_tr_data_s_regions(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    import tr.backend.cuda.jpeg as jpeg
    from tr.core.norm import NormMode
    from tr.data import ImageFolder, PreprocessorSettings, RandomHorizontalFlip, RandomResizedCrop, _native
    from tr.data.jpeg_plan import COL
    from tr.data.seeds import epoch_order
    from tr.graph.jpeg_input import JPEG_SRC
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    make_image_folder(tmp_path / "img", classes=3, per_class=9, min_side=40, max_side=90, seed=2)
    ds = ImageFolder(tmp_path / "img")
    s = (PreprocessorSettings().dataset(ds).normalization(NormMode.IMAGENET).seed(4)
         .train_transforms(RandomResizedCrop(24), RandomHorizontalFlip()).device_decode(True))
    feeder = DeviceJpegFeeder(s, batch=8)
    progressive = feeder._planners[True].progressive
    assert 0 < progressive.sum() < len(progressive)  # both paths are taken
    copies: list[int] = []

    def h2d(dst, src, n, stream):
        assert stream == 77
        copies.append(n)
        ctypes.memmove(int(dst), int(src), int(n))

    monkeypatch.setattr(jpeg, "DeviceJpegDecoder", FakeDecoder)
    monkeypatch.setattr(jpeg, "h2d_async", h2d)
    src = SimpleNamespace(offset=1024, numel=feeder.capacity, shape=SimpleNamespace(dims=(1, 1, 1, feeder.capacity)))
    be = FakeCuda(1024 + feeder.capacity)
    feeder.upload(be, SimpleNamespace(tensor=lambda name: src if name == JPEG_SRC else None))
    split = feeder._splits[True]
    seen = 0
    for epoch in (0, 1):
        order = epoch_order(len(split), feeder.seed, epoch, True, True)
        for k, buf, m in feeder.epoch(epoch, True):
            geom = feeder._bufs[buf][1][:, 0, 0, :]
            for r in range(m):  # each row's region holds tr.data's decode of its sample's box
                i = int(order[k * 8 + r])
                y, x, h, w, slot = (int(geom[r, COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
                want = _native.decode_jpeg(split.encoded_bytes(i), False, 8)[y:y + h, x:x + w]
                got = be.mem[1024 + slot:1024 + slot + h * w * 3].reshape(h, w, 3)
                np.testing.assert_array_equal(got, want, err_msg=f"epoch {epoch} batch {k} row {r} sample {i}")
            np.testing.assert_array_equal(feeder._bufs[buf][0][:m], split.labels[order[k * 8:k * 8 + m]])
            seen += m
        assert feeder.decoded_on_cpu() == int(progressive.sum())  # every progressive file, decoded on the CPU
    assert seen == 2 * len(split) and be.synchronous_writes == 0 and len(copies) == 2 * int(progressive.sum())
    assert max(FakeDecoder.calls) <= 8
    feeder.close()
