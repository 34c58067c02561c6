"""image_resample and image_jitter: decoded JPEG regions cropped, resized (and colour-jittered), flipped, erased and
normalised into the input batch.

Each sample's resize is tr.data's (csrc/resample.cpp): both axes' 14-bit weights (tr/backend/rules/image.py
``axis``), an int32 accumulation from 2^13 shifted right by 14 and clamped to u8 after each pass, the two passes
in tr.data's order (vertical first when the output has fewer rows than the source rows read): integer
arithmetic, so the bytes are tr.data's whatever the order of the sums. The normalisation is FusedNormalization's
float(x) * a + b, flip applied to the resized row, the erase box written over the normalised values. A float y is
computed in float32 and rounded once to its dtype on store (the Binder's narrowing: FP16 numpy's cast, BF16
tr.core.bf16), as the CUDA kernel's ``from_f`` does; a UINT8 y is written in place.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules.image import (
    CHANNELS,
    COL,
    GEOM_COLS,
    PREC,
    Axis,
    Jitter,
    axis,
    coefficients,
    jitter_of,
    per_channel,
    shapes_of,
    spec_of,
    vertical_first,
    window,
)
from tr.core.dtype import DType
from tr.core.errors import DataError

HALF = 1 << (PREC - 1)


def _pass(src: np.ndarray, ax: Axis, along: int) -> np.ndarray:
    """One resize pass over axis ``along`` (0: rows, 1: columns) of a u8 (h, w, c) image."""
    taps = ax.w.shape[1]
    idx = ax.start[:, None] + np.arange(taps)[None, :]
    idx = np.minimum(idx, src.shape[along] - 1)  # (a zero weight reads any in-range sample)
    g = np.take(src, idx, axis=along).astype(np.int32)  # along 0: (out, taps, w, c); along 1: (h, out, taps, c)
    if along == 0:
        acc = np.einsum("otwc,ot->owc", g, ax.w, dtype=np.int64)
    else:
        acc = np.einsum("hotc,ot->hoc", g, ax.w, dtype=np.int64)
    return np.clip((acc + HALF) >> PREC, 0, 255).astype(np.uint8)


def resize_crop(region: np.ndarray, top: int, left: int, ch: int, cw: int, oh: int, ow: int,
                out: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """The u8 resize of the box (top, left, ch, cw) of a decoded region to (oh, ow), as tr.data computes it; with
    ``out`` = (y, x, h, w) only that window of it (a CenterCrop after a Resize: the same bytes)."""
    ay, ax = axis(top, ch, oh), axis(left, cw, ow)
    first = vertical_first(ay, oh)  # decided on the whole resize, as tr.data resizes the whole image first
    if out is not None:
        ay, ax = window(ay, out[0], out[2]), window(ax, out[1], out[3])
    if first:
        return _pass(_pass(region, ay, 0), ax, 1)
    return _pass(_pass(region, ax, 1), ay, 0)


def _geometry_problem(g: np.ndarray, src_bytes: int, oh: int, ow: int) -> str | None:
    slot, rh, rw = int(g[COL["slot"]]), int(g[COL["roi_h"]]), int(g[COL["roi_w"]])
    top, left, ch, cw = (int(g[COL[k]]) for k in ("top", "left", "crop_h", "crop_w"))
    if rh < 1 or rw < 1 or slot < 0 or slot + rh * rw * CHANNELS > src_bytes:
        return f"its decoded region ({rh}x{rw} at byte {slot}) does not lie in src's {src_bytes} bytes"
    if ch < 1 or cw < 1 or top < 0 or left < 0 or top + ch > rh or left + cw > rw:
        return f"its crop box ({top}, {left}, {ch}x{cw}) does not lie in its {rh}x{rw} region"
    fh, fw, y0, x0 = (int(g[COL[k]]) for k in ("out_h", "out_w", "out_y", "out_x"))
    fh, fw = fh or oh, fw or ow
    if y0 < 0 or x0 < 0 or y0 + oh > fh or x0 + ow > fw:
        return f"its {oh}x{ow} window at ({y0}, {x0}) does not lie in its {fh}x{fw} resize"
    ey, ex, eh, ew = (int(g[COL[k]]) for k in ("erase_y", "erase_x", "erase_h", "erase_w"))
    if eh and (ey < 0 or ex < 0 or ew < 1 or ey + eh > oh or ex + ew > ow):
        return f"its erase box ({ey}, {ex}, {eh}x{ew}) does not lie in the {oh}x{ow} output"
    return None


def _finish(px: np.ndarray, g: np.ndarray, a: np.ndarray, bias: np.ndarray, ev: np.ndarray, y: np.ndarray) -> None:
    """Flip, normalise and erase one sample's u8 pixels into its rows of y (FusedNormalization's order)."""
    if g[COL["flip"]]:
        px = px[:, ::-1]
    out = px.astype(np.float32) * a + bias  # float32 multiply, then add: FusedNormalization's two roundings
    eh = int(g[COL["erase_h"]])
    if eh:
        ey, ex, ew = int(g[COL["erase_y"]]), int(g[COL["erase_x"]]), int(g[COL["erase_w"]])
        out[ey:ey + eh, ex:ex + ew] = ev
    y[:, :, :CHANNELS] = out
    y[:, :, CHANNELS:] = 0


@cpu_op("image_resample")
def image_resample(b: Binder) -> Step:
    spec, sh = spec_of(b), shapes_of(b)
    src, geom = b.flat("src"), b.view("geom").reshape(sh.batch, GEOM_COLS)
    pixels_only = b.dtype("y") is DType.UINT8  # image_jitter's input: the resized pixels alone
    y, narrow = (b.view("y"), None) if pixels_only else b.store("y")
    a, bias = coefficients(spec)
    ev = np.array(per_channel(spec.erase_value), np.float32)
    where = b.where

    def run() -> None:
        for k in range(sh.batch):
            g = geom[k]
            problem = _geometry_problem(g, sh.src_bytes, sh.h, sh.w)
            if problem:  # the plan wrote it: a bug upstream, named before anything is read
                raise DataError(f"{where}: sample {k}: {problem}")
            slot, rh, rw = int(g[COL["slot"]]), int(g[COL["roi_h"]]), int(g[COL["roi_w"]])
            region = src[slot:slot + rh * rw * CHANNELS].reshape(rh, rw, CHANNELS)
            fh, fw = int(g[COL["out_h"]]) or sh.h, int(g[COL["out_w"]]) or sh.w
            px = resize_crop(region, *(int(g[COL[c]]) for c in ("top", "left", "crop_h", "crop_w")), fh, fw,
                             (int(g[COL["out_y"]]), int(g[COL["out_x"]]), sh.h, sh.w))
            if pixels_only:
                y[k] = px
            else:
                _finish(px, g, a, bias, ev, y[k])
        if narrow is not None:
            narrow()

    return run


# --- ColorJitter: tr.data's color.cpp (torchvision's float32 formulas), every op's result truncated to u8 ------

F32 = np.float32


def _clamp_trunc(v: np.ndarray) -> np.ndarray:
    return np.trunc(np.minimum(np.maximum(v, F32(0)), F32(255)))


def _gray(r: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (F32(0.2989) * r + F32(0.587) * g) + F32(0.114) * b


def _hue(r: np.ndarray, g: np.ndarray, b: np.ndarray, hf: np.float32) -> tuple[np.ndarray, ...]:
    R, G, B = r / F32(255), g / F32(255), b / F32(255)
    maxc, minc = np.maximum(np.maximum(R, G), B), np.minimum(np.minimum(R, G), B)
    eqc = maxc == minc
    cr = maxc - minc
    s = cr / np.where(eqc, F32(1), maxc)
    crd = np.where(eqc, F32(1), cr)
    rc, gc, bc = (maxc - R) / crd, (maxc - G) / crd, (maxc - B) / crd
    hr = np.where(maxc == R, bc - gc, F32(0))
    hg = np.where((maxc == G) & (maxc != R), (F32(2) + rc) - bc, F32(0))
    hb = np.where((maxc != G) & (maxc != R), (F32(4) + gc) - rc, F32(0))
    a = ((hr + hg) + hb) / F32(6) + F32(1)
    h = np.where(a >= F32(1), a - F32(1), a)
    x = h + hf
    hh = np.where(x < F32(0), x + F32(1), np.where(x >= F32(1), x - F32(1), x))
    hs = hh * F32(6)
    i6 = np.floor(hs)
    f = hs - i6
    ii = i6.astype(np.int32)
    ii[ii == 6] = 0
    v = maxc
    p = np.clip(v * (F32(1) - s), F32(0), F32(1))
    q = np.clip(v * (F32(1) - s * f), F32(0), F32(1))
    t = np.clip(v * (F32(1) - s * (F32(1) - f)), F32(0), F32(1))
    ro = np.where((ii == 0) | (ii == 5), v, np.where(ii == 1, q, np.where(ii == 4, t, p)))
    go = np.where((ii == 1) | (ii == 2), v, np.where(ii == 0, t, np.where(ii == 3, q, p)))
    bo = np.where((ii == 3) | (ii == 4), v, np.where(ii == 2, t, np.where(ii == 5, q, p)))
    up = F32(255.999)
    return np.trunc(ro * up), np.trunc(go * up), np.trunc(bo * up)


def _apply(op: int, j: Jitter, rgb: list[np.ndarray], mean: np.float32) -> list[np.ndarray]:
    if op == 0:  # brightness: a blend with black
        return [_clamp_trunc(j.f[0] * c + F32(0)) for c in rgb]
    if op == 1:  # contrast: a blend with the image's mean grey
        add = j.c1 * mean
        return [_clamp_trunc(j.f[1] * c + add) for c in rgb]
    if op == 2:  # saturation: a blend with the pixel's grey, truncated
        m = j.s1 * np.trunc(_gray(*rgb))
        return [_clamp_trunc(j.f[2] * c + m) for c in rgb]
    return list(_hue(*rgb, j.f[3]))


def color_jitter(px: np.ndarray, j: Jitter) -> np.ndarray:
    """tr.data's color_jitter of one u8 (h, w, 3) image."""
    rgb = [px[..., c].astype(np.float32) for c in range(CHANNELS)]
    mean = F32(0)
    if 1 in j.ops:
        pc = j.ops.index(1)
        for op in j.ops[:pc]:
            rgb = _apply(op, j, rgb, mean)
        total = int(np.trunc(_gray(*rgb)).astype(np.int64).sum())
        mean = F32(total) / F32(px.shape[0] * px.shape[1])  # float(sum) / float(pixels), as color.cpp
        rest = j.ops[pc:]
    else:
        rest = j.ops
    for op in rest:
        rgb = _apply(op, j, rgb, mean)
    return np.stack(rgb, -1).astype(np.uint8)


@cpu_op("image_jitter")
def image_jitter(b: Binder) -> Step:
    spec, sh = spec_of(b), shapes_of(b, "x")
    x, geom = b.view("x"), b.view("geom").reshape(sh.batch, GEOM_COLS)
    y, narrow = b.store("y")
    a, bias = coefficients(spec)
    ev = np.array(per_channel(spec.erase_value), np.float32)

    def run() -> None:
        for k in range(sh.batch):
            _finish(color_jitter(x[k], jitter_of(geom[k])), geom[k], a, bias, ev, y[k])
        if narrow is not None:
            narrow()

    return run
