"""ImageNet-style image folders (one sub-folder per class, JPEG files): the class list, the (file, label)
samples and a structural check of every JPEG, without decoding a pixel.

``jpeg_info`` walks the JPEG marker segments (and skips over the entropy-coded scans) far enough to give the
frame's width, height and component count and to catch what breaks a decoder later, in the middle of an
epoch: a file that is not a JPEG (a PNG renamed .jpg, as ImageNet has), a truncated download, a corrupt
segment length, a CMYK image. ``scan_image_folder`` builds the index the way torchvision's ImageFolder
orders it (sorted class folders, sorted files) and either stops at the first bad file or skips and lists
the bad ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tr.core.errors import ConfigError, DataError
from tr.data.checks import flag

IMAGE_EXTENSIONS = (".jpg", ".jpeg")  # compared case-insensitively (ImageNet's files end in .JPEG)
ON_BAD = ("error", "skip")
_CHUNK = 4096  # files checked per thread-pool round

# Start-of-frame markers: C0..CF except DHT (C4), JPG (C8) and DAC (CC), which share the range.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SOI, _EOI, _SOS = 0xD8, 0xD9, 0xDA
# Markers without a length field: TEM and RST0..7 (SOI and EOI are handled on their own).
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
# Inside a scan, FF 00 is a stuffed data byte, FF D0..D7 a restart marker and FF FF fill: the scan ends at
# the first FF followed by anything else. One regex search per scan keeps the walk out of a Python byte loop.
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_MAGIC = ((b"\x89PNG", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"), (b"RIFF", "RIFF/WebP"), (b"II*\x00", "TIFF"),
          (b"MM\x00*", "TIFF"))


class _BadJpeg(Exception):
    """The reason a byte string is not a usable JPEG, without the file's name (jpeg_info adds it)."""


def _not_jpeg(data: bytes) -> str:
    kind = next((name for magic, name in _MAGIC if data.startswith(magic)), None)
    head = data[:4].hex(" ").upper() or "nothing (empty file)"
    return f"not a JPEG: no start-of-image marker (starts with {head}{f', a {kind} file' if kind else ''})"


def _frame(data: bytes, pos: int, length: int) -> tuple[int, int, int]:
    """(width, height, components) of the SOF segment whose length field is at ``pos``."""
    if length < 8:
        raise _BadJpeg(f"frame header at byte {pos - 2} is {length} bytes long, shorter than its 8 fixed bytes")
    precision, height, width, comps = data[pos + 2], _u16(data, pos + 3), _u16(data, pos + 5), data[pos + 7]
    if length < 8 + 3 * comps:
        raise _BadJpeg(f"frame header at byte {pos - 2} is {length} bytes long, too short for {comps} components")
    if comps == 4:
        raise _BadJpeg("CMYK JPEG not supported (4 components)")
    if comps not in (1, 3):
        raise _BadJpeg(f"frame header gives {comps} components; only 1 (gray) or 3 (YCbCr) are supported")
    if precision != 8:
        raise _BadJpeg(f"{precision}-bit samples not supported (only 8-bit JPEG)")
    if width == 0 or height == 0:
        raise _BadJpeg(f"frame header gives a {width}x{height} image (zero height needs a DNL marker: not supported)")
    return width, height, comps


def _u16(data: bytes, pos: int) -> int:
    return (data[pos] << 8) | data[pos + 1]


def _walk(data: bytes) -> tuple[int, int, int]:
    if len(data) < 2 or data[0] != 0xFF or data[1] != _SOI:
        raise _BadJpeg(_not_jpeg(data))
    n, pos = len(data), 2
    info: tuple[int, int, int] | None = None
    scanned = False
    while True:
        if pos >= n:
            raise _BadJpeg(f"no end-of-image marker: truncated at byte {n}")
        if data[pos] != 0xFF:
            raise _BadJpeg(f"expected a marker at byte {pos}, found 0x{data[pos]:02X}")
        while pos < n and data[pos] == 0xFF:  # a marker may be preceded by any number of FF fill bytes
            pos += 1
        if pos >= n:
            raise _BadJpeg(f"no end-of-image marker: truncated at byte {n}")
        marker, at = data[pos], pos - 1
        pos += 1
        if marker == _EOI:
            break
        if marker in _STANDALONE:
            continue
        if marker == 0x00:
            raise _BadJpeg(f"expected a marker at byte {at}, found a stuffed FF 00 outside a scan")
        if marker == _SOI:
            raise _BadJpeg(f"second start-of-image marker at byte {at}")
        if pos + 2 > n:
            raise _BadJpeg(f"truncated segment at byte {at}: its length field is cut off")
        length = _u16(data, pos)
        if length < 2:
            raise _BadJpeg(f"corrupt segment length {length} of marker 0x{marker:02X} at byte {at}")
        if pos + length > n:
            raise _BadJpeg(f"truncated segment at byte {at}: marker 0x{marker:02X} claims {length} bytes, "
                           f"{n - pos} remain")
        if marker in _SOF and info is None:
            info = _frame(data, pos, length)
        pos += length
        if marker == _SOS:
            if info is None:
                raise _BadJpeg(f"no frame header before the first scan (start-of-scan at byte {at})")
            scanned = True
            m = _SCAN_END.search(data, pos)
            if m is None:
                raise _BadJpeg(f"no end-of-image marker: truncated in the scan data that starts at byte {pos}")
            pos = m.start()
    if info is None:
        raise _BadJpeg("no frame header (no SOF marker before the end-of-image marker)")
    if not scanned:
        raise _BadJpeg("no image data (no start-of-scan marker before the end-of-image marker)")
    if data[pos:].strip(b"\x00"):  # zero padding after EOI is common; anything else is not this image
        raise _BadJpeg(f"{n - pos} bytes after the end-of-image marker at byte {pos - 2} are not zero padding")
    return info


