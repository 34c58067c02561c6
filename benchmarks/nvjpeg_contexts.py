"""Does nvJPEG's hardware decode overlap a GEMM load, in the load's CUDA context or in another one?

nvJPEG's batched call on the H200's engine returns only once the engine is done, and beside a load on another
stream of the same process it waits for the whole load (device_decode_stages.py's under_load rows, tr's call and
torchvision's alike, whatever the streams' priorities). This measures where that wait lives, with torchvision's
decode (nvJPEG's hardware backend) of batches of --batch baseline 4:2:0 JPEGs and 20 FP16 8192^3 GEMMs a round:

* ``decode_alone`` / ``load_alone``: each in a process of its own, the other idle;
* ``two_processes``: both at once, each in its own process (two CUDA contexts, time-sliced by the GPU);
* ``two_threads``: both at once from two threads of one process (one context: tr's feeder today).

Each row: the decode's milliseconds a batch and the load's milliseconds a round, medians over --seconds.

    python benchmarks/nvjpeg_contexts.py --json out.json   # H200
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import statistics
import threading
import time
from pathlib import Path


def make_files(n: int, seed: int = 0) -> list[bytes]:
    """n 500x375 quality-90 baseline 4:2:0 JPEGs of smooth colour fields with noise (photograph-like entropy)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    out = []
    for _ in range(n):
        f = rng.uniform(0.005, 0.05, 3)
        p = rng.uniform(0, 6.3, 3)
        img = np.stack([127 + 100 * np.sin(f[c] * xx + p[c]) * np.cos(f[(c + 1) % 3] * yy) for c in range(3)], -1)
        img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90, subsampling=2)
        out.append(buf.getvalue())
    return out


def _decoder(files: list[bytes], seconds: float, start, done, out) -> None:
    import torch
    import torchvision

    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in files]

    def once() -> None:
        torchvision.io.decode_jpeg(data, device="cuda", mode=torchvision.io.ImageReadMode.RGB)
        torch.cuda.synchronize()

    for _ in range(3):
        once()
    if start is not None:
        start.wait()
    ts, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        once()
        ts.append(time.perf_counter() - t0)
    if done is not None:
        done.set()
    out.put(("decode", ts))


def gemm_load():
    """The load put beside a decode here and in device_decode_stages.py: a round of 20 FP16 8192^3 GEMMs (about
    34 ms on the H200) on a torch stream of the least priority. Returns (a function that queues a round, the
    stream)."""
    import torch

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()

    def enqueue() -> None:
        with torch.cuda.stream(side):
            for _ in range(20):
                x @ x

    return enqueue, side


def _loader(seconds: float, start, done, out) -> None:
    enqueue, side = gemm_load()

    def once() -> None:
        enqueue()
        side.synchronize()

    for _ in range(2):
        once()
    if start is not None:
        start.wait()
    ts, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end and not (done is not None and done.is_set() and ts):
        t0 = time.perf_counter()
        once()
        ts.append(time.perf_counter() - t0)
    out.put(("load", ts))


def _med_ms(ts: list[float]) -> float:
    return 1e3 * statistics.median(ts) if ts else float("nan")


def in_processes(files: list[bytes], seconds: float, decode: bool, load: bool) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    n = int(decode) + int(load)
    start, done = ctx.Barrier(n), ctx.Event()
    procs = []
    if decode:
        procs.append(ctx.Process(target=_decoder, args=(files, seconds, start, done, out)))
    if load:
        procs.append(ctx.Process(target=_loader, args=(seconds, start, done, out)))
    for p in procs:
        p.start()
    got = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    return {f"{k}_ms": _med_ms(v) for k, v in got.items()} | {f"{k}_n": len(v) for k, v in got.items()}


def in_threads(files: list[bytes], seconds: float) -> dict:
    import queue

    out: queue.Queue = queue.Queue()
    start, done = threading.Barrier(2), threading.Event()
    ths = [threading.Thread(target=_decoder, args=(files, seconds, start, done, out)),
           threading.Thread(target=_loader, args=(seconds, start, done, out))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    got = dict(out.get() for _ in ths)
    return {f"{k}_ms": _med_ms(v) for k, v in got.items()} | {f"{k}_n": len(v) for k, v in got.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    files = make_files(a.batch)
    rows = {"decode_alone": in_processes(files, a.seconds, True, False),
            "load_alone": in_processes(files, a.seconds, False, True),
            "two_processes": in_processes(files, a.seconds, True, True),
            "two_threads": in_threads(files, a.seconds)}
    for k, v in rows.items():
        print(f"{k:<16} decode {v.get('decode_ms', float('nan')):7.2f} ms a batch of {a.batch}   "
              f"load {v.get('load_ms', float('nan')):7.2f} ms a round", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"batch": a.batch, "seconds": a.seconds,
                                            "file_bytes": sum(map(len, files)), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
