"""Worker scaling of tr.data's native pipeline, and what limits it.

For each workload and worker count W, images/s of one Preprocessor with W worker threads, delivering whole
batches to a consumer that acquires and releases them (nothing else), over epochs run back to back:

* ``mnist``: the seed's MNIST chain (Pad 2, RandomCrop 28, RandomRotation 20, RandomScale 0.8-1.2,
  RandomErasing 0.5, MNIST normalisation) on the 60,000 bundled training digits, FP16 (what AMP trains on),
  batch 200;
* ``imagenet``: JPEG decode (libjpeg-turbo, the window RandomResizedCrop reads) + RandomResizedCrop(224) +
  flip + ImageNet normalisation to FP16 NHWC with 4 channels, batch 256, from a JPEG folder held in memory
  (tools/make_image_folder.py makes it when --images does not exist).

Rows per W: ``claimed`` (tr's scheme: workers claim a few items at a time from a shared cursor) and
``static`` (item g to worker g % W: the scheme tr had before, kept behind ``_native.set_static_assignment``
to measure the difference). Per row: efficiency = rate / (W x the 1-worker rate of the same scheme), and
where the workers' time went (tr.data.EpochTimes): the share spent on samples, the share blocked on a full
zone (the consumer was slower), the consumer's share blocked in acquire (the workers were slower), and the
mean work time per sample, which rises with W only when the cores themselves slow down.

The control, ``independent``: P processes, each one Preprocessor with 1 worker, started together and timed
over the same window: no shared state at all, so their summed rate is what this machine's P cores give
(clock under all-core load, SMT siblings, memory). Efficiency against it separates tr's losses from the
machine's.

    python benchmarks/pipeline_scaling.py --workers 1,2,4,8,16 --json auto
    python benchmarks/pipeline_scaling.py --workload mnist --workers 1,2 --seconds 1     # quick, ~30 s
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tools"))
BATCH = {"mnist": 200, "imagenet": 256}


def machine() -> dict:
    """CPU facts that bound scaling: cores this process may use, SMT, sockets, NUMA nodes, clock."""
    info: dict = {"affinity_cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                  "python": platform.python_version()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        keep = ("Model name", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "NUMA node(s)",
                "CPU max MHz", "CPU min MHz", "L3 cache", "On-line CPU(s) list", "Hypervisor vendor")
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in keep or k.strip().startswith("NUMA node") and "CPU(s)" in k:
                info[k.strip()] = v.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def os_counters() -> dict[str, int]:
    """This process's page faults and context switches (getrusage: all its threads) and the machine's
    TLB-shootdown, function-call, rescheduling and timer interrupts (/proc/interrupts: all CPUs). A process of
    many threads pays for every unmapped page with a TLB shootdown to each CPU running one of them (a virtual
    machine's IPIs are costly), which one-thread processes do not."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = {"minor_faults": ru.ru_minflt, "major_faults": ru.ru_majflt, "voluntary_switches": ru.ru_nvcsw,
           "involuntary_switches": ru.ru_nivcsw}
    out.update(interrupts())
    return out


def interrupts() -> dict[str, int]:
    try:
        lines = Path("/proc/interrupts").read_text().splitlines()
    except OSError:
        return {}
    cpus = len(lines[0].split()) if lines else 0
    out = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        if name.strip() in ("TLB", "CAL", "RES", "LOC"):
            out["irq_" + name.strip().lower()] = sum(int(x) for x in rest.split()[:cpus] if x.isdigit())
    return out


def deltas(c0: dict[str, int], c1: dict[str, int], images: int, seconds: float) -> dict[str, float]:
    """Per image for this process's counters, per second for the machine's interrupts."""
    out = {}
    for k in c1.keys() & c0.keys():
        d = c1[k] - c0[k]
        out[k + ("_per_s" if k.startswith("irq_") else "_per_image")] = d / (seconds if k.startswith("irq_")
                                                                            else max(1, images))
    return out


