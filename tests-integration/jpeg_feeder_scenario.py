"""refused="auto" switching the engine's refusals between decoders part of the way through an epoch: one scenario,
run on the real decoders by test_gpu_jpeg_feeder.py (H200) and on the stand-ins by test_jpeg_feeder_cuda_path.py
(every CPU run), so that the GPU test's own set-up and expectations are exercised where it cannot run. (Its first
H200 run failed at construction: the photos have a val split and the settings had no val chain.)

A stand-in clock makes the batches whose refusals go to nvJPEG's decoupled decoder 30 ms and those on
libjpeg-turbo 10 ms, so the probe keeps libjpeg-turbo. After every batch each region of the decode buffer is
checked: libjpeg-turbo's exactly, the engine's and the decoupled decoder's within ``limit`` (mean |diff| over the
region). Which decoder took a batch's refusals is read from the feeder's counters after the batch (the probe's
switch is read once per preparation, so the batch after a switch may still be on the old arm). Every batch prints
one line (probe state, arm, each row's sample, file, decoder, region and difference), so that a failure on the
H200 is diagnosable from the test's output alone; a failure lists every wrong region, not only the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

PHOTOS = {"classes": 4, "per_class": 12, "min_side": 64, "max_side": 500, "seed": 9, "val_per_class": 1}
BATCH = 2
PERIOD_S = {"decoupled": 0.030, "libjpeg-turbo": 0.010}  # the stand-in clock's batch period on either arm


@dataclass(frozen=True)
class Region:
    """One row of a prepared batch: its sample, its box's place in the decode buffer, what the buffer holds there
    and tr.data's decode of the box (uint8 [h, w, 3] both)."""

    row: int
    sample: int
    y: int
    x: int
    h: int
    w: int
    slot: int
    got: np.ndarray
    want: np.ndarray

    @property
    def where(self) -> str:
        return f"region {self.h}x{self.w} at ({self.y}, {self.x}) slot {self.slot}"

    def mean_abs_diff(self) -> float:
        return float(np.abs(self.got.astype(np.int16) - self.want.astype(np.int16)).mean())


def regions(feeder: Any, train: bool, buf: int, samples: Sequence[int], mem: np.ndarray,
            interpolate: bool) -> Iterator[Region]:
    """Each row of the batch the feeder prepared in its buffer ``buf`` (``samples``: the sample of each row, in
    row order): its region as the decode buffer ``mem`` (its bytes, from the buffer's start) holds it, and
    tr.data's decode of the sample's box with ``interpolate``d chroma or not."""
    from tr.data import _native
    from tr.data.jpeg_plan import COL

    split = feeder._splits[train]
    geom = feeder._bufs[buf][1][:, 0, 0, :]
    for r, i in enumerate(int(s) for s in samples):
        y, x, h, w, slot = (int(geom[r, COL[c]]) for c in ("roi_y", "roi_x", "roi_h", "roi_w", "slot"))
        want = _native.decode_jpeg(split.encoded_bytes(i), False, 8, interpolate)[y:y + h, x:x + w]
        yield Region(r, i, y, x, h, w, slot, mem[slot:slot + h * w * 3].reshape(h, w, 3), want)


def refused_auto_feeder(photos: Path) -> Any:
    """DeviceJpegFeeder over ``photos`` (made with PHOTOS: a train and a val split) with refused="auto", nvJPEG
    taking every row the engine takes (cpu_share 0), a chain for each split."""
    from tr.core.norm import NormMode
    from tr.data import CenterCrop, ImageFolder, PreprocessorSettings, RandomResizedCrop, Resize
    from tr.task.jpeg_feeder import DeviceJpegFeeder

    s = (PreprocessorSettings().dataset(ImageFolder(photos)).normalization(NormMode.IMAGENET).seed(3)
         .train_transforms(RandomResizedCrop(64)).val_transforms(Resize(72), CenterCrop(64))
         .device_decode(True, cpu_share=0.0, refused="auto"))
    return DeviceJpegFeeder(s, BATCH, cpu_share=0.0, cpu_threads=4, refused="auto")


