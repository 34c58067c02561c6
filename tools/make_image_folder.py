"""Make an ImageNet-style JPEG folder (OUT/<class>/*.JPEG, or OUT/train and OUT/val) from real photographs,
for tests and benchmarks on machines without internet.

The photographs are scikit-image's bundled samples (skimage.data; those that need a download are skipped):
each class is one photograph, or with ``--tiles N`` one cell of an N x N grid over a photograph (neighbouring cells
share colours and texture: a harder task), each sample a random crop of its class's image (area, a fraction in
``--crop-area`` of it, and aspect drawn like RandomResizedCrop),
resized so its short side lies in [min_side, max_side], flipped at random and saved by Pillow at a JPEG
quality from {75, 85, 90, 95}, some progressive, some with 4:4:4 chroma. Gray photographs stay gray
(one-component JPEGs). Every file's randomness comes from (seed, split, class, index) alone, so a seed
gives the same bytes whatever the number of workers.

    python tools/make_image_folder.py OUT [--classes 10] [--per-class 100] [--val-per-class 0] [--seed 0]
    python tools/make_image_folder.py OUT --classes 20 --tiles 2 --crop-area 0.05,0.3   # 5 photographs' quadrants
    python tools/make_image_folder.py --export-sources photos.npz     # the photographs, for a machine without
    TR_IMAGE_SOURCES=photos.npz python tools/make_image_folder.py OUT  # scikit-image (same files either way)

Needs Pillow and scikit-image (tr-data's ``images`` extra), or an exported ``.npz`` of the photographs
(``--sources FILE`` or the environment variable TR_IMAGE_SOURCES).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tr.core.errors import ConfigError

# skimage.data photographs, gray ones early so that a few classes are enough to have both kinds.
SOURCES = (
    "astronaut", "chelsea", "camera", "coffee", "coins", "rocket", "moon", "hubble_deep_field", "brick",
    "immunohistochemistry", "stereo_motorcycle", "gravel", "retina", "grass", "clock", "cell", "page", "text",
)  # fmt: skip
QUALITIES = (75, 85, 90, 95)
SCALE = (0.25, 1.0)  # crop area as a fraction of the photograph (wider than 0.08: the sources are small)
RATIO = (3 / 4, 4 / 3)
P_PROGRESSIVE = 0.3
P_FULL_CHROMA = 0.25  # 4:4:4 instead of Pillow's default 4:2:0


def load_sources(count: int, sources: str | Path | None = None) -> list[tuple[str, np.ndarray]]:
    """The first ``count`` photographs of SOURCES that load offline, as uint8 (h, w) or (h, w, 3); from the
    ``.npz`` file ``sources`` (or $TR_IMAGE_SOURCES) that ``export_sources`` wrote, when given."""
    sources = sources or os.environ.get("TR_IMAGE_SOURCES") or None
    if sources is not None:
        try:
            with np.load(sources) as z:
                got = [(name, np.ascontiguousarray(z[name])) for name in SOURCES if name in z.files]
        except (OSError, ValueError) as e:
            raise ConfigError(f"make_image_folder: cannot read the photographs file {sources}: {e}") from None
        if len(got) < count:
            raise ConfigError(f"make_image_folder: {count} classes asked, {sources} holds {len(got)} photographs")
        return got[:count]
    out = []
    for photo in skimage_photos():
        if len(out) == count:
            break
        out.append(photo)
    if len(out) < count:
        raise ConfigError(f"make_image_folder: {count} classes asked, only {len(out)} scikit-image photographs "
                          f"load offline ({', '.join(n for n, _ in out)})")
    return out


def skimage_photos() -> Iterator[tuple[str, np.ndarray]]:
    """The photographs of SOURCES that this scikit-image loads offline, in order."""
    import skimage.data

    for name in SOURCES:
        try:
            img = getattr(skimage.data, name)()
        except Exception:  # not bundled with this scikit-image (needs pooch and a download): skip it
            continue
        img = img[0] if isinstance(img, tuple) else img  # stereo_motorcycle: (left, right, disparity)
        if img.dtype == np.uint8 and (img.ndim == 2 or (img.ndim == 3 and img.shape[2] == 3)):
            yield name, np.ascontiguousarray(img)


def export_sources(path: str | Path) -> int:
    """Write every photograph ``skimage_photos`` gives to ``path`` (.npz); returns how many."""
    photos = dict(skimage_photos())
    np.savez_compressed(path, **photos)
    return len(photos)


def crop_box(rng: np.random.Generator, h: int, w: int,
             scale: tuple[float, float] = SCALE) -> tuple[int, int, int, int]:
    """(top, left, height, width) like RandomResizedCrop: area (a fraction in ``scale`` of h x w) and log-uniform
    aspect drawn, 10 tries, else the whole image clamped to the ratio range."""
    for _ in range(10):
        area = h * w * rng.uniform(*scale)
        ratio = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    r = w / h
    ch, cw = (h, round(h * RATIO[1])) if r > RATIO[1] else (round(w / RATIO[0]), w) if r < RATIO[0] else (h, w)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def tile_of(src: np.ndarray, tiles: int, k: int) -> np.ndarray:
    """Cell k (row-major) of a tiles x tiles grid over ``src`` (the last row and column take the remainder)."""
    h, w = src.shape[:2]
    r, c = divmod(k, tiles)
    th, tw = h // tiles, w // tiles
    return src[r * th : (h if r == tiles - 1 else (r + 1) * th), c * tw : (w if c == tiles - 1 else (c + 1) * tw)]


def make_sample(src: np.ndarray, path: Path, key: tuple[int, ...], min_side: int, max_side: int,
                scale: tuple[float, float] = SCALE) -> None:
    """Write one JPEG crop of ``src`` to ``path``."""
    from PIL import Image

    rng = np.random.default_rng(key)
    top, left, ch, cw = crop_box(rng, src.shape[0], src.shape[1], scale)
    img = Image.fromarray(src[top : top + ch, left : left + cw])
    short = int(rng.integers(min_side, max_side + 1))
    size = (short, max(1, round(short * ch / cw))) if cw <= ch else (max(1, round(short * cw / ch)), short)
    img = img.resize(size, Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    opts = {"quality": int(rng.choice(QUALITIES)), "progressive": bool(rng.random() < P_PROGRESSIVE)}
    if img.mode == "RGB" and rng.random() < P_FULL_CHROMA:
        opts["subsampling"] = 0
    img.save(path, format="JPEG", **opts)


def make_image_folder(
    out: str | Path,
    classes: int = 10,
    per_class: int = 100,
    min_side: int = 300,
    max_side: int = 500,
    seed: int = 0,
    val_per_class: int = 0,
    workers: int | None = None,
    sources: str | Path | None = None,
    tiles: int = 1,
    crop_area: tuple[float, float] = SCALE,
) -> int:
    """Write the folder (OUT/<class>/, or OUT/train/<class>/ and OUT/val/<class>/ when ``val_per_class`` > 0)
    and return the number of files written. OUT must be absent or empty: left-over files of another call
    would become samples. With ``tiles`` > 1 the classes are the cells of a tiles x tiles grid over each
    photograph in turn (class names PHOTO_rRcC), so ceil(classes / tiles**2) photographs are used."""
    if classes < 1 or per_class < 1 or val_per_class < 0:
        raise ConfigError(f"make_image_folder: need classes >= 1, per_class >= 1 and val_per_class >= 0, got "
                          f"{classes}, {per_class}, {val_per_class}")
    if tiles < 1:
        raise ConfigError(f"make_image_folder: tiles must be >= 1, got {tiles}")
    lo, hi = crop_area
    if not 0 < lo <= hi <= 1:
        raise ConfigError(f"make_image_folder: crop_area must satisfy 0 < min <= max <= 1, got {crop_area}")
    if not 1 <= min_side <= max_side:
        raise ConfigError(f"make_image_folder: need 1 <= min_side <= max_side, got {min_side}, {max_side}")
    if seed < 0:
        raise ConfigError(f"make_image_folder: seed must be >= 0, got {seed}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"make_image_folder: {out} exists and is not an empty directory")
    cells = tiles * tiles
    photos = load_sources(-(-classes // cells), sources)
    labelled = []  # (class name, the class's image)
    for name, src in photos:
        if min(src.shape[:2]) < tiles:
            raise ConfigError(f"make_image_folder: photograph {name} ({src.shape[1]}x{src.shape[0]}) is too small "
                              f"for a {tiles}x{tiles} grid")
        for k in range(cells):
            label = name if tiles == 1 else f"{name}_r{k // tiles}c{k % tiles}"
            labelled.append((label, src if tiles == 1 else tile_of(src, tiles, k)))
    labelled = labelled[:classes]
    splits = [("train", per_class), ("val", val_per_class)] if val_per_class > 0 else [("", per_class)]
    jobs = []
    for s, (split, count) in enumerate(splits):
        for c, (name, src) in enumerate(labelled):
            folder = out / split / name if split else out / name
            folder.mkdir(parents=True, exist_ok=True)
            jobs += [(src, folder / f"{name}_{i:05d}.JPEG", (seed, s, c, i)) for i in range(count)]
    area = (float(lo), float(hi))
    # Pillow releases the GIL while it resizes and encodes: threads are enough.
    with ThreadPoolExecutor(max_workers=max(1, workers or os.cpu_count() or 1)) as ex:
        list(ex.map(lambda j: make_sample(j[0], j[1], j[2], min_side, max_side, area), jobs))
    return len(jobs)


def parse_area(text: str) -> tuple[float, float]:
    """'MIN,MAX' as two floats (argparse type of --crop-area)."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes MIN,MAX (fractions of the class's image), got {text!r}") from None
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, nargs="?", help="folder to create (absent or empty)")
    ap.add_argument("--classes", type=int, default=10, help="number of classes (photographs, or grid cells with "
                    "--tiles), default 10")
    ap.add_argument("--per-class", type=int, default=100, help="images per class (train), default 100")
    ap.add_argument("--val-per-class", type=int, default=0, help="> 0: also OUT/val with this many per class")
    ap.add_argument("--min-side", type=int, default=300, help="shortest short side in pixels, default 300")
    ap.add_argument("--max-side", type=int, default=500, help="longest short side in pixels, default 500")
    ap.add_argument("--tiles", type=int, default=1, help="N > 1: a class is one cell of an N x N grid over a "
                    "photograph (default 1: a class is a photograph)")
    ap.add_argument("--crop-area", type=parse_area, default=SCALE, metavar="MIN,MAX",
                    help=f"each sample's crop area as a fraction of its class's image (default {SCALE[0]},{SCALE[1]})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None, help="threads, default os.cpu_count()")
    ap.add_argument("--sources", type=Path, default=None, help="the photographs as exported (.npz), instead of "
                    "scikit-image (default: $TR_IMAGE_SOURCES when set)")
    ap.add_argument("--export-sources", type=Path, default=None, metavar="FILE",
                    help="write scikit-image's photographs to FILE (.npz) and stop")
    a = ap.parse_args(argv)
    if a.export_sources is not None:
        print(f"{a.export_sources}: {export_sources(a.export_sources)} photographs")
        return 0
    if a.out is None:
        ap.error("the folder to create is required (or --export-sources FILE)")
    t0 = time.perf_counter()
    try:
        n = make_image_folder(a.out, a.classes, a.per_class, a.min_side, a.max_side, a.seed, a.val_per_class,
                              a.workers, a.sources, a.tiles, a.crop_area)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in a.out.rglob("*.JPEG"))
    print(f"{a.out}: {n} files, {size:,} bytes ({size / max(n, 1) / 1024:.1f} KiB each), "
          f"{time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