def dataset(workload: str, images: Path, make: int):
    from tr.data import MNIST, ImageFolder

    if workload == "mnist":
        return MNIST(ROOT / "data" / "mnist")
    if not (images / "train").exists():
        from make_image_folder import make_image_folder

        t0 = time.perf_counter()
        make_image_folder(images, classes=10, per_class=max(1, make // 10), min_side=300, max_side=500, seed=0,
                          val_per_class=2)
        print(f"made {make} images in {images} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return ImageFolder(images)


def settings(workload: str, ds, workers: int):
    import tr.data as d
    from tr.core.norm import NormMode

    s = d.PreprocessorSettings().dataset(ds).preprocess_workers(workers).seed(1)
    if workload == "mnist":
        return s.normalization(NormMode.MNIST).train_transforms(
            d.Pad(2), d.RandomCrop(28), d.RandomRotation(20, fill=0), d.RandomScale(0.8, 1.2), d.RandomErasing(0.5))
    return (s.normalization(NormMode.IMAGENET).train_transforms(d.RandomResizedCrop(224), d.RandomHorizontalFlip())
            .val_transforms(d.Resize(256), d.CenterCrop(224)).pad_channels_to(4))


def measure(workload: str, ds, workers: int, seconds: float, warmup: float, start_at: float | None = None) -> dict:
    """images/s over a window of ``seconds`` after ``warmup`` seconds of epochs run back to back, and where the
    workers' time went in the epochs that ended inside the window."""
    from tr.data import Preprocessor, TransferStation

    s = settings(workload, ds, workers).commit()
    shape = s.sample_shape(True, getattr(ds, "image_shape", None))
    st = TransferStation(BATCH[workload], shape, "float16")
    work = wait = cons = wall = 0.0
    items = 0
    with Preprocessor(s, st) as pre:
        pre.epoch(0).close()  # the dataset loaded, threads started
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.time()))
        t_begin = time.perf_counter()
        t_window = t_begin + warmup
        t_end = t_window + seconds
        n = 0
        epoch = 1
        c0 = None
        while True:
            run = pre.epoch(epoch)
            t_e0 = time.perf_counter()
            for b in run.batches():
                if time.perf_counter() >= t_window:
                    if c0 is None:
                        c0 = os_counters()
                    n += b.size
            run.close()
            now = time.perf_counter()
            if t_e0 >= t_window:  # a whole epoch inside the window: its times count
                t = run.times()
                work, wait = work + sum(t.work_s), wait + sum(t.wait_s)
                cons, wall, items = cons + t.consumer_wait_s[0], wall + (now - t_e0), items + sum(t.items)
            epoch += 1
            if now >= t_end:
                break
    rate = n / (now - t_window)
    out = {"images_per_s": rate, "images": n, "seconds": now - t_window, "epochs_timed": epoch - 1}
    out.update(deltas(c0 or os_counters(), os_counters(), n, now - t_window))
    if wall > 0:
        out.update(busy=work / (workers * wall), blocked_on_zone=wait / (workers * wall),
                   consumer_blocked=cons / wall, us_per_sample=1e6 * work / max(1, items))
    return out


def independent(workload: str, images: Path, procs: int, seconds: float, warmup: float) -> dict:
    """``procs`` processes of 1 worker each, timed over the same window; their rates summed."""
    start_at = time.time() + (4.0 if workload == "mnist" else 8.0)  # every child loaded its data by then
    cmd = [sys.executable, __file__, "--child", workload, "--images", str(images), "--seconds", str(seconds),
           "--warmup", str(warmup), "--start-at", repr(start_at)]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    time.sleep(max(0.0, start_at + warmup - time.time()))
    i0, t0 = interrupts(), time.perf_counter()
    time.sleep(seconds)
    irq = deltas(i0, interrupts(), 1, time.perf_counter() - t0)
    rows = []
    for p in ps:
        out, _ = p.communicate(timeout=seconds + warmup + 120)
        if p.returncode != 0:
            raise SystemExit(f"an independent child failed (exit {p.returncode})")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    late = sum(1 for r in rows if r["late_s"] > 0.05)
    out = {"images_per_s": sum(r["images_per_s"] for r in rows), "processes": procs, "late_children": late,
           "us_per_sample": sum(r.get("us_per_sample", 0.0) for r in rows) / procs, **irq}
    for k in {k for r in rows for k in r if k.endswith("_per_image")}:  # the mean over the children
        out[k] = sum(r.get(k, 0.0) for r in rows) / procs
    return out


