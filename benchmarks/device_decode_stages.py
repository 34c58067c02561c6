"""Where the device decode's time goes (issue [13]): each stage of DeviceJpegFeeder's path timed alone on the GPU.

Over a baseline DTS pack (every file taken by the hardware engine), batch --batch, RandomResizedCrop(224) + flip:

* ``plan``: tr.data.jpeg_plan's geometry of a batch (host); ``stage``: its compressed bytes copied into pinned
  memory (host);
* ``decode``: nvJPEG's batched call (the feeder's decoder: strict, chroma replicated) and the stream synchronised
  after it, regions of interest (the crops) and,
  for comparison, whole images; ``decode_call``: the host seconds inside the call alone (parse, support checks,
  submission), without and with tr's per-file checks (``precheck``: the statuses they give are printed); the
  hardware engine and the GPU-assisted hybrid backend;
* ``decode_reinit``: the same with the decoder re-initialised for another batch size before each call (what a
  batch whose count of hardware rows changes costs);
* ``decode_b{N}``: batches of N images (per-call costs against per-image ones);
* ``decode_roi_{N}_states``: the batch split over N decoders, each from its own thread on its own stream (does one
  decoder use every JPEG engine?);
* ``cpu_regions_{T}_threads``: libjpeg-turbo's decode of the same regions (tr.data.jpeg_plan.decode_regions_at:
  the window around each crop, chroma replicated as the feeder's default) on T native threads; ``..._interpolated``:
  with libjpeg's interpolated chroma (the CPU pipeline's);
* ``split_{f}``: what DeviceJpegFeeder runs with a CPU share f: the CPU decodes the last f of the batch on
  --cpu-threads threads while nvJPEG decodes the rest, both at once;
* ``torchvision``: torchvision.io.decode_jpeg of the same files on the GPU (whole images, its batched nvJPEG);
* ``resample``: image_resample of a decoded batch to FP16 NHWC, the captured graph relaunched;
* ``variant_{flags}_{call}``: tr's decoder made with strict bitstreams (s) and interpolated chroma (i) or not, called
  for regions of interest (tr's call) or whole images, interleaved or planar (torchvision's call: no flags,
  whole images, planar RGB), or as the files' YUV planes (``whole_yuv``: no colour conversion by nvJPEG);
* ``under_load``: tr's call, the fastest variant and torchvision's decode beside ~30 ms of GEMMs on another stream
  (of the least priority): does the decode wait for the rest of the device? tr's call on its transfer stream (the
  greatest priority) and on a stream of the least; torchvision's on either;

    python benchmarks/device_decode_stages.py --images /tmp/tr_bench_images_2k --batch 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE.parent / "packages" / "tr-backend" / "tests"))


def _timed(fn, reps: int) -> float:
    """Median seconds of ``reps`` calls after a warm one."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _packed(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)[:len(sizes)]


