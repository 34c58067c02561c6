"""DeviceJpegFeeder: batches of JPEG files decoded and augmented on the training device (issue [13]).

PREPROCESSOR_SETTING.device_decode(True) makes the task use this feeder for a JPEG data set (an image folder or
a JPEG DTS pack) instead of tr.data's worker pipeline. Per batch the host (tr.data.jpeg_plan) writes the batch's
labels and geometry table into the staging buffer, the regions the chain reads are decoded into the plan's
decode buffer ``jpeg_src`` (tr.graph.jpeg_input), and the transfer graph copies the table and runs
``image_resample``, which crops, resizes, flips, erases and normalises them into the input batch.

Who decodes: on CUDA, two decoders share each batch. nvJPEG (tr.backend.cuda.jpeg: the hardware engine where the
GPU has one, else the GPU-assisted hybrid backend) decodes its rows on the transfer stream, so batch k+1 is
decoded while step k computes; libjpeg-turbo decodes the others on ``cpu_threads`` native threads while the
next batch is prepared, and their regions are copied up asynchronously: the files the engine does not take
(progressive, arithmetic-coded; counted, ``cpu_decoded``; unless ``refused`` is "nvjpeg") and a share of the
rest, ``cpu_share`` of the batch
(fixed, or "auto": measured at upload, then re-balanced early in every training epoch and at its end from a
model of its timings, so that both decoders take as long for a batch: the CPU's cores and the JPEG engines
then add up, and whatever slows one of them in training moves rows to the other; tr's nvJPEG call waits for
the whole device, so beside a long training step "auto" ends at 1, see _rebalance). Which row goes
where depends on the share alone, so a fixed share gives the same batches every run; "auto"'s share depends on
timings, so the pixels of a few rows may differ by nvJPEG's difference from libjpeg-turbo (a grey level or so:
the GPU tests' bound) from run to run.
With ``refused="nvjpeg"`` the files the hardware engine refuses are decoded in the preparation of their batch
by nvJPEG's decoupled decoder instead (Huffman on ``cpu_threads`` host threads, the rest on the GPU on a side
stream of its own) into a side buffer of the feeder's own (two batches' worth, outside the arena:
``side_bytes``), and their regions are copied into the decode buffer with the batch, the transfer stream
waiting on the side stream's event (counted, ``hybrid_decoded``); a file that decoder refuses too goes to
libjpeg-turbo. Faster where the pipeline is the limit, slower beside a step that keeps the GPU busy (its GPU
phase waits for the step): hence "cpu" by default (PreprocessorSettings.device_decode); ``refused="auto"`` times
both in the first training batches and keeps the faster (tr.task.share_probe.RefusedProbe).
The compressed bytes are staged in pinned memory, two batches' worth. On the CPU backend (and with a share of
1) libjpeg-turbo decodes every region: the same pixels as the CPU pipeline, the batches then the CPU
pipeline's byte for byte (tests-integration/test_jpeg_device_training.py).

The samples, their order (tr.data.seeds.epoch_order: the Preprocessor's, a rank's share under data
parallelism), every random parameter and the resize are tr.data's for the same seed, epoch and index; on CUDA
the pixels differ from the CPU pipeline's only by nvJPEG's decode (tests-integration/test_gpu_jpeg_decode.py).
A damaged file is a DataError naming the sample and its file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError
from tr.core.log import get_logger
from tr.core.ops import IMAGE_GEOM_COLS
from tr.core.phase import StreamKind
from tr.data.fused import norm_constants
from tr.data.jpeg_plan import CHANNELS, COL, JpegBatch, JpegPlanner, decode_region, decode_regions_at, region_bytes
from tr.data.seeds import epoch_order
from tr.data.settings import PreprocessorSettings
from tr.data.transforms import RandomErasing
from tr.graph.jpeg_input import JPEG_SRC, JpegInput
from tr.task.feeder import DeviceSideFeeder
from tr.task.share_probe import RefusedProbe, ShareProbe

log = get_logger(__name__)

DECODED, UNSUPPORTED, DAMAGED = 0, 1, 2  # tr.backend.cuda.jpeg's statuses
SIDE_ALIGN = 256  # bytes: each region in a side buffer starts at a multiple (as the decode buffer's slots)
REBALANCE_AFTER = 8  # batches of a training epoch after which "auto" re-balances the CPU's share the first time


class DeviceJpegFeeder(DeviceSideFeeder):
    """Feeds a plan with a JPEG input (tr.graph.jpeg_input): labels and geometry per batch, regions decoded
    into the arena. ``backend``: the nvJPEG backend to try first ("auto", "hardware" or "gpu"); ``cpu_share``:
    the batch's share decoded by libjpeg-turbo on CUDA, in [0, 1], or "auto" (measured at upload, re-balanced
    in training: _rebalance); ``cpu_threads``: libjpeg-turbo's threads (default: all cores but two);
    ``interpolate_chroma``: both decoders' chroma upsampling; ``refused``: who decodes the files the hardware engine
    refuses, "nvjpeg" (its decoupled decoder), "cpu" (libjpeg-turbo) or "auto" (both timed in training, the
    faster kept: tr.task.share_probe.RefusedProbe) (PreprocessorSettings.device_decode)."""

    setting = "device_decode"

    def __init__(self, pre_settings: PreprocessorSettings, batch: int, seed: int | None = None, fp16: bool = False,
                 backend: str = "auto", cpu_share: float | str = "auto", cpu_threads: int | None = None,
                 interpolate_chroma: bool = False, refused: str = "cpu", dtype: str | None = None) -> None:
        if cpu_share != "auto" and (isinstance(cpu_share, bool) or not isinstance(cpu_share, (int, float))
                                    or not 0.0 <= float(cpu_share) <= 1.0):
            raise ConfigError(f"DeviceJpegFeeder: cpu_share must be a number in [0, 1] or 'auto', got {cpu_share!r}")
        if cpu_threads is not None and (isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int)
                                        or cpu_threads < 1):
            raise ConfigError(f"DeviceJpegFeeder: cpu_threads must be a positive integer, got {cpu_threads!r}")
        if refused not in ("nvjpeg", "cpu", "auto"):
            raise ConfigError(f"DeviceJpegFeeder: refused must be 'nvjpeg', 'cpu' or 'auto', got {refused!r}")
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
        dtype = dtype or ("float16" if fp16 else "float32")  # the decoded samples' type (the plan's input's)
        self._splits = {True: train, False: val}
        self._planners = {True: _planner(train, s, True, dtype),
                          False: None if val is None else _planner(val, s, False, dtype)}
        hw = self._planners[True].out_hw
        if val is not None and self._planners[False].out_hw != hw:
            raise ConfigError(f"device_decode: the train chain makes {hw} samples and the val chain "
                              f"{self._planners[False].out_hw}: one plan takes one sample size")
        self.sample_shape = (hw[0], hw[1], max(CHANNELS, s.pad_channels or 0))
        self.dtype = np.dtype(np.int32)  # the staging buffers hold the geometry tables
        self._paths = {True: _paths(ds, "train"), False: _paths(ds, "val") if val is not None else None}
        self._keep(s, ds, train, val, batch, seed)
        mean, std = norm_constants(s.norm)
        erase = next((t for t in s.train if isinstance(t, RandomErasing)), None)
        self._attrs = {"mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std),
                       "erase_value": tuple(float(v) for v in erase.value) if erase is not None else (0.0,)}
        self.nvjpeg_backend = backend
        self.interpolate_chroma = bool(interpolate_chroma)
        self.refused = refused
        self.cpu_share_setting = cpu_share
        self.cpu_share: float | None = None  # the share in use (upload: "auto" measured then)
        self.cpu_threads = int(cpu_threads or max(1, (os.cpu_count() or 2) - 2))
        self.calibration: dict[str, Any] = {}  # "auto": what upload measured, each re-balance, the probe
        self._probe = ShareProbe()  # "auto": the model's share against libjpeg-turbo alone, timed in training
        self._refused_probe = RefusedProbe()  # refused="auto": the decoupled decoder against libjpeg-turbo
        self.cpu_decoded = 0  # images of the last pass nvJPEG does not take, decoded by libjpeg-turbo on CUDA
        self.cpu_shared = 0  # images of the last pass decoded by libjpeg-turbo as the CPU's share
        self.device_decoded = 0  # images of the last pass decoded by nvJPEG
        self.hybrid_decoded = 0  # of those, files the engine refuses, by nvJPEG's decoupled decoder (refused="nvjpeg")
        self.side_bytes = 0  # device bytes of the feeder's own side buffers (upload), outside the plan's arena
        self._batches = self._calls = 0  # the last pass's batches so far, and its nvJPEG calls
        self.times: dict[str, float] = {}  # the last pass's seconds by stage (epoch())
        self._backend: Any = None
        self._decoder: Any = None  # nvJPEG's, on CUDA (upload)
        self._by_slot = False  # the CPU's regions at their slots in the pinned buffer (upload)
        self._side: list[Any] = []  # refused="nvjpeg"/"auto" on a hardware engine: the decoupled decoder's regions
        self._side_on = False  # whether the refusals go to the decoupled decoder now (upload; "auto": its probe)
        self._side_decoder: Any = None  # ... that decoder, and the stream its device phases run on
        self._side_stream: Any = None
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
    def input_plan(self) -> JpegInput:
        jitter = any(p.jitter for p in self._planners.values() if p is not None)
        return JpegInput(self.capacity, tuple(sorted(self._attrs.items())), jitter)

    def upload(self, backend: Any, program: Any) -> None:
        """Bind to the allocated arena: the decode buffer, and on CUDA the decoder, the pinned staging (the
        compressed bytes of two batches, and their CPU-decoded regions) and the CPU's share ("auto": measured)."""
        self._backend, self._src = backend, program.tensor(JPEG_SRC)
        self._decoder = None
        # one thread prepares the next batch (its CPU decodes on native threads) while the loop launches this one
        self._prep = ThreadPoolExecutor(1, thread_name_prefix="tr-jpeg-prep")
        if backend.name != "cuda":
            self.cpu_share = 1.0
            self._host_src = [np.zeros(self._src.numel, np.uint8) for _ in range(2)]
            return
        from tr.backend.cuda import jpeg

        self._decoder = jpeg.DeviceJpegDecoder(backend.device, self.nvjpeg_backend, self.batch,
                                               threads=self.cpu_threads, interpolate=self.interpolate_chroma)
        self._h2d, self._d2d = jpeg.h2d_async, jpeg.d2d_async
        hardware = self._hardware = self._decoder.backend.startswith("hardware")
        splits = [(t, s) for t, s in self._splits.items() if s is not None]
        # the hardware engine takes no progressive or arithmetic-coded file: those are decoded on the CPU, in the
        # preparation of their batch, and copied up asynchronously (tr-dts pack --baseline re-codes them)
        self._cpu_only = {t: (self._planners[t].progressive if hardware else np.zeros(len(s), bool)) for t, s in splits}
        most = max(int(np.sort(s.sizes)[::-1][:self.batch].sum()) for _, s in splits)
        # the CPU's regions, packed: any batch's with a share, else those of the files the engine refuses
        cpu_most = (self.capacity if self.cpu_share_setting != 0 else
                    max(_largest_sum(self._planners[t].image_bytes[self._cpu_only[t]], self.batch) for t, _ in splits))
        (_, a), (_, b) = backend.host_buffers(1, (1, 1, most + max(cpu_most, 1)), "uint8")
        self._staging = [(a.reshape(-1)[:most], a.reshape(-1)[most:]), (b.reshape(-1)[:most], b.reshape(-1)[most:])]
        # with a share the CPU's regions lie at their slots, as in the decode buffer, so that a run of CPU rows is
        # one copy (a batch all on the CPU: one copy, not one a region); else packed
        self._by_slot = cpu_most >= self.capacity
        self._side, self.side_bytes = [], 0
        if hardware and self.refused != "cpu":  # two batches' worth of the refused files' regions, packed
            side = max(_largest_sum(self._planners[t].image_bytes[self._cpu_only[t]] + SIDE_ALIGN, self.batch)
                       for t, _ in splits)
            if side:
                self._side = [jpeg.device_buffer(side, backend.device) for _ in range(2)]
                # a decoder of its own: the preparing thread calls it while the loop's thread calls the engine's
                self._side_decoder = jpeg.DeviceJpegDecoder(backend.device, self.nvjpeg_backend, self.batch,
                                                            threads=self.cpu_threads,
                                                            interpolate=self.interpolate_chroma)
                self.side_bytes = 2 * side
                # its device phases on a stream of their own: queued on the transfer stream they would wait behind
                # the transfer graph's wait for the step, and the decoder's host threads behind them; the transfer
                # stream waits on the side stream's event before copying the regions out
                self._side_stream = jpeg.SideStream(backend.device)
        self._side_on = bool(self._side)  # ("auto": the probe's first arm until training times both)
        self._stream = backend.ctx.stream(int(StreamKind.TRANS))
        share = self._calibrate() if self.cpu_share_setting == "auto" else float(self.cpu_share_setting)
        self.cpu_share = share
        self._hw_rows = self.batch - int(round(share * self.batch))  # the rows of a batch nvJPEG decodes at most
        log.info("decoding JPEGs with nvJPEG (%s) and libjpeg-turbo on %d threads: the CPU's share %.3f%s%s",
                 self._decoder.backend, self.cpu_threads, share,
                 " (measured)" if self.cpu_share_setting == "auto" else "",
                 f"; the engine's refusals by nvJPEG's decoupled decoder ({self.side_bytes} bytes of side buffers"
                 f"{', against libjpeg-turbo timed in training' if self.refused == 'auto' else ''})"
                 if self._side else "")

    def _calibrate(self, reps: int = 2) -> float:
        """The CPU's share of a batch at which libjpeg-turbo (on cpu_threads threads) and nvJPEG take the same
        time: both decode the first training batch's rows that nvJPEG takes, after a warm-up, the faster of
        ``reps`` runs each; in steps of 1/64. 0 when the batch has no such rows."""
        order = epoch_order(len(self._labels[True]), self.seed, 0, True, self.shuffle_train, self.rank,
                            self.world_size)
        plan = self._planners[True].plan(order[:self.batch], self.seed, 0, True)
        rows = np.flatnonzero(~self._cpu_only[True][plan.indices])
        if not rows.size:
            return 0.0
        staging, fallback = self._staging[0]
        offs = self._stage(plan, rows, staging, True)
        at = _packed(region_bytes(plan, rows))
        dst = self._backend.arena_ptr + self._src.offset

        def on_device() -> None:
            self._decoder.decode(staging, offs, plan.sizes[rows], plan.geom[rows], dst, self._stream,
                                 precheck=not self._hardware)
            self._backend.synchronize()

        def on_cpu() -> None:
            decode_regions_at(self._splits[True], plan, rows, fallback, at, self.cpu_threads, self._paths[True],
                              self.interpolate_chroma)

        t_dev, t_cpu = _best_time(on_device, reps), _best_time(on_cpu, reps)
        self.calibration = {"rows": int(rows.size), "device_s": t_dev, "cpu_s": t_cpu, "row_s": t_dev / rows.size,
                            "cpu_row_s": t_cpu / rows.size}
        return round(64 * t_dev / (t_dev + t_cpu)) / 64  # rates n/t: share = r_cpu / (r_cpu + r_dev)

    def _stage(self, plan: JpegBatch, rows: np.ndarray, staging: np.ndarray, train: bool) -> np.ndarray:
        """Copy ``rows``' JPEG bytes one after another into ``staging``; their offsets there."""
        split = self._splits[train]
        offs = _packed(plan.sizes[rows])
        for o, j in zip(offs, rows, strict=True):
            start, n = int(plan.offsets[j]), int(plan.sizes[j])
            staging[o:o + n] = split.images[start:start + n]
        return offs

    # --- batches --------------------------------------------------------------------------------------
    def epoch(self, epoch: int, train: bool) -> Iterator[tuple[int, int, int]]:
        """Batch k + 1 is prepared (planned, staged, its CPU share decoded) in a thread while batch k's device
        decode is enqueued (nvJPEG's call returns only once the engine is done with the batch) and batch k's
        transfer and step are launched."""
        if self._labels[train] is None:
            raise DataError("the data set has no validation split")
        if self._backend is None:
            raise ConfigError("DeviceJpegFeeder: upload(backend, program) first (the task does it at compile)")
        order = epoch_order(len(self._labels[train]), self.seed, epoch, train, self.shuffle_train, self.rank,
                            self.world_size)
        steps = self.steps(train)
        self.cpu_decoded = self.cpu_shared = self.device_decoded = self.hybrid_decoded = 0
        self._batches = self._calls = 0
        # where the loop's thread spent the pass: waiting for a batch's preparation, in nvJPEG's decode call, in
        # the copies of CPU-decoded regions (and of the side buffer's); and the preparing thread's own seconds, of
        # them libjpeg-turbo's and nvJPEG's decoupled decoder's (tr.task's epoch is the rest)
        self.times = {"wait_prepare_s": 0.0, "decode_call_s": 0.0, "cpu_region_copies_s": 0.0, "prepare_s": 0.0,
                      "cpu_decode_s": 0.0, "refused_decode_s": 0.0}
        # buffers (k + 1) % 2 are free when batch k + 1's preparation starts: it starts once batch k - 1 was
        # yielded, and the task returns here only after batch k - 1's transfer (which read them) is done
        # (StepLauncher waits for each transfer on the host)
        if train and self.refused == "auto" and self._side and self._refused_probe.state == "idle":
            self._refused_probe.start()  # the decoupled decoder first: _side_on is set from upload
        pending = self._prep.submit(self._prepare, order, 0, epoch, train)
        probing = train and self._auto()
        refused_probing = train and self._refused_probe.active
        self._probe.new_epoch()
        self._refused_probe.new_epoch()
        try:
            for k in range(steps):
                t0 = time.perf_counter()
                ready = pending.result()
                self.times["wait_prepare_s"] += time.perf_counter() - t0
                if k + 1 < steps:
                    pending = self._prep.submit(self._prepare, order, k + 1, epoch, train)
                self._enqueue(ready, train)
                self._batches += 1
                now = time.perf_counter()
                if probing and (share := self._probe.tick(now)) is not None:
                    self._set_share(share, epoch, "probe")
                if refused_probing and (arm := self._refused_probe.tick(now)) is not None:
                    self._set_refused(arm, epoch)
                if (self._batches == REBALANCE_AFTER and k + 1 < steps and train and self._auto()
                        and not self._refused_probe.active):  # (one probe at a time: the refusals' first)
                    self._rebalance(epoch)  # early: the first epoch runs at the share training needs
                yield k, k % 2, ready.count
        finally:  # (an early stop: the preparation under way finishes before its buffers are used again)
            pending.exception()
        if self.cpu_decoded:
            log.info("epoch %d %s: %d images decoded on the CPU (files nvJPEG's %s decoder does not take)", epoch + 1,
                     "train" if train else "val", self.cpu_decoded, self._decoder.backend if self._decoder else "")
        if train and self._auto() and not self._refused_probe.active:
            self._rebalance(epoch)

    def _auto(self) -> bool:
        return self.cpu_share_setting == "auto" and bool(self.calibration)

    def _rebalance(self, epoch: int) -> None:
        """With "auto": the CPU's share from this epoch's timings so far (after its first REBALANCE_AFTER batches
        and at its end). A batch's nvJPEG call costs ``wait + rows * row_s``: tr's call waits for the whole device
        (measured, benchmarks/RESULTS.md: it does not overlap a running GEMM load or training step, whether or not
        nvJPEG's buffers are freed), so each call first waits for the step beside it, then decodes (``row_s``: an
        image's time, measured at upload); the CPU decodes its rows in ``cpu_row_s`` each meanwhile. The share that
        makes both sides equal, or 1 when the CPU alone is done before the wait is: then nvJPEG is not called (its last
        ``wait`` is kept). The wait is a call's, over the batches that called nvJPEG (an epoch that moved to a
        share of 1 part of the way has batches without a call: averaged over those too, the wait would look
        smaller than it is and the share would swing back). A share below 1 is then checked against 1 by timing
        both in training (tr.task.share_probe: the engine's call also delays the next step's launch, which this
        model leaves out); while that probe runs the share stays as it sets it, and where it found libjpeg-turbo
        alone faster the share stays 1."""
        # (the engine's refusals decoded by nvJPEG's decoupled decoder in the preparation count as its rows: its
        # time is the preparing thread's too)
        cpu_rows = self.cpu_decoded + self.cpu_shared + self.hybrid_decoded
        cpu_s = self.times["cpu_decode_s"] + self.times["refused_decode_s"]
        cal = self.calibration
        if cpu_rows and cpu_s > 0:
            cal["cpu_row_s"] = cpu_s / cpu_rows
        engine_rows = self.device_decoded - self.hybrid_decoded
        if self._calls and engine_rows:
            rows = engine_rows / self._calls  # nvJPEG's images a call
            cal["wait_s"] = max(0.0, self.times["decode_call_s"] / self._calls - rows * cal["row_s"])
        d, c, wait = cal["cpu_row_s"], cal["row_s"], cal.get("wait_s", 0.0)
        hw = min(float(self.batch), max(0.0, (self.batch * d - wait) / (c + d)))  # nvJPEG's rows that balance
        model = round(64 * (1.0 - hw / self.batch)) / 64
        cal.setdefault("epochs", []).append({"epoch": epoch + 1, "batches": self._batches, "wait_s": wait,
                                             "cpu_row_s": d, "share": model})
        if self._probe.active:  # the probe sets the share until it has chosen
            return
        if self._probe.state == "done" and self._probe.choice == 1.0:
            model = 1.0
        self._probe.start(model)
        if model != self.cpu_share:
            log.info("epoch %d: nvJPEG %.2f ms a call + %.3f ms an image, libjpeg-turbo %.3f ms an image: the CPU's "
                     "share %.3f -> %.3f", epoch + 1, 1e3 * wait, 1e3 * c, 1e3 * d, self.cpu_share, model)
        self._set_share(model, epoch, "model")

    def _set_refused(self, arm: str, epoch: int) -> None:
        """refused="auto": the engine's refusals to nvJPEG's decoupled decoder ("nvjpeg") or libjpeg-turbo ("cpu")
        from the next preparation on (the probe's next arm, or its choice)."""
        self.calibration["refused_probe"] = self._refused_probe.record()
        log.info("epoch %d: the refusals' probe %s: the engine's refusals to %s", epoch + 1,
                 "times libjpeg-turbo" if self._refused_probe.active else "keeps the faster",
                 "nvJPEG's decoupled decoder" if arm == "nvjpeg" else "libjpeg-turbo")
        self._side_on = arm == "nvjpeg"

    def _set_share(self, share: float, epoch: int, by: str) -> None:
        if by == "probe":
            self.calibration["probe"] = self._probe.record()
            log.info("epoch %d: the share probe %s; the CPU's share %.3f -> %.3f", epoch + 1,
                     "times libjpeg-turbo alone" if self._probe.active else "keeps the faster share",
                     self.cpu_share, share)
        self.cpu_share = share
        self._hw_rows = self.batch - int(round(share * self.batch))

    def _prepare(self, order: np.ndarray, k: int, epoch: int, train: bool) -> _Prepared:
        """Plan batch k, fill staging buffer k % 2, and decode on the CPU what the device will not."""
        t0 = time.perf_counter()
        try:
            return self._prepare_timed(order, k, epoch, train)
        finally:
            self.times["prepare_s"] += time.perf_counter() - t0

    def _prepare_timed(self, order: np.ndarray, k: int, epoch: int, train: bool) -> _Prepared:
        idx = order[k * self.batch:(k + 1) * self.batch]
        m = len(idx)
        # a short last batch is planned full, its last sample repeated: every row of the table stays valid (the
        # repeats' regions are not decoded: the step reads the first m samples only)
        full = np.concatenate([idx, np.full(self.batch - m, idx[-1], idx.dtype)]) if m < self.batch else idx
        plan = self._planners[train].plan(full, self.seed, epoch, train)
        labels, geom = self._bufs[k % 2]
        labels[:m] = self._labels[train][idx]
        geom[:, 0, 0, :] = plan.geom
        split, names = self._splits[train], self._paths[train]
        t0 = time.perf_counter()
        if self._decoder is None:  # the CPU backend: libjpeg-turbo, the CPU pipeline's pixels
            src = self._host_src[k % 2]
            rows = np.arange(m)
            decode_regions_at(split, plan, rows, src, plan.geom[rows, COL["slot"]], self.cpu_threads, names,
                              self.interpolate_chroma)
            self.times["cpu_decode_s"] += time.perf_counter() - t0
            return _Prepared(k, m, plan, src, np.arange(0), np.zeros(0, np.int64))
        staging, fallback = self._staging[k % 2]
        refused = self._cpu_only[train][plan.indices[:m]]
        side_on = self._side_on  # (read once: refused="auto"'s probe switches it from the loop's thread)
        side = np.flatnonzero(refused) if side_on else np.zeros(0, np.int64)
        cpu = refused.copy() if not side_on else np.zeros(m, bool)
        takes = np.flatnonzero(~refused)
        cpu[takes[self._hw_rows:]] = True  # the CPU's share: the rows after the first _hw_rows nvJPEG takes
        on_device = takes[:self._hw_rows]
        offs = self._stage(plan, on_device, staging, train)
        side_at = np.zeros(0, np.int64)
        if side.size:  # the engine's refusals: nvJPEG's decoupled decoder, into side buffer k % 2
            t1 = time.perf_counter()
            side, side_at, cpu_too = self._decode_side(plan, side, k, train)
            cpu[cpu_too] = True
            self.times["refused_decode_s"] += time.perf_counter() - t1
        on_cpu = np.flatnonzero(cpu)
        at = plan.geom[on_cpu, COL["slot"]].astype(np.int64) if self._by_slot else _packed(region_bytes(plan, on_cpu))
        t1 = time.perf_counter()
        decode_regions_at(split, plan, on_cpu, fallback, at, self.cpu_threads, names, self.interpolate_chroma)
        self.times["cpu_decode_s"] += time.perf_counter() - t1
        n_refused = int(refused.sum()) - side.size  # of on_cpu, the engine's refusals
        return _Prepared(k, m, plan, staging, on_device, offs, on_cpu, at, n_refused, side, side_at)

    def _decode_side(self, plan: JpegBatch, rows: np.ndarray, k: int,
                     train: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decode ``rows`` (files the engine refuses) of batch k with nvJPEG's decoupled decoder into side buffer
        k % 2, their regions packed (SIDE_ALIGN apart), on the side stream, whose event k % 2 is recorded after
        them: (the rows decoded, their offsets in the buffer, the rows it refuses too, for libjpeg-turbo). The
        buffer is free: its last batch's copies out of it were queued on the transfer stream before that batch's
        transfer, which the task waited for before this preparation began. A damaged file is a DataError naming
        it."""
        sizes = -(-region_bytes(plan, rows).astype(np.int64) // SIDE_ALIGN) * SIDE_ALIGN
        at = _packed(sizes)
        buf = self._side[k % 2]
        geom = plan.geom[rows].copy()
        geom[:, COL["slot"]] = at
        images = self._splits[train].images
        status = self._side_decoder.decode(images, plan.offsets[rows], plan.sizes[rows], geom, buf.ptr,
                                           self._side_stream.stream, False, "regions_decoupled")
        self._side_stream.record(k % 2)
        damaged = rows[status == DAMAGED]
        if damaged.size:
            i = int(plan.indices[damaged[0]])
            raise DataError(f"sample {i}{self._path(train, i)}: nvJPEG's decoupled decoder finds the JPEG damaged "
                            f"({damaged.size} such in the batch)")
        ok = status == DECODED
        return rows[ok], at[ok], rows[~ok]

    def _enqueue(self, ready: _Prepared, train: bool) -> None:
        """The prepared batch's regions into the decode buffer, on the transfer stream (CUDA) or now (CPU)."""
        be, plan = self._backend, ready.plan
        if self._decoder is None:
            be.write(self._src, ready.staging.reshape(self._src.shape.dims))
            return
        dst = be.arena_ptr + self._src.offset
        # the CPU-decoded regions' asynchronous copies first: nvJPEG's call returns only once the device is idle
        # (the running step done), so copies queued after it would leave the device idle while the host queues them
        _, fallback = self._staging[ready.k % 2]
        t0 = time.perf_counter()
        for at, pos, n in _copy_runs(plan, ready.on_cpu, ready.cpu_at, self._by_slot):
            self._h2d(dst + at, fallback.ctypes.data + pos, n, self._stream)
        if len(ready.on_side):  # the decoupled decoder's regions, out of the side buffer once decoded there
            self._side_stream.wait(ready.k % 2, self._stream)
            side = self._side[ready.k % 2].ptr
            for slot, at, n in zip(plan.geom[ready.on_side, COL["slot"]], ready.side_at,
                                   region_bytes(plan, ready.on_side), strict=True):
                self._d2d(dst + int(slot), side + int(at), int(n), self._stream)
        self.times["cpu_region_copies_s"] += time.perf_counter() - t0
        self.device_decoded += len(ready.on_side)
        self.hybrid_decoded += len(ready.on_side)
        rows = ready.on_device
        if len(rows):
            t0 = time.perf_counter()
            # (the files the hardware engine refuses went to the CPU, foreseen from their headers: no per-file
            # checks before the batch, an unforeseen refusal fails it and is found image by image)
            status = self._decoder.decode(ready.staging, ready.offsets, plan.sizes[rows], plan.geom[rows], dst,
                                          self._stream, precheck=not self._hardware)
            self.times["decode_call_s"] += time.perf_counter() - t0
            self._calls += 1
            self.device_decoded += len(rows)
            damaged = rows[status == DAMAGED]
            if damaged.size:
                i = int(plan.indices[damaged[0]])
                raise DataError(f"sample {i}{self._path(train, i)}: nvJPEG ({self._decoder.backend}) finds the JPEG "
                                f"damaged ({damaged.size} such in the batch)")
            refused = rows[status == UNSUPPORTED]
            if refused.size:  # not foreseen from the header: decoded here, copied with a synchronising write
                for r in refused:
                    region = decode_region(self._splits[train], plan, int(r), self._paths[train],
                                           self.interpolate_chroma)
                    be.write_bytes(self._src.offset + int(plan.geom[r, COL["slot"]]), region)
                self.cpu_decoded += int(refused.size)
                self.device_decoded -= int(refused.size)
        self.cpu_decoded += ready.refused
        self.cpu_shared += len(ready.on_cpu) - ready.refused

    def decoded_on_cpu(self) -> int | None:
        """The last pass's images the device decoder refused (decoded by libjpeg-turbo instead); None on the CPU
        backend, where libjpeg-turbo decodes every image by design."""
        return None if self._decoder is None else self.cpu_decoded

    def _path(self, train: bool, i: int) -> str:
        paths = self._paths[train]
        return f" ({paths[i]})" if paths is not None else ""

    def close(self) -> None:
        pool = getattr(self, "_prep", None)
        if pool is not None:
            pool.shutdown(wait=True)
        if self._side_stream is not None:
            self._side_stream.close()


@dataclass
class _Prepared:
    """A batch ready for the device: its plan, where its staged bytes are, which rows the device decodes."""

    k: int
    count: int
    plan: JpegBatch
    staging: np.ndarray  # CUDA: the compressed bytes of the device's rows; CPU: the decode buffer's image
    on_device: np.ndarray  # rows nvJPEG decodes (CUDA)
    offsets: np.ndarray  # their bytes' offsets in staging
    on_cpu: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows decoded on the CPU (CUDA)
    cpu_at: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their regions' offsets in fallback
    refused: int = 0  # of on_cpu, the files nvJPEG does not take (the others: the CPU's share)
    on_side: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows in the side buffer (CUDA)
    side_at: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their regions' offsets there


def _packed(sizes: np.ndarray) -> np.ndarray:
    """Offsets of blocks of ``sizes`` bytes laid one after another."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)[:len(sizes)]


def _copy_runs(plan: JpegBatch, rows: np.ndarray, at: np.ndarray, by_slot: bool) -> list[tuple[int, int, int]]:
    """(decode-buffer offset, host offset, bytes) of the copies that upload ``rows``' CPU-decoded regions (host
    offsets ``at``): one a region, or, when they lie at their slots (``by_slot``), one a run of consecutive rows,
    the alignment padding between their regions copied too (never read; no other row's region lies there)."""
    slots = plan.geom[rows, COL["slot"]].astype(np.int64)
    sizes = region_bytes(plan, rows).astype(np.int64)
    if not by_slot:
        return [(int(d), int(h), int(n)) for d, h, n in zip(slots, at, sizes, strict=True)]
    runs = np.split(np.arange(rows.size), np.flatnonzero(np.diff(rows) != 1) + 1) if rows.size else []
    return [(int(slots[r[0]]), int(slots[r[0]]), int(slots[r[-1]] + sizes[r[-1]] - slots[r[0]])) for r in runs]


def _best_time(fn: Any, reps: int) -> float:
    fn()  # warm: first-call allocations, caches
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _planner(split: Any, s: PreprocessorSettings, train: bool, dtype: str) -> JpegPlanner:
    """The split's planner; a chain the device cannot run is a ConfigError naming the split and its setting (a
    data set with a val split needs val_transforms too, even where training never validates)."""
    try:
        return JpegPlanner(split, s.chain(train, dtype))
    except ConfigError as e:
        which = "train" if train else "val"
        raise ConfigError(f"device_decode: the {which} split's chain ({which}_transforms): {e}") from None


def _largest_sum(sizes: np.ndarray, n: int) -> int:
    return int(np.sort(sizes)[::-1][:n].sum()) if sizes.size else 0


def _paths(ds: Any, split: str) -> list[str] | None:
    """The files of an image folder's split (for naming a damaged one), or None."""
    index = getattr(ds, "index", None)
    if index is None:
        return None
    try:
        return [str(p) for p, _ in index(split).samples]
    except Exception:  # a pack has no per-file paths
        return None
