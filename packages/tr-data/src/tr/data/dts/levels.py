"""The JPEG levels of a DTS pack (SEED_SYSTEM.md §9), through Pillow (an optional dependency: tr-data[images]).

* level 0: the source file's bytes, unchanged;
* level 1: a short side over 400 px is resized to 400 (Lanczos), re-encoded at quality 90;
* level 2: as 1, but an image whose short side is 401-440 and long side at most 600 is centre-cropped to a
  400 px short side instead (no resampling);
* level 3: as 2, re-encoded at quality 80.

An image already within 400 px is kept as its source bytes at levels 1-2 (re-encoding would only lose);
level 3 re-encodes it too. Gray images stay gray; CMYK and other modes are converted to RGB.

Beyond the seed, at any level: ``to_baseline`` (``tr-dts pack --baseline``) re-codes a progressive or
arithmetic-coded file losslessly as a baseline one through libjpeg-turbo (jpegtran's transcoding: the DCT
coefficients are copied, so every decoder gives the same pixels), with optimised Huffman tables and without
APPn/COM markers. A progressive file takes libjpeg-turbo ~2.5x as long to decode as the same image in
baseline (every scan is entropy-decoded into a whole-image coefficient buffer first, so a crop window saves
nothing of it); baseline files are kept as they are (re-optimising their tables measured no faster).
"""

from __future__ import annotations

import io

from tr.core.errors import ConfigError, DataError

SHORT_SIDE = 400
QUALITY = {1: 90, 2: 90, 3: 80}


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("DTS levels 1-3 re-encode JPEGs with Pillow: pip install 'tr-data[images]' "
                          "(or pip install pillow)") from None
    return Image


def to_baseline(data: bytes, where: str) -> bytes:
    """``data`` itself when it is a baseline JPEG, else the file re-coded losslessly as baseline."""
    from tr.data import _native

    try:
        if not _native.jpeg_needs_baseline(data):
            return data
        return _native.jpeg_recode_baseline(data)
    except DataError as e:
        raise DataError(f"{where}: {e}") from None


def encode_level(data: bytes, level: int, where: str) -> bytes:
    """The bytes ``data`` (a JPEG file) become at ``level``."""
    if level == 0:
        return data
    if level not in QUALITY:
        raise ConfigError(f"DTS level must be 0-3, got {level}")
    image_mod = _pil()
    try:
        im = image_mod.open(io.BytesIO(data))
        im.load()
    except Exception as e:  # Pillow raises many kinds for a bad file
        raise DataError(f"{where}: cannot decode the JPEG: {e}") from None
    w, h = im.size
    short, long_ = min(w, h), max(w, h)
    if short <= SHORT_SIDE and level < 3:
        return data
    if im.mode not in ("L", "RGB"):
        im = im.convert("RGB")
    if level >= 2 and SHORT_SIDE < short <= SHORT_SIDE + 40 and long_ <= 600:
        cut = short - SHORT_SIDE
        box = (cut // 2, 0, cut // 2 + SHORT_SIDE, h) if w == short else (0, cut // 2, w, cut // 2 + SHORT_SIDE)
        im = im.crop(box)
    elif short > SHORT_SIDE:
        scale = SHORT_SIDE / short
        size = (SHORT_SIDE, max(1, round(h * scale))) if w == short else (max(1, round(w * scale)), SHORT_SIDE)
        im = im.resize(size, image_mod.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=QUALITY[level])
    return buf.getvalue()
