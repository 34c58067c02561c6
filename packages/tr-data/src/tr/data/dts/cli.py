"""tr-dts: pack datasets into DTS files, describe them, verify them.

    tr-dts pack SRC OUT [--level 0-3] [--baseline] [--workers N] [--kind K] [--block-mib M] [--skip-bad]
    tr-dts info FILE [--json]
    tr-dts verify FILE [FILE ...]
    tr-dts unpack FILE OUT           (JPEG packs: OUT/<class>/*.JPEG; RAW packs: OUT/<split>.npz)
    tr-dts convert OLD NEW [--block-mib M]   (a seed DTS v3 file into a new tr DTS v4 file)

Exit status: 0 done (verify: every file whole), 1 a damaged or unreadable input (named on stderr), 2 a
command-line mistake.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tr.core.errors import ConfigError, DataError


def _bar(total_hint: str):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a stripped install still packs, without the bar
        return None
    return tqdm(total=0, unit="img", desc=total_hint, dynamic_ncols=True, disable=not sys.stderr.isatty())


def _progress(bar: Any) -> Callable[[int, int, int], None]:
    """The (done, total, bytes) callback of pack() and convert() that moves ``bar`` (nothing when it is None)."""

    def progress(done: int, total: int, nbytes: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.set_postfix_str(f"{nbytes / 2**20:.0f} MiB")
            bar.refresh()

    return progress


def cmd_pack(a: argparse.Namespace) -> int:
    from tr.data.dts.pack import pack

    bar = _bar(f"packing {a.src}")
    progress = _progress(bar)
    t0 = time.perf_counter()
    try:
        done = pack(a.src, a.out, level=a.level, workers=a.workers, kind=a.kind, block_bytes=a.block_mib << 20,
                    on_bad="skip" if a.skip_bad else "error", progress=progress, baseline=a.baseline)
    finally:
        if bar is not None:
            bar.close()
    for p in done:
        rate = p.samples / p.seconds if p.seconds > 0 else 0.0
        print(f"{p.path}: {p.samples} samples, {p.bytes / 2**20:.1f} MiB in {p.seconds:.1f} s "
              f"({rate:,.0f} samples/s, {p.bytes / 2**20 / max(p.seconds, 1e-9):.0f} MiB/s)"
              + (f"; {p.recoded} progressive files re-coded as baseline" if a.baseline else ""))
    print(f"packed in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    from tr.data.dts.format import KIND_RAW, KINDS
    from tr.data.dts.reader import DtsFile

    with DtsFile(a.file) as f:
        h = f.header
        info = {"file": str(f.path), "version": ".".join(map(str, h.version[:3])), "dataset": h.dataset,
                "split": h.split, "kind": KINDS[h.kind], "level": h.level, "samples": h.num_samples,
                "classes": h.num_classes, "blocks": h.total_blocks, "block_bytes": h.block_bytes,
                "bytes": h.total_bytes, "alignment": h.alignment, "max_samples_per_block": h.max_pics_per_block,
                "color": h.color.strip(), "shape": [h.height, h.width, h.channels] if h.width else None}
        counts = [0] * max(h.num_classes, 1)
        for lab in f.labels():
            counts[int(lab)] += 1
        info["per_class"] = {name: counts[i] for i, name in enumerate(h.classes)} if h.classes else counts
        info["skipped_at_pack"] = len(h.meta.get("skipped", []))
        if h.kind != KIND_RAW:
            info["baseline"] = bool(h.meta.get("baseline", False))
    if a.json:
        print(json.dumps(info, indent=1))
        return 0
    for k, v in info.items():
        if k == "per_class":
            items = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            shown = ", ".join(f"{n}: {c}" for n, c in items[:10]) + (" ..." if len(items) > 10 else "")
            print(f"{'per class':<22} {shown}")
        else:
            print(f"{k:<22} {v}")
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    from tr.data.dts.reader import DtsFile

    bad = 0
    for path in a.files:
        t0 = time.perf_counter()
        try:
            with DtsFile(path) as f:
                rep = f.verify()
        except DataError as e:
            print(f"DAMAGED {e}", file=sys.stderr)
            bad += 1
            continue
        if rep.ok:
            print(f"ok {path}: {rep.blocks} blocks, {rep.samples} samples, every checksum matches "
                  f"({time.perf_counter() - t0:.2f} s)")
        else:
            bad += 1
            for e in rep.errors:
                print(f"DAMAGED {e}", file=sys.stderr)
            print(f"{path}: {len(rep.errors)} damaged block(s) of {f.num_blocks}", file=sys.stderr)
    return 1 if bad else 0


def cmd_unpack(a: argparse.Namespace) -> int:
    from tr.data.dts.unpack import unpack

    t0 = time.perf_counter()
    n = unpack(a.file, a.out)
    print(f"{a.out}: {n} samples from {a.file} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_convert(a: argparse.Namespace) -> int:
    from tr.data.dts.convert import convert

    bar = _bar(f"converting {a.old}")
    progress = _progress(bar)
    try:
        c = convert(a.old, a.new, block_bytes=a.block_mib << 20, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    print(f"{c.path}: {c.samples} {c.kind.upper()} samples ({c.split} split), {c.bytes / 2**20:.1f} MiB, from the "
          f"seed's {a.old} in {c.seconds:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tr-dts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack a dataset folder into OUT/train.dts and OUT/val.dts")
    p.add_argument("src", type=Path, help="MNIST idx files, CIFAR batches, or class folders (with train/ val/)")
    p.add_argument("out", type=Path, help="the output directory")
    p.add_argument("--level", type=int, default=0, choices=range(4), help="JPEG level (0: the files as they are)")
    p.add_argument("--baseline", action="store_true",
                   help="re-code progressive JPEGs losslessly as baseline (the same pixels, decoded ~2.5x faster)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="threads re-encoding (levels 1-3) or re-coding (--baseline)")
    p.add_argument("--kind", choices=("mnist", "cifar10", "cifar100", "folder"), help="default: detected")
    p.add_argument("--block-mib", type=int, default=16, help="block size in MiB (default 16)")
    p.add_argument("--skip-bad", action="store_true", help="skip (and count) bad image files instead of failing")
    p.set_defaults(fn=cmd_pack)
    p = sub.add_parser("info", help="describe a DTS file")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("verify", help="check every checksum of DTS files")
    p.add_argument("files", type=Path, nargs="+")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("unpack", help="write a DTS file's samples back as files (class folders, or .npz)")
    p.add_argument("file", type=Path)
    p.add_argument("out", type=Path, help="a new directory")
    p.set_defaults(fn=cmd_unpack)
    p = sub.add_parser("convert", help="convert a seed DTS v3 file into a new tr DTS v4 file")
    p.add_argument("old", type=Path, help="the seed's .dts file (version 3)")
    p.add_argument("new", type=Path, help="the tr DTS file to write (must not exist), e.g. packed/mnist/train.dts")
    p.add_argument("--block-mib", type=int, default=16, help="block size in MiB (default 16)")
    p.set_defaults(fn=cmd_convert)
    a = ap.parse_args(argv)
    if a.cmd == "convert" and not 1 <= a.block_mib <= 1024:
        ap.error("--block-mib must be in 1..1024")
    if a.cmd == "pack" and (a.workers < 1 or not 1 <= a.block_mib <= 1024):
        ap.error("--workers must be >= 1 and --block-mib in 1..1024")
    try:
        return a.fn(a)
    except (DataError, ConfigError, OSError) as e:
        print(f"tr-dts {a.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
