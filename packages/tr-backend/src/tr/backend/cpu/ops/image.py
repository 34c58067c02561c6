"""image_resample: decoded JPEG regions cropped, resized, flipped, erased and normalised into the input batch.

Each sample's resize is tr.data's (csrc/resample.cpp): both axes' 14-bit weights (tr/backend/rules/image.py
``axis``), an int32 accumulation from 2^13 shifted right by 14 and clamped to u8 after each pass, the two passes
in tr.data's order (vertical first when the output has fewer rows than the source rows read): integer
arithmetic, so the bytes are tr.data's whatever the order of the sums. The normalisation is FusedNormalization's
float(x) * a + b, flip applied to the resized row, the erase box written over the normalised values.
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
    axis,
    coefficients,
    per_channel,
    shapes_of,
    spec_of,
    vertical_first,
    window,
)
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


@cpu_op("image_resample")
def image_resample(b: Binder) -> Step:
    spec, sh = spec_of(b), shapes_of(b)
    src, geom, y = b.flat("src"), b.view("geom").reshape(sh.batch, GEOM_COLS), b.view("y")
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
            if g[COL["flip"]]:
                px = px[:, ::-1]
            out = px.astype(np.float32) * a + bias  # float32 multiply, then add: FusedNormalization's two roundings
            eh = int(g[COL["erase_h"]])
            if eh:
                ey, ex, ew = int(g[COL["erase_y"]]), int(g[COL["erase_x"]]), int(g[COL["erase_w"]])
                out[ey:ey + eh, ex:ex + ew] = ev
            y[k, :, :, :CHANNELS] = out
            y[k, :, :, CHANNELS:] = 0

    return run
