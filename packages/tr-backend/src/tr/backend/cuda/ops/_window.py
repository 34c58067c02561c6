"""Sliding-window geometry for convolution and pooling (NHWC, symmetric zero padding), checked against the
tensors, as integers for the native ops."""

from __future__ import annotations

from tr.backend.cuda.binder import CudaBinder, pair
from tr.core.errors import ShapeError


def window(b: CudaBinder, x: str, y: str, kernel: tuple[int, int] | None = None) -> dict[str, int]:
    """n, h, w, c, kh, kw, sh, sw, ph, pw, p, q from the kernel/stride/padding attributes (kernel may come from
    the weight), with y checked to be [n, p, q, *]."""
    kh, kw = kernel if kernel is not None else pair(b.attr("kernel"), "kernel", b)
    if kernel is not None and "kernel" in b.call.attrs and pair(b.attr("kernel"), "kernel", b) != kernel:
        b.fail(f"attribute kernel={b.attr('kernel')!r} disagrees with the weight's {kernel}", ShapeError)
    sh, sw = pair(b.attr("stride", 1), "stride", b)
    ph, pw = pair(b.attr("padding", 0), "padding", b)
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        b.fail(f"kernel {kh}x{kw}, stride {sh}x{sw}, padding {ph}x{pw}: kernel and stride must be >= 1, "
               f"padding >= 0")
    if ph >= kh or pw >= kw:
        b.fail(f"padding {ph}x{pw} must be smaller than the kernel {kh}x{kw}")
    n, h, w, c = b.tensor(x).shape.dims
    p, q = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if p < 1 or q < 1:
        b.fail(f"a {kh}x{kw} window with padding {ph}x{pw} does not fit input {b.tensor(x).shape}", ShapeError)
    yt = b.tensor(y)
    if yt.shape.dims[:3] != (n, p, q):
        b.fail(f"{y} {yt.shape} must be [{n},{p},{q},*] for input {b.tensor(x).shape}, kernel {kh}x{kw}, "
               f"stride {sh}x{sw}, padding {ph}x{pw}", ShapeError)
    return {"n": n, "h": h, "w": w, "c": c, "kh": kh, "kw": kw, "sh": sh, "sw": sw, "ph": ph, "pw": pw, "p": p, "q": q}
