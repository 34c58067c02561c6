"""Folders of real photographs for the JPEG tests (tools/make_image_folder.py: scikit-image's pictures, JPEGs of
several qualities and sizes, some progressive, some 4:4:4); skipped where Pillow or scikit-image is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make_photos(tmp_path_factory, name: str, **kw) -> Path:
    """A fresh folder ``name`` made by make_image_folder(root, **kw)."""
    pytest.importorskip("PIL")
    pytest.importorskip("skimage")
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    root = tmp_path_factory.mktemp(name)
    make_image_folder(root, **kw)
    return root
