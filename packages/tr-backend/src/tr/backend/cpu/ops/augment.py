"""augment_affine: a batch gathered from a device-resident uint8 data set and augmented in one pass.

The seed's MNIST chain (Pad + RandomCrop, RandomRotation, RandomScale, then RandomErasing, an optional
horizontal flip and the normalisation) as one op: for every output pixel the three geometric steps are one
inverse map into the source image, sampled bilinearly once (zeros outside), so a batch costs one gather per
output pixel instead of three resampled intermediate images.

Draws: sample ``index`` of an epoch uses the key ``splitmix64(prefix ^ index)`` with ``prefix`` =
tr.data.seeds.seed_prefix(seed, epoch) (the INT32[2] ``key`` tensor, one little-endian uint64), and each
transform draws from the Philox stream tr.data's workers use for it (its chain slot << 32; the flip at
offset 0 and the erasing from offset 16), with the same formulas: the crop offsets, angles, scales, erase
rectangles and flips are exactly those of tr.data's Preprocessor for the same chain, seed, epoch and index
(tested). The pixels differ from the workers' by the interpolation: they resample three times and round to
uint8 after each step (and antialias a shrinking RandomScale), this op samples the source once in float.

Attributes: ``pad`` (Pad + RandomCrop of the input size: a shift of -pad..pad, 0: none), ``degrees``
(RandomRotation(-d, d), 0: none), ``scale_lo``/``scale_hi`` (RandomScale, 1/1: none), ``erase_p``,
``erase_scale``, ``erase_ratio`` (RandomErasing, p 0: none) and ``erase_value`` (normalised space),
``flip_p`` (0: none), ``mean``/``std`` (one value or one per channel, on x / 255), the chain slots
``crop_slot``/``rotation_slot``/``scale_slot`` of those transforms in the user's chain. ``y``: (B, H, W, C_out)
FP32 or FP16, C_out >= C (extra channels 0).
"""

from __future__ import annotations

import math

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules.augment import AugmentSpec, per_channel, shapes_of, spec_of
from tr.core.philox import raw_keys, splitmix64_array