def packed_split(images: Path, make: int, baseline: bool):
    """The train split of a DTS pack of ``images`` (made with tools/make_image_folder.py first where missing:
    ``make`` JPEGs, short sides 300-500), packed with --baseline (no progressive file) or plainly."""
    from tr.data import DtsImages
    from tr.data.dts import pack

    if not images.exists():
        from make_image_folder import make_image_folder

        make_image_folder(images, classes=10, per_class=make // 10, min_side=300, max_side=500, seed=0)
    packed = images.parent / (images.name + ("_dts_baseline" if baseline else "_dts_plain"))
    if not (packed / "train.dts").exists():
        pack(images, packed, baseline=baseline)
    return DtsImages(packed).load("train")


def train_planner(split):
    """The ImageNet training chain (RandomResizedCrop(224), flip, FP16 with 4 channels) and its planner over
    ``split``."""
    from tr.core.norm import NormMode
    from tr.data import RandomHorizontalFlip, RandomResizedCrop
    from tr.data.jpeg_plan import JpegPlanner
    from tr.data.transforms import Compose

    comp = Compose([RandomResizedCrop(224), RandomHorizontalFlip()], NormMode.IMAGENET, "float16", 4)
    return comp, JpegPlanner(split, comp)


def under_load(rows: dict[str, float], decodes: dict[str, object], reps: int) -> None:
    """``load_alone``: ~30 ms of FP16 GEMMs on a torch stream; ``{name}_under_load``: the same load enqueued, then
    the decode ``decodes[name]()``, both waited for: about the larger of the two where the decode runs beside the
    load, about their sum where it waits for the device (``{name}_call_under_load``: the host in the call)."""
    import torch
    from nvjpeg_contexts import gemm_load

    load, _ = gemm_load()

    def alone() -> None:
        load()
        torch.cuda.synchronize()

    rows["load_alone_ms"] = 1e3 * _timed(alone, reps)
    for name, fn in decodes.items():
        calls: list[float] = []

        def both(fn=fn, calls=calls) -> None:
            load()
            t0 = time.perf_counter()
            fn()
            calls.append(time.perf_counter() - t0)
            torch.cuda.synchronize()

        rows[f"{name}_under_load_ms"] = 1e3 * _timed(both, reps)
        rows[f"{name}_call_under_load_ms"] = 1e3 * float(np.median(calls))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images_2k"))
    ap.add_argument("--make", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--states", default="1,2,4,7", help="decoders the batch is split over")
    ap.add_argument("--threads", default=f"1,{max(1, (os.cpu_count() or 2) // 2)},{max(1, (os.cpu_count() or 2) - 2)}",
                    help="libjpeg-turbo thread counts")
    ap.add_argument("--cpu-threads", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="for the split rows")
    ap.add_argument("--shares", default="0.25,0.375,0.5,0.625", help="CPU shares of the split rows")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from backend_testkit import SimpleArena, op

    from tr.backend.cuda import CudaBackend
    from tr.backend.cuda.jpeg import DeviceJpegDecoder
    from tr.backend.rules.image import COL, GEOM_COLS
    from tr.data.jpeg_plan import decode_regions_at, region_bytes

    split = packed_split(a.images, a.make, baseline=True)
    comp, planner = train_planner(split)
    B = a.batch
    big = min(len(split), 2 * B)
    idx = np.random.default_rng(0).permutation(len(split))[:big]
    plan_big = planner.plan(idx, 1, 0)
    plan = planner.plan(idx[:B], 1, 0)
    whole = plan.geom.copy()  # the same regions' slots, each image whole (roi = the image)
    sizes = plan.shapes[:, 0].astype(np.int64) * plan.shapes[:, 1] * 3
    slots = np.concatenate([[0], np.cumsum(-(-sizes // 256) * 256)[:-1]])
    whole[:, COL["slot"]], whole[:, COL["roi_y"]], whole[:, COL["roi_x"]] = slots, 0, 0
    whole[:, COL["roi_h"]], whole[:, COL["roi_w"]] = plan.shapes[:, 0], plan.shapes[:, 1]
    cap = int(max(planner.capacity(big), slots[-1] + sizes[-1]))
    arena = SimpleArena()
    t = {"src": arena.add("src", (cap,), "uint8"), "geom": arena.add("geom", (B, 1, 1, GEOM_COLS), "int32"),
         "y": arena.add("y", (B, 224, 224, 4), "fp16")}
    be = CudaBackend()
    be.allocate(arena.layout())
    (_, staging), _ = be.host_buffers(1, (1, 1, int(plan_big.sizes.sum())), "uint8")
    staging = staging.reshape(-1)
    offs_big = _packed(plan_big.sizes)
    for o, s, n in zip(offs_big, plan_big.offsets, plan_big.sizes, strict=True):
        staging[o:o + n] = split.images[s:s + n]
    offs = offs_big[:B]

    def stage() -> None:
        for o, s, n in zip(offs, plan.offsets, plan.sizes, strict=True):
            staging[o:o + n] = split.images[s:s + n]

    dst = be.arena_ptr + t["src"].offset
    stream = be.ctx.stream(0)
    rows: dict[str, float] = {}
    per: dict[str, int] = {}  # images a row's time covers (default B)
    rows["plan_ms"] = 1e3 * _timed(lambda: planner.plan(idx[:B], 1, 0), a.reps)
    rows["stage_ms"] = 1e3 * _timed(stage, a.reps)
    calls: list[float] = []
    statuses: dict[str, list[int]] = {}  # (decoded, refused, damaged) of each row's last call

    def decode(dec, geom, precheck: bool = True, n: int = B, sync: bool = True, row: str = "",
               call: str = "regions", on: int | None = None) -> None:
        t0 = time.perf_counter()
        status = dec.decode(staging, offs_big[:n], plan_big.sizes[:n], geom[:n], dst, stream if on is None else on,
                            precheck, call)
        calls.append(time.perf_counter() - t0)
        statuses[row] = np.bincount(status, minlength=3).tolist()  # (a refused image is not decoded: see the row)
        if sync:
            be.synchronize()

    def decoder_rows(name: str, dec) -> None:
        for what, geom in (("roi", plan.geom), ("whole", whole), ("roi_precheck", plan.geom)):
            calls.clear()
            row = f"decode_{name}_{what}"
            rows[f"{row}_ms"] = 1e3 * _timed(
                lambda geom=geom, row=row: decode(dec, geom, row.endswith("precheck"), row=row), a.reps)
            rows[f"decode_call_{name}_{what}_ms"] = 1e3 * float(np.median(calls))

    hw = DeviceJpegDecoder(0, "auto", big)
    backends = {"hw": hw.backend}
    decoder_rows("hw", hw)
    flip = [B - 1, B]

    def reinit() -> None:  # each call another batch size: the decoder re-initialises its state
        flip.reverse()
        decode(hw, plan.geom, False, flip[0], row="decode_hw_reinit")

    rows["decode_hw_reinit_ms"] = 1e3 * _timed(reinit, a.reps)
    for n in (B // 4, B // 2, big):
        if n < 1 or n == B:
            continue
        rows[f"decode_hw_b{n}_ms"] = 1e3 * _timed(
            lambda n=n: decode(hw, plan_big.geom, False, n, row=f"decode_hw_b{n}"), a.reps)
        per[f"decode_hw_b{n}"] = n
    for n in (int(s) for s in a.states.split(",")):
        decs = [DeviceJpegDecoder(0, "auto", -(-B // n)) for _ in range(n)]
        parts = np.array_split(np.arange(B), n)
        streams = [be.ctx.stream(k % 5) for k in range(n)]

        def split_decode(decs=decs, parts=parts, streams=streams) -> None:
            def one(k, d, rows_) -> None:  # decoder k on its own stream, from its own thread
                d.decode(staging, offs[rows_], plan.sizes[rows_], plan.geom[rows_], dst, streams[k], False)

            threads = [threading.Thread(target=one, args=(k, d, r)) for k, (d, r) in enumerate(zip(decs, parts,
                                                                                                 strict=True))]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            be.synchronize()

        rows[f"decode_roi_{n}_states_ms"] = 1e3 * _timed(split_decode, a.reps)
    # libjpeg-turbo on the CPU: the same regions, packed into pinned memory as the feeder does
    (_, fallback), _ = be.host_buffers(1, (1, 1, int(region_bytes(plan, np.arange(B)).sum())), "uint8")
    fallback = fallback.reshape(-1)
    everything = np.arange(B)
    at_all = _packed(region_bytes(plan, everything))
    counts = sorted({int(s) for s in a.threads.split(",")})
    for n in counts:  # (replicated chroma, as the feeder's default; the most threads interpolated too)
        rows[f"cpu_regions_{n}_threads_ms"] = 1e3 * _timed(
            lambda n=n: decode_regions_at(split, plan, everything, fallback, at_all, n, None, False),
            max(2, a.reps // 3))
    rows[f"cpu_regions_{counts[-1]}_threads_interpolated_ms"] = 1e3 * _timed(
        lambda: decode_regions_at(split, plan, everything, fallback, at_all, counts[-1], None, True),
        max(2, a.reps // 3))
    for f in (float(s) for s in a.shares.split(",")):
        n_hw = B - int(round(f * B))
        cpu_rows = np.arange(n_hw, B)
        at = _packed(region_bytes(plan, cpu_rows))

        def mixed(n_hw=n_hw, cpu_rows=cpu_rows, at=at, f=f) -> None:
            th = threading.Thread(target=decode_regions_at,
                                  args=(split, plan, cpu_rows, fallback, at, a.cpu_threads, None, False))
            th.start()
            decode(hw, plan.geom, False, n_hw, row=f"split_{f:g}")
            th.join()

        rows[f"split_{f:g}_ms"] = 1e3 * _timed(mixed, a.reps)
    be.write(t["geom"], plan.geom.reshape(B, 1, 1, GEOM_COLS))
    decode(hw, plan.geom, False, row="before resample")
    g = be.capture("resample", [op("image_resample", src=t["src"], geom=t["geom"], y=t["y"], mean=comp.mean,
                                   std=comp.std)])

    def resample() -> None:
        be.launch(g)
        be.synchronize()

    rows["resample_ms"] = 1e3 * _timed(resample, a.reps)
    # how tr calls nvJPEG, against the calls others make (torchvision: default flags, nvjpegDecodeBatched of whole
    # images, planar RGB): flags strict (s) and interpolated chroma (i), regions of interest or whole images
    variants = {}
    for strict, interp in ((True, True), (True, False), (False, False)):
        var = DeviceJpegDecoder(0, "auto", B, strict=strict, interpolate=interp)
        backends[f"variant_{'s' * strict}{'i' * interp}"] = var.backend
        for call, geom in (("regions", plan.geom), ("whole", whole), ("whole_planar", whole), ("whole_yuv", whole)):
            row = f"variant_{'s' * strict}{'i' * interp}_{call}"
            rows[f"{row}_ms"] = 1e3 * _timed(lambda var=var, geom=geom, call=call, row=row: decode(
                var, geom, False, row=row, call=call), a.reps)
            variants[row] = (var, geom, call)
    fastest = min((r for r in variants if not r.endswith("_yuv")), key=lambda r: rows[f"{r}_ms"])  # (RGB calls)
    try:  # the decode beside a running workload (a training step's stand-in: FP16 GEMMs on another stream)
        import torch
        import torchvision

        files = [torch.frombuffer(bytearray(split.images[s:s + n].tobytes()), dtype=torch.uint8)
                 for s, n in zip(plan.offsets, plan.sizes, strict=True)]
        vdec, vgeom, vcall = variants[fastest]
        low, high = torch.cuda.Stream(), torch.cuda.Stream(priority=-100)  # (the least priority, the greatest)

        def tv(s) -> None:
            with torch.cuda.stream(s):
                torchvision.io.decode_jpeg(files, device="cuda", mode=torchvision.io.ImageReadMode.RGB)

        decodes = {"decode_hw": lambda: decode(hw, plan.geom, False, row="under load", sync=False),
                   "decode_hw_least_priority": lambda: decode(hw, plan.geom, False, row="under load", sync=False,
                                                              on=low.cuda_stream),
                   f"{fastest}": lambda: decode(vdec, vgeom, False, row="under load", sync=False, call=vcall),
                   "variant__whole_yuv": lambda: decode(variants["variant__whole_yuv"][0], whole, False,
                                                        row="under load", sync=False, call="whole_yuv"),
                   "torchvision": lambda: tv(low), "torchvision_greatest_priority": lambda: tv(high)}
        under_load(rows, decodes, a.reps)
    except ImportError as e:
        print(f"no rows under load: {e}")
    try:  # the GPU-assisted hybrid backend, made last (made beside the hardware one, the latter refused every file)
        decoder_rows("gpu", dec := DeviceJpegDecoder(0, "gpu", big))
        backends["gpu"] = dec.backend
        del dec
    except Exception as e:  # (reported, the rest still measured)
        print(f"no hybrid decoder rows: {type(e).__name__}: {e}")
    try:
        import torch
        import torchvision

        files = [torch.frombuffer(bytearray(split.images[s:s + n].tobytes()), dtype=torch.uint8)
                 for s, n in zip(plan.offsets, plan.sizes, strict=True)]

        def tv() -> None:
            torchvision.io.decode_jpeg(files, device="cuda", mode=torchvision.io.ImageReadMode.RGB)
            torch.cuda.synchronize()

        rows["torchvision_decode_ms"] = 1e3 * _timed(tv, a.reps)
    except Exception as e:  # (no torchvision here: the row is left out)
        print(f"torchvision row skipped: {type(e).__name__}: {e}")
    for row, (_, refused, damaged) in statuses.items():
        if refused or damaged:  # those images were not decoded: the row's time is not a decode's, and says so
            for key in (f"{row}_ms", f"{row.replace('decode_', 'decode_call_', 1)}_ms"):
                if key in rows:
                    rows[key.removesuffix("_ms") + "_not_all_decoded_ms"] = rows.pop(key)
    rates = {k.removesuffix("_ms"): per.get(k.removesuffix("_ms"), B) / (v / 1e3) for k, v in rows.items()}
    out = {"batch": B, "images": len(split), "cores": os.cpu_count(), "cpu_threads": a.cpu_threads,
           "backends": backends, "statuses": statuses, "ms": rows,
           "trans_stream_priority": be.ctx.priority(0),  # (the load's stream: the least, 0)
           "images_per_s": rates}
    for k, v in rows.items():
        print(f"{k:<36} {v:8.2f} ms  ({rates[k.removesuffix('_ms')]:9.0f} images/s)")
    print(f"statuses (decoded, refused, damaged): {statuses}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