def row(label: str, workload: str, w: int, r: dict, base: dict[str, float]) -> dict:
    rec = {"workload": workload, "scheme": label, "workers": w, **r}
    if label in base:
        rec["efficiency"] = r["images_per_s"] / (w * base[label])
    parts = "".join(f", {k} {100 * r[k]:4.1f} %" for k in ("busy", "blocked_on_zone", "consumer_blocked") if k in r)
    eff = f" eff {100 * rec['efficiency']:5.1f} %" if "efficiency" in rec else ""
    per = f", {r['us_per_sample']:.1f} us/sample" if r.get("us_per_sample") else ""
    osc = "".join(f", {k.replace('_per_image', '/img').replace('_per_s', '/s')} {r[k]:.3g}" for k in
                  ("minor_faults_per_image", "involuntary_switches_per_image", "irq_tlb_per_s", "irq_cal_per_s",
                   "irq_res_per_s") if k in r)
    print(f"{workload:<9} {label:<12} W={w:2d}: {r['images_per_s']:10.0f} images/s{eff}{parts}{per}{osc}",
          flush=True)
    return rec


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="mnist,imagenet", help="mnist, imagenet or both (comma-separated)")
    ap.add_argument("--workers", default=f"1,2,4,8,{len(os.sched_getaffinity(0))}")
    ap.add_argument("--schemes", default="claimed,static", help="claimed, static (comma-separated)")
    ap.add_argument("--independent", default="max", help="process counts for the control: 'max' (the largest "
                    "worker count), a comma-separated list, or 'none'")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed window per row")
    ap.add_argument("--warmup", type=float, default=1.0, help="untimed seconds before the window")
    ap.add_argument("--images", type=Path, default=Path("/tmp/tr_bench_images"))
    ap.add_argument("--make", type=int, default=4000, help="images to generate when --images does not exist")
    ap.add_argument("--json", help="write the rows here, or 'auto' (benchmarks/results/)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        ds = dataset(a.child, a.images, a.make)
        late = time.time() - a.start_at
        r = measure(a.child, ds, 1, a.seconds, a.warmup, start_at=a.start_at)
        print(json.dumps({**r, "late_s": max(0.0, late)}))
        return
    from tr.data import _native

    counts = sorted({int(w) for w in a.workers.split(",")})
    schemes = [s for s in a.schemes.split(",") if s]
    if min(counts) < 1 or any(s not in ("claimed", "static") for s in schemes):
        ap.error("--workers must be >= 1 and --schemes claimed and/or static")
    if a.workload == "imagenet" or "imagenet" in a.workload.split(","):
        if not _native.jpeg_available():
            raise SystemExit("this tr-data build has no libjpeg-turbo: the imagenet workload cannot run")
    info = machine()
    info["GLIBC_TUNABLES"] = os.environ.get("GLIBC_TUNABLES", "")
    print(json.dumps(info), flush=True)
    rows = []
    for wl in a.workload.split(","):
        ds = dataset(wl, a.images, a.make)
        base: dict[str, float] = {}
        for w in counts:
            for scheme in schemes:
                _native.set_static_assignment(scheme == "static")
                try:
                    r = measure(wl, ds, w, a.seconds, a.warmup)
                finally:
                    _native.set_static_assignment(False)
                if w == 1:
                    base[scheme] = r["images_per_s"]
                rows.append(row(scheme, wl, w, r, base))
        procs = [] if a.independent == "none" else [max(counts)] if a.independent == "max" else \
            sorted({int(p) for p in a.independent.split(",")})
        for p in procs:
            r = independent(wl, a.images, p, a.seconds, a.warmup)
            rec = row("independent", wl, p, r, {"independent": base.get("claimed", 0.0) or 1.0})
            claimed = next((x for x in rows if x["workload"] == wl and x["scheme"] == "claimed"
                            and x["workers"] == p), None)
            if claimed:
                rec["claimed_vs_independent"] = claimed["images_per_s"] / r["images_per_s"]
                print(f"{wl:<9} claimed W={p} reaches {100 * rec['claimed_vs_independent']:.1f} % of {p} "
                      f"independent 1-worker processes", flush=True)
            rows.append(rec)
    if a.json:
        cores = len(os.sched_getaffinity(0))
        out = (HERE / "results" / f"pipeline_scaling_cpu{cores}_{date.today()}.json" if a.json == "auto"
               else Path(a.json))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": sys.argv, "machine": info, "batch": BATCH, "seconds": a.seconds,
                                   "warmup": a.warmup, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