class Streams:
    """tr.data's Stream for many samples at once: the k-th draw of each key at base + k."""

    def __init__(self, keys: np.ndarray, base: int) -> None:
        self.keys, self.base, self.n = keys, base, 0

    def _next(self) -> np.ndarray:
        r = raw_keys(self.keys, self.base + self.n)
        self.n += 1
        return r

    def uniform(self) -> np.ndarray:  # float32 (r0 >> 8) * 2^-24, as float64
        return ((self._next()[:, 0] >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float64)

    def uniform_in(self, lo: float, hi: float) -> np.ndarray:
        return lo + (hi - lo) * self.uniform()

    def randint(self, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:  # closed [lo, hi]
        r = self._next()
        v = (r[:, 0].astype(np.uint64) << np.uint64(32)) | r[:, 1].astype(np.uint64)
        span = (np.asarray(hi, np.int64) - np.asarray(lo, np.int64) + 1).astype(np.uint64)
        return np.asarray(lo, np.int64) + (v % span).astype(np.int64)


def _center_offset(n: np.ndarray, crop: int) -> np.ndarray:
    """tr.data's center_offset(n, crop) for n >= crop: round half even of (n - crop) / 2."""
    return np.rint((n - crop) / 2.0).astype(np.int64)


def draws(spec: AugmentSpec, prefix: int, index: np.ndarray, h: int, w: int) -> dict[str, np.ndarray]:
    """Every sample's parameters: crop shift (dy, dx), angle (degrees), scale and its resized size and offset,
    erase rectangle (ei, ej, eh, ew; eh = 0: none) and flip, as tr.data's workers draw them."""
    n = len(index)
    keys = splitmix64_array(np.uint64(prefix) ^ index.astype(np.uint64))
    out: dict[str, np.ndarray] = {"dy": np.zeros(n, np.int64), "dx": np.zeros(n, np.int64),
                                  "angle": np.zeros(n), "scale": np.ones(n), "nh": np.full(n, h, np.int64),
                                  "nw": np.full(n, w, np.int64), "oy": np.zeros(n, np.int64),
                                  "ox": np.zeros(n, np.int64), "flip": np.zeros(n, bool)}
    if spec.pad > 0:  # Pad(p) + RandomCrop(h, w): top, left in [0, 2p]
        s = Streams(keys, spec.crop_slot << 32)
        out["dy"] = s.randint(0, 2 * spec.pad) - spec.pad
        out["dx"] = s.randint(0, 2 * spec.pad) - spec.pad
    if spec.degrees > 0:
        out["angle"] = Streams(keys, spec.rotation_slot << 32).uniform_in(-spec.degrees, spec.degrees)
    if spec.scale != (1.0, 1.0):
        sc = Streams(keys, spec.scale_slot << 32).uniform_in(*spec.scale)
        nh = np.maximum(1, np.rint(h * sc)).astype(np.int64)
        nw = np.maximum(1, np.rint(w * sc)).astype(np.int64)
        out.update(scale=sc, nh=nh, nw=nw,
                   oy=np.where(nh > h, _center_offset(nh, h), -((h - nh) // 2)),
                   ox=np.where(nw > w, _center_offset(nw, w), -((w - nw) // 2)))
    if spec.flip_p > 0:
        out["flip"] = Streams(keys, 0).uniform() < spec.flip_p
    ei, ej, eh, ew = (np.zeros(n, np.int64) for _ in range(4))
    if spec.erase_p > 0:
        s = Streams(keys, 16)
        todo = s.uniform() < spec.erase_p
        area, lr0, lr1 = float(h * w), math.log(spec.erase_ratio[0]), math.log(spec.erase_ratio[1])
        for _ in range(10):  # torchvision's attempts: a sample still trying is at the same stream position
            ea = area * s.uniform_in(*spec.erase_scale)
            ar = np.exp(s.uniform_in(lr0, lr1))
            hh, ww = np.rint(np.sqrt(ea * ar)).astype(np.int64), np.rint(np.sqrt(ea / ar)).astype(np.int64)
            ok = todo & (hh < h) & (ww < w)
            if ok.any():  # the attempt that fits draws the offsets next
                t = Streams(keys, 16)
                t.n = s.n
                ti, tj = t.randint(0, np.maximum(h - hh, 0)), t.randint(0, np.maximum(w - ww, 0))
                ei[ok], ej[ok], eh[ok], ew[ok] = ti[ok], tj[ok], hh[ok], ww[ok]
            todo &= ~ok
            if not todo.any():
                break
    out.update(ei=ei, ej=ej, eh=eh, ew=ew)
    return out


def source_coords(d: dict[str, np.ndarray], h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """The source coordinates (float32 (n, h, w)) every output pixel samples, through the inverse maps of
    RandomScale (resize to nh x nw, centre crop/pad), RandomRotation (about the centre) and the crop shift."""
    yy = np.arange(h, dtype=np.float32)[None, :, None]
    xx = np.arange(w, dtype=np.float32)[None, None, :]
    # RandomScale: output (y, x) is pixel (y + oy, x + ox) of the nh x nw resize of the rotated image
    sy = (h / d["nh"]).astype(np.float32)[:, None, None]
    sx = (w / d["nw"]).astype(np.float32)[:, None, None]
    y1 = (yy + d["oy"].astype(np.float32)[:, None, None] + 0.5) * sy - 0.5
    x1 = (xx + d["ox"].astype(np.float32)[:, None, None] + 0.5) * sx - 0.5
    # RandomRotation: source = R(theta) (p - c) + c, c the centre ((w - 1) / 2, (h - 1) / 2)
    th = np.radians(d["angle"])
    ca, sa = np.cos(th).astype(np.float32)[:, None, None], np.sin(th).astype(np.float32)[:, None, None]
    cy, cx = np.float32(0.5 * (h - 1)), np.float32(0.5 * (w - 1))
    xc, yc = x1 - cx, y1 - cy
    x2, y2 = ca * xc - sa * yc + cx, sa * xc + ca * yc + cy
    # Pad + RandomCrop: output (y, x) of the crop is source (y + dy, x + dx)
    return (y2 + d["dy"].astype(np.float32)[:, None, None]).astype(np.float32), \
        (x2 + d["dx"].astype(np.float32)[:, None, None]).astype(np.float32)


def bilinear(src: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """src (n, H, W, C) float32 sampled at (y, x) (n, h, w), zeros outside: (n, h, w, C)."""
    n, H, W, C = src.shape
    y0, x0 = np.floor(y), np.floor(x)
    fy, fx = (y - y0)[..., None], (x - x0)[..., None]
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    b = np.arange(n)[:, None, None]
    out = np.zeros((*y.shape, C), np.float32)
    for ty, wy in ((0, 1 - fy), (1, fy)):
        for tx, wx in ((0, 1 - fx), (1, fx)):
            yi, xi = y0 + ty, x0 + tx
            inside = (yi >= 0) & (yi < H) & (xi >= 0) & (xi < W)
            v = src[b, np.clip(yi, 0, H - 1), np.clip(xi, 0, W - 1)] * inside[..., None]
            out += (wy * wx) * v
    return out


def augment(images: np.ndarray, index: np.ndarray, prefix: int, spec: AugmentSpec, c_out: int) -> np.ndarray:
    """The op on numpy arrays: images (N, H, W, C) uint8, the batch's dataset indices: float32 (B, H, W, c_out)."""
    _, h, w, c = images.shape
    d = draws(spec, prefix, index, h, w)
    y, x = source_coords(d, h, w)
    v = bilinear(images[index].astype(np.float32), y, x)
    mean = np.asarray(per_channel(spec.mean, c), np.float32)
    std = np.asarray(per_channel(spec.std, c), np.float32)
    v = (v * np.float32(1 / 255) - mean) / std
    v = np.where(d["flip"][:, None, None, None], v[:, :, ::-1], v)
    # the erasing rectangle lies in the output's coordinates (after the flip), as tr.data's fused pass has it
    rows, cols = np.arange(h)[None, :, None], np.arange(w)[None, None, :]
    erase = ((rows >= d["ei"][:, None, None]) & (rows < (d["ei"] + d["eh"])[:, None, None])
             & (cols >= d["ej"][:, None, None]) & (cols < (d["ej"] + d["ew"])[:, None, None]))
    v[erase] = np.float32(spec.erase_value)
    if c_out > c:
        v = np.concatenate([v, np.zeros((*v.shape[:3], c_out - c), np.float32)], axis=-1)
    return v


@cpu_op("augment_affine")
def augment_affine(b: Binder) -> Step:
    spec = spec_of(b)
    sh = shapes_of(b, spec)
    src = b.view("src", (sh.n, sh.h, sh.w, sh.c))
    index = b.view("index", (sh.batch,))
    key = b.view("key", (2,)).view("<u8")
    y, store_y = b.store("y", (sh.batch, sh.h, sh.w, sh.c_out))

    def core() -> None:
        if index.min() < 0 or index.max() >= sh.n:  # a corrupt order must not read outside the data set
            raise IndexError(f"augment_affine: a batch index lies outside the {sh.n} samples")
        y[...] = augment(src, index.astype(np.int64), int(key[0]), spec, sh.c_out)

    return seq(core, store_y)