def check_refused_auto(feeder: Any, read: Callable[[], np.ndarray], monkeypatch: Any, limit: float) -> dict:
    """Run a training epoch (the probe times both arms and keeps libjpeg-turbo) then a validation pass on the
    uploaded ``feeder``; ``read()``: the decode buffer's bytes once the batch just yielded is in it (the device
    synchronised). Returns the counts of the training epoch; AssertionError listing every wrong region."""
    import tr.task.jpeg_feeder as jf
    from tr.task.share_probe import PROBE

    assert feeder.side_bytes > 0 and feeder._side_on, "refused='auto' starts on the decoupled decoder"
    assert feeder.steps(True) >= 2 * (PROBE + 1) + 2, "the epoch is too short for the probe to time both arms"
    clock = [0.0]
    monkeypatch.setattr(jf, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    bad: list[str] = []
    counts = _pass(feeder, True, read, clock, limit, bad)
    probe = feeder._refused_probe
    print(f"refused auto: probe {feeder.calibration.get('refused_probe')}; {counts}")
    if probe.choice != "cpu" or feeder._side_on:
        bad.append(f"the probe kept {probe.choice!r} (state {probe.state}), side_on {feeder._side_on}: expected "
                   f"libjpeg-turbo, its batches being {PERIOD_S['libjpeg-turbo']} s against "
                   f"{PERIOD_S['decoupled']} s")
    refused = feeder._planners[True].progressive
    if counts["seen"] != len(refused):
        bad.append(f"{counts['seen']} training samples seen of {len(refused)}")
    if feeder.cpu_decoded + feeder.hybrid_decoded != int(refused.sum()):
        bad.append(f"refusals: {feeder.cpu_decoded} by libjpeg-turbo + {feeder.hybrid_decoded} by the decoupled "
                   f"decoder, expected {int(refused.sum())} in all")
    if not (feeder.hybrid_decoded > 0 and feeder.cpu_decoded > 0):
        bad.append(f"both decoders should take refusals across the switch: decoupled {feeder.hybrid_decoded}, "
                   f"libjpeg-turbo {feeder.cpu_decoded}")
    if feeder._labels[False] is not None:  # the val split after the probe: refusals to libjpeg-turbo, no probing
        val = _pass(feeder, False, read, clock, limit, bad)
        if feeder.hybrid_decoded or probe.state != "done":
            bad.append(f"validation: {feeder.hybrid_decoded} refusals by the decoupled decoder, probe {probe.state}")
        print(f"validation: {val}")
    assert not bad, f"{len(bad)} problem(s), the first: {bad[0]}\n  " + "\n  ".join(bad[1:40])
    return counts


def _pass(feeder: Any, train: bool, read: Callable[[], np.ndarray], clock: list[float], limit: float,
          bad: list[str]) -> dict:
    """One pass over a split, every region checked; problems appended to ``bad``."""
    from tr.data.seeds import epoch_order

    split = feeder._splits[train]
    paths = feeder._paths[train] or []
    refused = feeder._planners[train].progressive & feeder._hardware
    order = epoch_order(len(split), feeder.seed, 0, train, feeder.shuffle_train, feeder.rank, feeder.world_size)
    name = "train" if train else "val"
    counts = {"seen": 0, "exact": 0, "worst_diff": 0.0}
    before = (0, 0)  # (hybrid_decoded, cpu_decoded) after the previous batch
    k = -1
    try:
        for k, buf, m in feeder.epoch(0, train):
            hybrid, cpu = feeder.hybrid_decoded - before[0], feeder.cpu_decoded - before[1]
            before = (feeder.hybrid_decoded, feeder.cpu_decoded)
            n_refused = int(refused[order[k * BATCH:k * BATCH + m]].sum())
            # who took this batch's refusals (the decoupled decoder passes what it refuses too to libjpeg-turbo)
            arm = "none" if not n_refused else "libjpeg-turbo" if cpu == n_refused else \
                "decoupled" if hybrid == n_refused else "decoupled+libjpeg-turbo"
            if hybrid + cpu != n_refused:
                bad.append(f"{name} batch {k}: {n_refused} refusals but {hybrid} decoupled + {cpu} libjpeg-turbo")
            rows = []
            for g in regions(feeder, train, buf, order[k * BATCH:k * BATCH + m], read(), feeder.interpolate_chroma):
                i = g.sample
                who = arm if refused[i] else "engine"
                diff = g.mean_abs_diff()
                counts["exact"] += diff == 0.0
                counts["worst_diff"] = max(counts["worst_diff"], diff)
                where = (f"{name} batch {k} row {g.row} sample {i} ({Path(paths[i]).name if paths else '-'}), "
                         f"{who}, {g.where}")
                rows.append(f"s{i} {who} {g.h}x{g.w}@{g.slot} |d| {diff:.3f}")
                if who == "libjpeg-turbo" and diff != 0.0:
                    bad.append(f"{where}: libjpeg-turbo's region differs (mean |diff| {diff:.3f}, "
                               f"{int((g.got != g.want).any(axis=2).sum())} of {g.h * g.w} pixels)")
                elif diff > limit:
                    bad.append(f"{where}: mean |diff| {diff:.3f} > {limit}")
            print(f"{name} batch {k}: probe {feeder._refused_probe.state}, refusals {arm} "
                  f"(decoupled {hybrid}, libjpeg-turbo {cpu}); " + "; ".join(rows))
            counts["seen"] += m
            clock[0] += PERIOD_S["decoupled" if feeder._side_on else "libjpeg-turbo"]
    except Exception:
        print(f"{name}: the feeder failed producing batch {k + 1} (probe {feeder._refused_probe.state}, side_on "
              f"{feeder._side_on}, decoupled {feeder.hybrid_decoded}, libjpeg-turbo {feeder.cpu_decoded})")
        raise
    counts.update(decoupled=feeder.hybrid_decoded, libjpeg_turbo=feeder.cpu_decoded, engine=feeder.device_decoded
                  - feeder.hybrid_decoded)
    return counts
