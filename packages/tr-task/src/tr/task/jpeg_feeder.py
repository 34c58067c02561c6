"""DeviceJpegFeeder: batches of JPEG files decoded and augmented on the training device (issue [13]).

PREPROCESSOR_SETTING.device_decode(True) makes the task use this feeder for a JPEG data set (an image folder or
a JPEG DTS pack) instead of tr.data's worker pipeline. Per batch the host (tr.data.jpeg_plan) writes the batch's
labels and geometry table into the staging buffer, the regions the chain reads are decoded into the plan's
decode buffer ``jpeg_src`` (tr.graph.jpeg_input), and the transfer graph copies the table and runs
``image_resample``, which crops, resizes, flips, erases and normalises them into the input batch.

Who decodes: on CUDA, nvJPEG (tr.backend.cuda.jpeg) on the transfer stream, so batch k+1 is decoded while step k
computes: the hardware engine where the GPU has one, then the GPU-assisted hybrid backend for what the engine
refuses (progressive files), then libjpeg-turbo on the CPU for what neither takes (its regions written into
the buffer; counted, ``cpu_decoded``); the compressed bytes are staged in pinned memory, two batches' worth. On
the CPU backend, libjpeg-turbo decodes every region (the same pixels as the CPU pipeline: the batches are then
the CPU pipeline's byte for byte, tests-integration/test_jpeg_device_training.py).

The samples, their order (tr.data.seeds.epoch_order: the Preprocessor's, a rank's share under data
parallelism), every random parameter and the resize are tr.data's for the same seed, epoch and index; on CUDA
the pixels differ from the CPU pipeline's only by nvJPEG's decode (tests-integration/test_gpu_jpeg_decode.py).
A damaged file is a DataError naming the sample and its file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.log import get_logger
from tr.core.ops import IMAGE_GEOM_COLS
from tr.core.phase import StreamKind
from tr.data.fused import norm_constants
from tr.data.jpeg_plan import CHANNELS, COL, JpegBatch, JpegPlanner, decode_regions
from tr.data.labels import check_labels
from tr.data.seeds import data_seed, epoch_order
from tr.data.settings import PreprocessorSettings
from tr.data.transforms import RandomErasing
from tr.graph.jpeg_input import JPEG_SRC, JpegInput
from tr.task.feeder import InMemoryFeeder

log = get_logger(__name__)

DECODED, UNSUPPORTED, DAMAGED = 0, 1, 2  # tr.backend.cuda.jpeg's statuses


class DeviceJpegFeeder(InMemoryFeeder):
    """Feeds a plan with a JPEG input (tr.graph.jpeg_input): labels and geometry per batch, regions decoded
    into the arena. ``backend``: the nvJPEG backend to try first ("auto", "hardware" or "gpu")."""

    def __init__(self, pre_settings: PreprocessorSettings, batch: int, seed: int | None = None, fp16: bool = False,
                 backend: str = "auto") -> None:
        s = pre_settings if pre_settings.frozen else pre_settings.commit()
        self.pre_settings = s  # (a checkpoint records its chains)
        ds = s.open_dataset()
        name = getattr(ds, "name", type(ds).__name__)
        train = ds.load("train")
        if not train.encoded:
            raise ConfigError(f"device_decode needs a data set of JPEG files (an image folder or a JPEG DTS pack); "
                              f"{name!r} holds decoded images (device_augment runs chains on those)")
        has_val = getattr(ds, "has_split", lambda split: True)("val")
        val = ds.load("val") if has_val else None
        dtype = "float16" if fp16 else "float32"
        self._splits = {True: train, False: val}
        self._planners = {True: JpegPlanner(train, s.chain(True, dtype)),
                          False: None if val is None else JpegPlanner(val, s.chain(False, dtype))}
        hw = self._planners[True].out_hw
        if val is not None and self._planners[False].out_hw != hw:
            raise ConfigError(f"device_decode: the train chain makes {hw} samples and the val chain "
                              f"{self._planners[False].out_hw}: one plan takes one sample size")
        self.sample_shape = (hw[0], hw[1], max(CHANNELS, s.pad_channels or 0))
        self.dtype = np.dtype(np.int32)  # the staging buffers hold the geometry tables
        self._paths = {True: _paths(ds, "train"), False: _paths(ds, "val") if val is not None else None}
        self._labels = {True: train.labels, False: None if val is None else val.labels}
        self.num_classes = getattr(ds, "num_classes", None)
        self.shuffle_train, self.drop_last = s.shuffle_train, s.drop_last_enabled
        self.seed = data_seed(seed, s.seed_value)  # the Preprocessor's rule
        self.batch = self.global_batch = int(batch)
        self.rank, self.world_size = 0, 1
        mean, std = norm_constants(s.norm)
        erase = next((t for t in s.train if isinstance(t, RandomErasing)), None)
        self._attrs = {"mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std),
                       "erase_value": tuple(float(v) for v in erase.value) if erase is not None else (0.0,)}
        self.nvjpeg_backend = backend
        self.cpu_decoded = 0  # images of the last pass decoded by libjpeg-turbo on CUDA (the fallback)
        self._backend: Any = None
        self._alloc()

    @property
    def staging_shape(self) -> tuple[int, ...]:
        return (1, 1, IMAGE_GEOM_COLS)  # one geometry row a sample

    def _alloc(self) -> None:
        self._bufs = [(np.zeros(self.batch, np.int32), np.zeros((self.batch, 1, 1, IMAGE_GEOM_COLS), np.int32))
                      for _ in range(2)]

    @property
    def capacity(self) -> int:
        """Decode-buffer bytes that any batch of either split fits in."""
        return max(p.capacity(self.batch) for p in self._planners.values() if p is not None)

    # --- the plan's side ----------------------------------------------------------------------------
    def jpeg_input(self) -> JpegInput:
        return JpegInput(self.capacity, tuple(sorted(self._attrs.items())))

    def upload(self, backend: Any, program: Any) -> None:
        """Bind to the allocated arena: the decode buffer, and on CUDA the decoders and the pinned staging."""
        self._backend, self._src = backend, program.tensor(JPEG_SRC)
        self._decoders: list[Any] = []
        if backend.name == "cuda":
            from tr.backend.cuda.jpeg import DeviceJpegDecoder

            first = DeviceJpegDecoder(backend.device, self.nvjpeg_backend, self.batch)
            self._decoders = [first]
            if first.backend.startswith("hardware"):  # progressive files: the hybrid backend takes them
                self._decoders.append(DeviceJpegDecoder(backend.device, "gpu", self.batch))
            log.info("decoding JPEGs with nvJPEG (%s)", ", ".join(d.backend for d in self._decoders))
            most = max(int(np.sort(s.sizes)[::-1][:self.batch].sum()) for s in self._splits.values() if s is not None)
            (_, a), (_, b) = backend.host_buffers(1, (1, 1, most), "uint8")
            self._staging = [a.reshape(-1), b.reshape(-1)]
            self._stream = backend.ctx.stream(int(StreamKind.TRANS))

    def shard(self, rank: int, world_size: int) -> None:
        val = self._labels[False]
        if val is not None and len(val) < world_size:
            raise ConfigError(f"device_decode: the validation set has {len(val)} samples, fewer than the "
                              f"{world_size} ranks")
        super().shard(rank, world_size)

    def check_labels(self, num_classes: int) -> None:
        for name, train in (("train", True), ("val", False)):
            if self._labels[train] is not None:
                check_labels(self._labels[train], name, num_classes)

    def _split_size(self, train: bool) -> int | None:
        labels = self._labels[train]
        return None if labels is None else len(labels)

    # --- batches --------------------------------------------------------------------------------------
    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        if self._labels[train] is None:
            raise DataError("the data set has no validation split")
        if self._backend is None:
            raise ConfigError("DeviceJpegFeeder: upload(backend, program) first (the task does it at compile)")
        order = epoch_order(len(self._labels[train]), self.seed, epoch, train, self.shuffle_train, self.rank,
                            self.world_size)
        planner = self._planners[train]
        self.cpu_decoded = 0
        for k in range(self.steps(train)):
            idx = order[k * self.batch:(k + 1) * self.batch]
            m = len(idx)
            # a short last batch is planned full, its last sample repeated: every row of the table stays valid
            full = np.concatenate([idx, np.full(self.batch - m, idx[-1], idx.dtype)]) if m < self.batch else idx
            plan = planner.plan(full, self.seed, epoch, train)
            labels, geom = self._bufs[k % 2]
            labels[:m] = self._labels[train][idx]
            geom[:, 0, 0, :] = plan.geom
            self._decode(plan, train, k % 2)
            yield k, k % 2, m
        if self.cpu_decoded:
            log.info("epoch %d %s: %d images nvJPEG did not take were decoded on the CPU", epoch + 1,
                     "train" if train else "val", self.cpu_decoded)

    def _decode(self, plan: JpegBatch, train: bool, buffer: int) -> None:
        split, be = self._splits[train], self._backend
        if not self._decoders:  # the CPU backend: libjpeg-turbo, the CPU pipeline's pixels
            src = np.zeros(self._src.numel, np.uint8)
            decode_regions(split, plan, src, self._paths[train])
            be.write(self._src, src.reshape(self._src.shape.dims))
            return
        staging = self._staging[buffer]
        offs = np.concatenate([[0], np.cumsum(plan.sizes)[:-1]]).astype(np.int64)
        for o, (start, n) in zip(offs, zip(plan.offsets, plan.sizes, strict=True), strict=True):
            staging[o:o + n] = split.images[start:start + n]
        dst = be.arena_ptr + self._src.offset
        pending = np.arange(len(plan))
        for dec in self._decoders:
            status = dec.decode(staging, offs[pending], plan.sizes[pending], plan.geom[pending], dst, self._stream)
            damaged = pending[status == DAMAGED]
            if damaged.size:
                i = int(plan.indices[damaged[0]])
                raise DataError(f"sample {i}{self._path(train, i)}: nvJPEG ({dec.backend}) finds the JPEG damaged"
                                f" ({damaged.size} such in the batch)")
            pending = pending[status == UNSUPPORTED]
            if not pending.size:
                return
        # what no device decoder takes: libjpeg-turbo, region by region into the buffer
        sub = JpegBatch(plan.indices[pending], plan.offsets[pending], plan.sizes[pending], plan.shapes[pending],
                        plan.geom[pending], plan.decode_bytes)
        regions = decode_regions(split, sub, names=self._paths[train])
        for row in sub.geom:
            slot, n = int(row[COL["slot"]]), int(row[COL["roi_h"]]) * int(row[COL["roi_w"]]) * CHANNELS
            be.write_bytes(self._src.offset + slot, regions[slot:slot + n])
        self.cpu_decoded += len(pending)

    def _path(self, train: bool, i: int) -> str:
        paths = self._paths[train]
        return f" ({paths[i]})" if paths is not None else ""


def _paths(ds: Any, split: str) -> list[str] | None:
    """The files of an image folder's split (for naming a damaged one), or None."""
    index = getattr(ds, "index", None)
    if index is None:
        return None
    try:
        return [str(p) for p, _ in index(split).samples]
    except Exception:  # a pack has no per-file paths
        return None
