"""Where the device decode's time goes (issue [13]): each stage of DeviceJpegFeeder's path timed alone on the GPU.

Over a baseline DTS pack (every file taken by the hardware engine), batch --batch, RandomResizedCrop(224) + flip:

* ``plan``: tr.data.jpeg_plan's geometry of a batch (host);
* ``stage``: the batch's compressed bytes copied into pinned memory (host);
* ``decode call``: the host seconds inside nvJPEG's batched decode call (parse, support checks, submission), with
  and without tr's per-file checks before the batch (``precheck``);
* ``decode``: the call and the transfer stream synchronised after it: the decode's whole time, regions of interest
  (the crops) and, for comparison, whole images;
* ``decode, N states``: the batch split over N decoders, each from its own thread on one of the context's five
  streams (does one decoder use every JPEG engine?);
* ``resample``: image_resample of a decoded batch to FP16 NHWC, the captured graph relaunched.

    python benchmarks/device_decode_stages.py --images /tmp/tr_bench_images_2k --batch 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE.parent / "packages" / "tr-backend" / "tests"))


def _timed(fn, reps: int) -> float:
    fn()  # warm
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images_2k"))
    ap.add_argument("--make", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--states", default="1,2,4,7", help="decoders the batch is split over")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from backend_testkit import SimpleArena, op

    from tr.backend.cuda import CudaBackend
    from tr.backend.cuda.jpeg import DeviceJpegDecoder
    from tr.backend.rules.image import COL, GEOM_COLS
    from tr.core.norm import NormMode
    from tr.data import DtsImages, RandomHorizontalFlip, RandomResizedCrop
    from tr.data.dts import pack
    from tr.data.jpeg_plan import JpegPlanner
    from tr.data.transforms import Compose

    if not a.images.exists():
        from make_image_folder import make_image_folder

        make_image_folder(a.images, classes=10, per_class=a.make // 10, min_side=300, max_side=500, seed=0)
    packed = a.images.parent / (a.images.name + "_dts_baseline")
    if not (packed / "train.dts").exists():
        pack(a.images, packed, baseline=True)
    split = DtsImages(packed).load("train")
    comp = Compose([RandomResizedCrop(224), RandomHorizontalFlip()], NormMode.IMAGENET, "float16", 4)
    planner = JpegPlanner(split, comp)
    B = a.batch
    idx = np.random.default_rng(0).permutation(len(split))[:B]
    plan = planner.plan(idx, 1, 0)
    whole = plan.geom.copy()  # the same regions' slots, each image whole (roi = the image)
    sizes = plan.shapes[:, 0].astype(np.int64) * plan.shapes[:, 1] * 3
    slots = np.concatenate([[0], np.cumsum(-(-sizes // 256) * 256)[:-1]])
    whole[:, COL["slot"]], whole[:, COL["roi_y"]], whole[:, COL["roi_x"]] = slots, 0, 0
    whole[:, COL["roi_h"]], whole[:, COL["roi_w"]] = plan.shapes[:, 0], plan.shapes[:, 1]
    cap = int(max(planner.capacity(B), slots[-1] + sizes[-1]))
    arena = SimpleArena()
    t = {"src": arena.add("src", (cap,), "uint8"), "geom": arena.add("geom", (B, 1, 1, GEOM_COLS), "int32"),
         "y": arena.add("y", (B, 224, 224, 4), "fp16")}
    be = CudaBackend()
    be.allocate(arena.layout())
    (_, staging), _ = be.host_buffers(1, (1, 1, int(plan.sizes.sum())), "uint8")
    staging = staging.reshape(-1)
    offs = np.concatenate([[0], np.cumsum(plan.sizes)[:-1]]).astype(np.int64)

    def stage() -> None:
        for o, s, n in zip(offs, plan.offsets, plan.sizes, strict=True):
            staging[o:o + n] = split.images[s:s + n]

    stage()
    dst = be.arena_ptr + t["src"].offset
    stream = be.ctx.stream(0)
    rows: dict[str, float] = {}
    rows["plan_ms"] = 1e3 * _timed(lambda: planner.plan(idx, 1, 0), a.reps)
    rows["stage_ms"] = 1e3 * _timed(stage, a.reps)
    dec = DeviceJpegDecoder(0, "auto", B)
    calls: list[float] = []

    def decode(geom, precheck: bool = True) -> None:
        t0 = time.perf_counter()
        status = dec.decode(staging, offs, plan.sizes, geom, dst, stream, precheck)
        calls.append(time.perf_counter() - t0)
        assert (status == 0).all(), np.bincount(status)
        be.synchronize()

    rows["decode_roi_ms"] = 1e3 * _timed(lambda: decode(plan.geom), a.reps)
    rows["decode_call_roi_ms"] = 1e3 * float(np.median(calls))
    calls.clear()
    rows["decode_whole_ms"] = 1e3 * _timed(lambda: decode(whole), a.reps)
    rows["decode_call_whole_ms"] = 1e3 * float(np.median(calls))
    calls.clear()
    rows["decode_roi_no_precheck_ms"] = 1e3 * _timed(lambda: decode(plan.geom, False), a.reps)
    rows["decode_call_roi_no_precheck_ms"] = 1e3 * float(np.median(calls))
    for n in (int(s) for s in a.states.split(",")):
        decs = [DeviceJpegDecoder(0, "auto", -(-B // n)) for _ in range(n)]
        parts = np.array_split(np.arange(B), n)

        def split_decode(decs=decs, parts=parts) -> None:
            def one(k, d, rows_) -> None:  # decoder k on the context's stream k % 5, from its own thread
                d.decode(staging, offs[rows_], plan.sizes[rows_], plan.geom[rows_], dst, be.ctx.stream(k % 5))

            threads = [threading.Thread(target=one, args=(k, d, r)) for k, (d, r) in enumerate(zip(decs, parts,
                                                                                                 strict=True))]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            be.synchronize()

        rows[f"decode_roi_{n}_states_ms"] = 1e3 * _timed(split_decode, a.reps)
    be.write(t["geom"], plan.geom.reshape(B, 1, 1, GEOM_COLS))
    g = be.capture("resample", [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], mean=comp.mean,
                                   std=comp.std)])

    def resample() -> None:
        be.launch(g)
        be.synchronize()

    rows["resample_ms"] = 1e3 * _timed(resample, a.reps)
    out = {"batch": B, "images": len(split), "backend": dec.backend, "ms": rows,
           "images_per_s": {k.removesuffix("_ms"): B / (v / 1e3) for k, v in rows.items()}}
    for k, v in rows.items():
        print(f"{k:<28} {v:8.2f} ms  ({B / (v / 1e3):9.0f} images/s)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