def jpeg_info(data: bytes, where: str) -> tuple[int, int, int]:
    """(width, height, components) of a baseline or progressive JPEG; DataError naming ``where`` else."""
    try:
        return _walk(data)
    except _BadJpeg as e:
        raise DataError(f"{where}: {e}") from None


@dataclass(frozen=True)
class ImageFolderIndex:
    """The samples of an image folder: labels index ``classes``; ``skipped`` lists the files left out."""

    root: Path
    classes: tuple[str, ...]
    samples: tuple[tuple[Path, int], ...]  # (file, class index), in sorted class then sorted file order
    skipped: tuple[tuple[Path, str], ...]  # (file, reason)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def _visible(entries: Iterable[os.DirEntry]) -> list[os.DirEntry]:
    return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def _class_files(folder: Path) -> list[Path]:
    """Every visible file under a class folder (sub-folders too, as torchvision walks them), sorted."""
    out: list[Path] = []
    with os.scandir(folder) as it:
        entries = _visible(it)
    for e in entries:
        if e.is_dir():
            out += _class_files(Path(e.path))
        else:
            out.append(Path(e.path))
    return out


def _problem(path: Path, extensions: frozenset[str], check: bool) -> str | None:
    """Why ``path`` is not a usable sample, or None."""
    if path.suffix.lower() not in extensions:
        return f"not an image file (extension {path.suffix or '(none)'!r}; expected {', '.join(sorted(extensions))})"
    if not check:
        return None
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    try:
        _walk(data)
    except _BadJpeg as e:
        return str(e)
    return None


def _check_extensions(extensions: Iterable[str]) -> frozenset[str]:
    exts = tuple(extensions) if not isinstance(extensions, str) else (extensions,)
    bad = [e for e in exts if not isinstance(e, str) or not e.startswith(".") or len(e) < 2]
    if not exts or bad:
        raise ConfigError(f"scan_image_folder: extensions must be non-empty names like '.jpg', got {extensions!r}")
    return frozenset(e.lower() for e in exts)


def scan_image_folder(
    root: str | Path,
    *,
    extensions: Iterable[str] = IMAGE_EXTENSIONS,
    on_bad: str = "error",
    check: bool = True,
) -> ImageFolderIndex:
    """Index ``root``/<class>/<files>: classes are the sorted sub-folder names (hidden ones ignored).

    A bad file (another extension, or with ``check`` a JPEG that ``jpeg_info`` rejects) raises DataError
    naming it with ``on_bad="error"``; with ``on_bad="skip"`` it goes into ``skipped`` with its reason. A
    class folder without a usable image is an error either way: its label would never occur.
    """
    if on_bad not in ON_BAD:
        raise ConfigError(f"scan_image_folder: on_bad must be one of {', '.join(ON_BAD)}, got {on_bad!r}")
    flag("scan_image_folder", "check", check)  # check="no" would be taken for True
    exts = _check_extensions(extensions)
    root = Path(root)
    if not root.exists():
        raise DataError(f"image folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"image folder {root} is not a directory")
    with os.scandir(root) as it:
        entries = _visible(it)
    class_dirs = [e for e in entries if e.is_dir()]
    if not class_dirs:
        files = sum(1 for e in entries if not e.is_dir())
        hint = f"; it holds {files} files: is it a class folder itself?" if files else ""
        raise DataError(f"image folder {root} has no class folders (one sub-folder per class expected){hint}")
    classes = tuple(e.name for e in class_dirs)
    per_class = [_class_files(root / c) for c in classes]
    for c, files in zip(classes, per_class):
        if not files:
            raise DataError(f"class folder {root / c} holds no images")

    flat = [(path, label) for label, files in enumerate(per_class) for path in files]
    problems = _problems([p for p, _ in flat], exts, check, stop_early=on_bad == "error")
    samples: list[tuple[Path, int]] = []
    skipped: list[tuple[Path, str, int]] = []
    for (path, label), reason in zip(flat, problems):
        if reason is None:
            samples.append((path, label))
        elif on_bad == "error":
            raise DataError(f"{path}: {reason}")
        else:
            skipped.append((path, reason, label))
    present = {label for _, label in samples}
    for label, c in enumerate(classes):
        if label not in present:
            first = next(f"{p.name}: {r}" for p, r, lab in skipped if lab == label)
            raise DataError(f"class folder {root / c} holds no valid images ({len(per_class[label])} skipped; "
                            f"first: {first})")
    return ImageFolderIndex(root, classes, tuple(samples), tuple((p, r) for p, r, _ in skipped))


def _problems(paths: list[Path], exts: frozenset[str], check: bool, stop_early: bool) -> list[str | None]:
    """``_problem`` of every path, in path order whatever the threads' timing; with ``stop_early`` the list
    ends at the first problem. Reading is IO-bound, so the checks run on a thread pool, a chunk at a time:
    ImageNet's 1.28 M files would otherwise be 1.28 M futures at once, and a first bad file would not stop
    the rest from being read."""
    if not check or len(paths) < 2:
        return _until_problem((_problem(p, exts, check) for p in paths), stop_early)
    out: list[str | None] = []
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1), thread_name_prefix="tr-scan") as ex:
        for start in range(0, len(paths), _CHUNK):
            out += _until_problem(ex.map(lambda p: _problem(p, exts, check), paths[start : start + _CHUNK]),
                                  stop_early)
            if stop_early and out and out[-1] is not None:
                break
    return out


def _until_problem(results: Iterable[str | None], stop_early: bool) -> list[str | None]:
    out: list[str | None] = []
    for r in results:
        out.append(r)
        if stop_early and r is not None:
            break
    return out
