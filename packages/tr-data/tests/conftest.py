"""Shared fixtures of the tr.data tests: real MNIST (a slice), random images, a Python mirror of
the native per-transform Philox streams (tr.data.seeds documents the scheme), and the parser fuzzer.

The fuzzer (fixture ``fuzz``): every case mutates one valid file deterministically (numpy Generator
seeded per suite), loads it and accepts exactly two outcomes: a successful load (a mutated pixel byte
is still a valid file) or a tr.core.errors.DataError whose message names the file. Anything else, or a
case slower than SLOW_CASE_S, fails with the case's recipe (tools/testkit/parser_fuzz.py, which tr-tensor's
tests use too).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core import philox

MNIST_DIR = Path(__file__).resolve().parents[3] / "data" / "mnist"


class PyStream:
    """The k-th draw of transform slot j of a sample: Philox(sample_seed, (j << 32) + k)."""

    def __init__(self, key: int, slot: int, start: int = 0):
        self.key, self.base, self.n = key, (slot << 32) + start, 0

    def _off(self) -> int:
        o = self.base + self.n
        self.n += 1
        return o

    def uniform(self, lo: float | None = None, hi: float | None = None) -> float:
        u = philox.uniform(self.key, self._off())
        return u if lo is None else lo + (hi - lo) * u

    def u64(self) -> int:
        return philox.uint64(self.key, self._off())

    def randint(self, lo: int, hi: int) -> int:
        return lo + self.u64() % (hi - lo + 1)


@pytest.fixture(scope="session")
def jpeg_folder(tmp_path_factory) -> Path:
    """A small ImageNet-style folder (train/ and val/, 4 classes) of real photographs from
    tools/make_image_folder.py: JPEGs of several qualities and sizes, some progressive, some 4:4:4."""
    pytest.importorskip("PIL")
    pytest.importorskip("skimage")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
    from make_image_folder import make_image_folder

    root = tmp_path_factory.mktemp("images")
    make_image_folder(root, classes=4, per_class=5, min_side=64, max_side=120, seed=1, val_per_class=2)
    return root


@pytest.fixture
def cifar_records(monkeypatch):
    """``cifar_records(CIFAR10, train=3, val=2)``: the record count each file of the class must hold, for
    tiny test files (the real ones hold 10000; tr.data.cifar refuses any other count)."""

    def use(cls, train: int, val: int) -> None:
        counts = {n: c for split, c in (("train", train), ("val", val))
                  for n in (*cls.py_files[split], *cls.bin_files[split])}
        monkeypatch.setattr(cls, "records", counts)

    return use


@pytest.fixture
def pystream():
    return PyStream


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("data/mnist is not present")
    return MNIST_DIR


@pytest.fixture(scope="session")
def mnist_val(mnist_dir):
    from tr.data import MNIST

    return MNIST(mnist_dir).load("val")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def smooth_image(rng: np.random.Generator, h: int, w: int, c: int = 3) -> np.ndarray:
    """A photo-like uint8 image: a blurred random field (interpolation tests need structure, not noise)."""
    small = rng.uniform(0, 255, (max(2, h // 6), max(2, w // 6), c))
    ys = np.linspace(0, small.shape[0] - 1, h)
    xs = np.linspace(0, small.shape[1] - 1, w)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, small.shape[0] - 1), np.minimum(x0 + 1, small.shape[1] - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top = small[y0][:, x0] * (1 - fx) + small[y0][:, x1] * fx
    bot = small[y1][:, x0] * (1 - fx) + small[y1][:, x1] * fx
    img = top * (1 - fy) + bot * fy + rng.normal(0, 6, (h, w, c))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


@pytest.fixture
def smooth():
    return smooth_image


# ---- parser fuzzing: tools/testkit/parser_fuzz.py, shared with the other package's tests ------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "testkit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # dts_mutations (--import-mode=importlib adds no path)
import parser_fuzz  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    parser_fuzz.install(config)  # the fixture ``fuzz``, and the per-suite case counts and their total at the end
