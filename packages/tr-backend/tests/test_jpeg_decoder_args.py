"""DeviceJpegDecoder's Python side on a machine without a GPU: what it refuses before any CUDA work, and what it
hands the extension (the decoupled path's arguments: gpu_huffman_pixels, the "regions_decoupled" call). A fake
extension records the calls; tests-integration/test_gpu_jpeg_decode.py runs the real one on a GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tr.backend.cuda import jpeg
from tr.backend.rules.image import COL, GEOM_COLS
from tr.core.errors import ConfigError


class _FakeDecoder:
    def __init__(self, *args: Any) -> None:
        self.args = args
        self.backend = "gpu+strict"
        self.decoupled = "cpu-huffman+gpu-huffman"
        self.calls: list[tuple] = []

    def decode(self, *args: Any) -> list[int]:
        self.calls.append(args)
        return [0] * len(args[0])


class _FakeNative:
    JpegDecoder = _FakeDecoder


@pytest.fixture
def fake(monkeypatch) -> None:
    monkeypatch.setattr(jpeg, "_native", lambda: _FakeNative)


@pytest.mark.parametrize("kw, match", [
    ({"backend": "cpu"}, "backend must be one of"),
    ({"threads": 0}, "max_batch and threads must be >= 1"),
    ({"max_batch": 0}, "max_batch and threads must be >= 1"),
    ({"gpu_huffman_pixels": -1}, "gpu_huffman_pixels must be >= 0 or None"),
])
def test_bad_arguments_are_refused_before_the_extension_is_asked(monkeypatch, kw, match):
    def no_native() -> None:
        raise AssertionError("the extension was asked")

    monkeypatch.setattr(jpeg, "_native", no_native)
    with pytest.raises(ConfigError, match=match):
        jpeg.DeviceJpegDecoder(0, **{"backend": "gpu", **kw})


@pytest.mark.parametrize("pixels, passed", [(1_000_000, 1_000_000), (0, 0), (None, -1)])
def test_gpu_huffman_pixels_reach_the_extension(fake, pixels, passed):
    dec = jpeg.DeviceJpegDecoder(0, "gpu", max_batch=8, threads=3, gpu_huffman_pixels=pixels)
    assert dec._d.args == (0, "gpu", 8, 3, True, False, passed)
    assert dec.decoupled == "cpu-huffman+gpu-huffman"


def test_the_decoupled_call_reaches_the_extension_as_call_4(fake):
    dec = jpeg.DeviceJpegDecoder(0, "hardware", max_batch=4)
    data = np.zeros(100, np.uint8)
    geom = np.zeros((2, GEOM_COLS), np.int32)
    geom[:, COL["roi_w"]], geom[:, COL["roi_h"]] = 4, 2
    geom[1, COL["slot"]] = 64
    status = dec.decode(data, np.array([0, 50]), np.array([50, 50]), geom, 1 << 20, 7, call="regions_decoupled")
    assert status.tolist() == [0, 0]
    args = dec._d.calls[0]
    assert args[2] == [1 << 20, (1 << 20) + 64] and args[3] == [12, 12] and args[5:] == (7, True, 4)
    with pytest.raises(ConfigError, match="call must be one of"):
        dec.decode(data, np.array([0]), np.array([50]), geom[:1], 0, 0, call="decoupled")
