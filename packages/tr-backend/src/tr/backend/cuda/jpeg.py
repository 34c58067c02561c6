"""JPEG decoding on the device through nvJPEG (issue [13]): a batch of JPEG files in host memory decoded into the
decode regions a geometry table places in a device buffer (tr/backend/rules/image.py GEOM: each sample's region
of interest, RGB u8 HWC, at its slot), which image_resample then crops, resizes and normalises.

nvJPEG is opened at run time (``libnvjpeg.so.13``): from ``TR_NVJPEG_PATH``, NVIDIA's wheel (nvidia-nvjpeg:
``nvidia/cu13/lib``), the library found at build time, then the system's loader; DeviceUnavailableError names
every path tried. The decoder takes the hardware backend (the JPEG engines of A100/H100/H200) where the GPU has
one, else the GPU-assisted hybrid; ``backend`` says which, with its flags (strict bitstreams; interpolated chroma
upsampling where asked and the backend takes it: libjpeg-turbo's default upsampling, but several times the
engine's time (benchmarks/RESULTS.md); without, each chroma sample is replicated, as libjpeg-turbo's
``interpolate_chroma=False`` decodes).

``decode`` returns one status a sample: DECODED, UNSUPPORTED (this backend does not take the file: progressive
or 4:1:0 on the hardware engine, CMYK: the caller decodes it on the CPU and uploads its region) or DAMAGED.

The GPU-hybrid backend (GPUs without a JPEG engine) decodes regions through nvJPEG's decoupled per-image API
(csrc/cuda/jpeg_decoupled.hpp): Huffman decoding on ``threads`` host threads (on the GPU for baseline regions
whose Huffman work reaches ``gpu_huffman_pixels``), the rest on the stream. ``call="regions_decoupled"`` sends a
hardware decoder's batch the same way: a caller may give it the files the engine refuses (progressive).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tr.backend.cuda.native import require_native, wheel_libraries
from tr.backend.rules.image import CHANNELS, COL, GEOM_COLS
from tr.core.errors import ConfigError, DeviceUnavailableError

DECODED, UNSUPPORTED, DAMAGED = 0, 1, 2
BACKENDS = ("auto", "hardware", "gpu")
# how decode() calls nvJPEG: each region of interest (nvjpegDecodeBatchedEx, interleaved RGB: the feeder's), or
# whole images with nvjpegDecodeBatched, interleaved or planar (the calls other decoders make: for comparison), or
# as the file's YUV planes (no colour conversion: for measuring it), or the regions through the decoupled
# per-image API whatever the backend (what "regions" does on the GPU-hybrid backend)
CALLS = {"regions": 0, "whole": 1, "whole_planar": 2, "whole_yuv": 3, "regions_decoupled": 4}


def nvjpeg_candidates() -> list[str]:
    """libnvjpeg from NVIDIA's wheels in this interpreter (nvidia/cu13/lib; CUDA 12: nvidia/nvjpeg/lib)."""
    return wheel_libraries((("cu13/lib", "libnvjpeg.so.13"), ("nvjpeg/lib", "libnvjpeg.so.12")))


_ADDED = False


def _native() -> Any:
    global _ADDED
    native = require_native()
    if not hasattr(native, "JpegDecoder"):
        raise DeviceUnavailableError("nvJPEG unavailable: tr.backend._native was built without the CUDA ops")
    if not _ADDED:
        native.add_nvjpeg_candidates(nvjpeg_candidates())
        _ADDED = True
    return native


def load_nvjpeg() -> tuple[str, int]:
    """Open nvJPEG now: (library path, version as major * 1000 + minor * 10 + patch)."""
    path, version = _native().load_nvjpeg()
    return str(path), int(version)


def h2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from host address ``src`` (pinned) to device address ``dst`` on ``stream``, asynchronously:
    the host bytes must stay valid until the stream has passed the copy."""
    _native().h2d_async(int(dst), int(src), int(nbytes), int(stream))


def d2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from device address ``src`` to device address ``dst`` on ``stream``, asynchronously."""
    _native().d2d_async(int(dst), int(src), int(nbytes), int(stream))


