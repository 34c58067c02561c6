"""nvJPEG's decoupled path (the GPU-hybrid backend, issue [13]) against the hardware engine and libjpeg-turbo.

Over a plain DTS pack (its progressive files kept: the engine refuses them), one batch of --batch crops
(RandomResizedCrop(224) + flip regions), each row the median of --reps calls after a warm one, the stream
synchronised:

* ``hw_baseline``: the hardware engine's batched call (the feeder's) on the batch's baseline files;
* ``hybrid_t{T}``: the GPU-hybrid decoder (tr.backend.cuda.jpeg, backend "gpu": nvJPEG's decoupled API, Huffman on
  T host threads, or on the GPU for baseline regions of 1,000,000 pixels or more) on every file of the batch;
  ``..._cpu_huffman``: never the GPU's Huffman decoder (on these 300-500 px files no region reaches the threshold,
  so the two rows time the same decode, twice);
* ``hw_decoupled_progressive_t{T}``: the hardware decoder's "regions_decoupled" call on the progressive files alone
  (what the engine refuses, decoded by nvJPEG's CPU-Huffman decoder instead of libjpeg-turbo);
* ``cpu_progressive_t{T}`` / ``cpu_all_t{T}``: libjpeg-turbo on T native threads (tr.data.jpeg_plan) on the same
  regions;
* ``*_under_load``: the decode queued after ~30 ms of FP16 GEMMs on another stream, both waited for (about the
  larger of the two if the decode runs beside the load, their sum if it waits for the device).

    python benchmarks/hybrid_decode.py --images /tmp/tr_bench_images_2k --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE.parent / "packages" / "tr-backend" / "tests"))
sys.path.insert(0, str(HERE))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images_2k"))
    ap.add_argument("--make", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    cores = os.cpu_count() or 2
    ap.add_argument("--threads", default=f"4,{max(1, cores - 2)}", help="host thread counts")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from backend_testkit import SimpleArena
    from device_decode_stages import _packed, _timed, packed_split, train_planner

    from tr.backend.cuda import CudaBackend
    from tr.backend.cuda.jpeg import DeviceJpegDecoder
    from tr.data.jpeg_plan import decode_regions_at, region_bytes

    split = packed_split(a.images, a.make, baseline=False)
    _, planner = train_planner(split)
    B = a.batch
    plan = planner.plan(np.random.default_rng(0).permutation(len(split))[:B], 1, 0)
    progressive = planner.progressive[plan.indices]
    everything, prog, base = np.arange(B), np.flatnonzero(progressive), np.flatnonzero(~progressive)
    arena = SimpleArena()
    src = arena.add("src", (planner.capacity(B),), "uint8")
    be = CudaBackend()
    be.allocate(arena.layout())
    dst = be.arena_ptr + src.offset
    stream = be.ctx.stream(0)
    (_, staging), _ = be.host_buffers(1, (1, 1, int(plan.sizes.sum())), "uint8")
    staging = staging.reshape(-1)
    offs = _packed(plan.sizes)
    for o, s, n in zip(offs, plan.offsets, plan.sizes, strict=True):
        staging[o:o + n] = split.images[s:s + n]
    (_, fallback), _ = be.host_buffers(1, (1, 1, int(region_bytes(plan, everything).sum())), "uint8")
    fallback = fallback.reshape(-1)
    rows: dict[str, float] = {}
    count: dict[str, int] = {}
    statuses: dict[str, list[int]] = {}
    decoders: dict[str, str] = {}

    def decode(dec, which: np.ndarray, name: str, call: str = "regions", sync: bool = True) -> None:
        status = dec.decode(staging, offs[which], plan.sizes[which], plan.geom[which], dst, stream, False, call)
        statuses[name] = np.bincount(status, minlength=3).tolist()
        if sync:
            be.synchronize()

    def row(name: str, fn, n: int) -> None:
        rows[name] = 1e3 * _timed(fn, a.reps)
        count[name] = n

    hw = DeviceJpegDecoder(0, "auto", B)
    decoders["hw"] = hw.backend
    row("hw_baseline", lambda: decode(hw, base, "hw_baseline"), base.size)
    threads = [int(t) for t in a.threads.split(",")]
    hybrids = {}
    for t in threads:
        for huff, pixels in (("", 1_000_000), ("_cpu_huffman", None)):
            name = f"hybrid_t{t}{huff}"
            try:
                dec = hybrids[name] = DeviceJpegDecoder(0, "gpu", B, threads=t, gpu_huffman_pixels=pixels)
            except Exception as e:  # (reported; the other rows still measured)
                print(f"no {name} rows: {type(e).__name__}: {e}")
                continue
            decoders[name] = f"{dec.backend} / {dec.decoupled}"
            row(name, lambda dec=dec, name=name: decode(dec, everything, name), B)
        if prog.size:
            name = f"hw_decoupled_progressive_t{t}"
            hwd = DeviceJpegDecoder(0, "auto", B, threads=t)
            row(name, lambda hwd=hwd, name=name: decode(hwd, prog, name, "regions_decoupled"), prog.size)
            decoders[name] = f"{hwd.backend} / {hwd.decoupled}"
    for t in sorted({1, *threads}):
        if prog.size:
            at = _packed(region_bytes(plan, prog))
            row(f"cpu_progressive_t{t}", lambda t=t, at=at: decode_regions_at(split, plan, prog, fallback, at, t,
                                                                             None, False), prog.size)
        at = _packed(region_bytes(plan, everything))
        row(f"cpu_all_t{t}", lambda t=t, at=at: decode_regions_at(split, plan, everything, fallback, at, t, None,
                                                                  False), B)
    try:  # beside a load on another stream: does the decoupled decode wait for the device as the engine does?
        import torch
        from nvjpeg_contexts import gemm_load

        load, _ = gemm_load()

        def alone() -> None:
            load()
            torch.cuda.synchronize()

        rows["load_alone"] = 1e3 * _timed(alone, a.reps)
        loaded = {"hw_baseline": lambda: decode(hw, base, "hw_baseline", sync=False)}
        for name, dec in hybrids.items():
            loaded[name] = lambda dec=dec, name=name: decode(dec, everything, name, sync=False)
        for name, fn in loaded.items():
            calls: list[float] = []

            def both(fn=fn, calls=calls) -> None:
                load()
                t0 = time.perf_counter()
                fn()
                calls.append(time.perf_counter() - t0)
                torch.cuda.synchronize()

            rows[f"{name}_under_load"] = 1e3 * _timed(both, a.reps)
            rows[f"{name}_call_under_load"] = 1e3 * float(np.median(calls))
    except ImportError as e:
        print(f"no rows under load: {e}")
    rates = {k: count[k] / (v / 1e3) for k, v in rows.items() if k in count}
    for k, v in rows.items():
        print(f"{k:<40} {v:8.2f} ms" + (f"  {count[k]:4d} images  {rates[k]:8.0f} images/s" if k in count else ""))
    print(f"batch: {B} images, {prog.size} progressive; statuses (decoded, refused, damaged): {statuses}")
    print(f"decoders: {decoders}")
    if a.json:
        out = {"batch": B, "progressive": int(prog.size), "cores": cores, "decoders": decoders, "ms": rows,
               "images": count, "images_per_s": rates, "statuses": statuses}
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
