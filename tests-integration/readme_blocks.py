"""README.md's snippets and the directory a reader runs them in (for test_readme.py and test_readme_shell.py).

Every snippet of the README is a fenced block: ```python (run by test_readme.py), ```bash (run by
test_readme_shell.py) or ```text (a listing, not code). A block whose first line is
``# not run by the README test: <reason>`` needs what a test cannot have (a network, a GPU, minutes of native
builds): it is skipped with that reason, never silently.

A reader runs the snippets from the repository root. The tests run each in a fresh temporary directory that
holds what the snippets read (``data/``, ``examples/``, ``tools/``: links to the repository's) and, for those
that name ``photos/``, a small ImageNet-style folder made by tools/make_image_folder.py; what the snippets
write (runs/, packed/, ...) stays there.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LANGUAGES = ("python", "bash", "text")
SKIP = "# not run by the README test:"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
# 3 classes of photographs, 16 training and 4 validation JPEGs each, short sides 40-96 px (about 1 s to make)
PHOTOS = {"classes": 3, "per_class": 16, "val_per_class": 4, "min_side": 40, "max_side": 96, "seed": 0}


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # the line of its opening fence in README.md (1-based)

    @property
    def skip_reason(self) -> str | None:
        first = self.text.split("\n", 1)[0].strip()
        return first[len(SKIP):].strip() if first.startswith(SKIP) else None

    @property
    def name(self) -> str:
        return f"README.md:{self.line}"


def readme_text() -> str:
    return README.read_text()


def fenced_blocks(text: str) -> list[Block]:
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def blocks(lang: str) -> list[Block]:
    return [b for b in fenced_blocks(readme_text()) if b.lang == lang]


def indented_code_lines(text: str) -> list[int]:
    """Lines that start an indented (4-space) code block outside the fences: a snippet no test would run."""
    out, fenced, prev = [], False, ""
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not prev.strip() and (line.startswith("    ") or line.startswith("\t")) and line.strip():
            out.append(number)
        prev = line
    return out


def reader_dir(dest: Path, photos: bool, seed_v3: bool = False) -> Path:
    """``dest`` made into the directory a reader runs the README from (see the module docstring); ``seed_v3``:
    also a small seed DTS v3 file, mnist_train.dts (the seed's layout, as tr-data's convert tests build it)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("data", "examples", "tools"):
        (dest / name).symlink_to(ROOT / name, target_is_directory=True)
    if seed_v3:
        import importlib.util

        import numpy as np

        path = ROOT / "packages" / "tr-data" / "tests" / "test_dts_convert_v3.py"
        spec = importlib.util.spec_from_file_location("_seed_v3_files", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (64, 28, 28, 1), dtype=np.uint8)
        (dest / "mnist_train.dts").write_bytes(bytes(module.raw_v3(images, np.arange(64) % 10, 10)))
    if photos:
        if str(ROOT / "tools") not in sys.path:
            sys.path.insert(0, str(ROOT / "tools"))
        from make_image_folder import make_image_folder

        make_image_folder(dest / "photos", **PHOTOS)
    return dest


def needs_seed_v3(block: Block) -> bool:
    return "mnist_train.dts" in block.text


def needs_photos(block: Block) -> bool:
    return re.search(r"""["'\s]photos/?["'\s]""", block.text) is not None


def require_photos(block: Block, decode: bool = False) -> bool:
    """Whether ``block`` reads the photos folder; skips the test when that folder cannot be made here (Pillow and
    scikit-image make it) or, with ``decode``, its JPEGs cannot be decoded (tr-data without libjpeg-turbo)."""
    if not needs_photos(block):
        return False
    pytest.importorskip("PIL", reason="the image folder is made with Pillow (tr-data's images extra)")
    pytest.importorskip("skimage", reason="the image folder is made from scikit-image's photographs")
    if decode:
        from tr.data import _native

        if not _native.jpeg_available():
            pytest.skip("tr-data built without libjpeg-turbo: JPEG folders cannot be decoded")
    return True