def device_buffer(nbytes: int, device: int = 0) -> Any:
    """A device allocation of its own (cudaMalloc, freed with the object): ``.ptr``, ``.size``. For a feeder's
    side buffers, which lie outside the plan's arena."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
        raise ConfigError(f"device_buffer needs a positive byte count, got {nbytes!r}")
    return require_native().DeviceArena(int(nbytes), int(device))


class SideStream:
    """A stream of its own at the device's greatest priority, and ``events`` events to order other streams after
    work queued on it (``record(i)`` there, ``wait(i, stream)``: what ``stream`` queues next waits for that
    record). ``close()`` (or the object's end) destroys them."""

    def __init__(self, device: int = 0, events: int = 2) -> None:
        n = _native()
        self._n = n
        self.stream = int(n.stream_create(int(device), True))  # 0 once closed
        self.events = [int(n.event_create()) for _ in range(int(events))]

    def record(self, i: int) -> None:
        self._n.event_record(self.events[i], self.stream)

    def wait(self, i: int, stream: int) -> None:
        self._n.stream_wait_event(int(stream), self.events[i])

    def close(self) -> None:
        for e in self.events:
            self._n.event_destroy(e)
        self.events = []
        if self.stream:
            self._n.stream_destroy(self.stream)  # (cudaStreamDestroy lets queued work finish first)
            self.stream = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # (interpreter shutdown)
            pass


class DeviceJpegDecoder:
    """Decodes batches of at most ``max_batch`` JPEGs on CUDA device ``device`` (see the module docstring)."""

    def __init__(self, device: int = 0, backend: str = "auto", max_batch: int = 256, threads: int = 4,
                 strict: bool = True, interpolate: bool = False, gpu_huffman_pixels: int | None = 1_000_000) -> None:
        """``threads``: host threads for a batch (nvJPEG's, or the decoupled path's Huffman decoding);
        ``gpu_huffman_pixels``: on the decoupled path, baseline regions whose width times the rows down to their
        bottom reaches it are Huffman-decoded on the GPU, the others on the host threads (None: never)."""
        if backend not in BACKENDS:
            raise ConfigError(f"JPEG decoder backend must be one of {BACKENDS}, got {backend!r}")
        if int(max_batch) < 1 or int(threads) < 1:
            raise ConfigError(f"JPEG decoder max_batch and threads must be >= 1, got {max_batch} and {threads}")
        if gpu_huffman_pixels is not None and int(gpu_huffman_pixels) < 0:
            raise ConfigError(f"gpu_huffman_pixels must be >= 0 or None, got {gpu_huffman_pixels}")
        pixels = -1 if gpu_huffman_pixels is None else int(gpu_huffman_pixels)
        self._d = _native().JpegDecoder(int(device), backend, int(max_batch), int(threads), bool(strict),
                                        bool(interpolate), pixels)
        self.max_batch = int(max_batch)

    @property
    def backend(self) -> str:
        return str(self._d.backend)

    @property
    def decoupled(self) -> str:
        """The decoupled path's nvJPEG decoders ("cpu-huffman+gpu-huffman"); "" until made (at construction on
        the GPU-hybrid backend, at the first "regions_decoupled" call on the hardware one)."""
        return str(self._d.decoupled)

    def decode(self, data: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, geom: np.ndarray, dst: int,
               stream: int, precheck: bool = True, call: str = "regions") -> np.ndarray:
        """Decode sample k's bytes ``data[offsets[k]:offsets[k] + sizes[k]]`` (host memory that stays valid until
        ``stream`` has passed the decode; pinned for speed) into its region at device address ``dst`` + its slot,
        on ``stream`` (a cudaStream_t as an integer). Returns the statuses (int32, one a sample). ``precheck``:
        parse every header and ask the backend first; without, the batch goes in as it is and only a failed batch
        is decoded image by image (for callers that sorted out what the backend refuses). ``call``: see CALLS;
        the "whole*" calls need each row's region to be its whole image (checked: a ConfigError); "whole_yuv" writes
        the file's own Y, Cb, Cr planes (pitch w, at dst + c * h * w; chroma at the file's subsampling), no RGB;
        "regions_decoupled" (and "regions" on the GPU-hybrid backend) parses every file, so ``precheck`` is moot
        there, and a region outside its image is a ConfigError."""
        if call not in CALLS:
            raise ConfigError(f"JPEG decoder call must be one of {tuple(CALLS)}, got {call!r}")
        g = np.ascontiguousarray(geom, dtype=np.int32).reshape(-1, GEOM_COLS)
        n = len(g)
        if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
            raise ConfigError(f"JPEG bytes must be a contiguous flat uint8 array, got {data.dtype} {data.shape}")
        off = np.asarray(offsets, np.int64)
        siz = np.asarray(sizes, np.int64)
        if len(off) != n or len(siz) != n:
            raise ConfigError(f"{n} geometry rows but {len(off)} offsets and {len(siz)} sizes")
        if n and (off.min() < 0 or (off + siz).max() > data.size or siz.min() < 1):
            raise ConfigError(f"a sample's bytes lie outside the {data.size}-byte buffer")
        base = data.ctypes.data
        roi_w = g[:, COL["roi_w"]].astype(np.int64)
        roi = np.stack([g[:, COL["roi_x"]], g[:, COL["roi_y"]], g[:, COL["roi_w"]], g[:, COL["roi_h"]]], 1)
        status = self._d.decode([int(base + o) for o in off], [int(s) for s in siz],
                                [int(dst) + int(s) for s in g[:, COL["slot"]]], [int(w) * CHANNELS for w in roi_w],
                                [int(v) for v in roi.ravel()], int(stream), bool(precheck), CALLS[call])
        return np.asarray(status, np.int32)
