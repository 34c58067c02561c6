"""The draw of csrc/ops/mixup.cu, compiled for the host, against tr.core.mixup.draw: the same bits.

The CUDA build cannot run here, but its draw is plain C++ apart from the rounding intrinsics (__dadd_rn & co.,
which round exactly as IEEE float64 +, -, *, /, sqrt) and Philox: this test takes the file's draw section as it
is, gives it host versions of those (no contraction into fused multiply-adds: -ffp-contract=off, as the
intrinsics guarantee on the device), and compares seed, mode, factors, lam and box with the Python draw over
thousands of steps of six settings (tiny and large alphas included). It checks the translation, not the device:
test_cuda_mixup.py holds the GPU to the CPU backend.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tr.core import mixup as mx
from tr.core import philox

CU = Path(__file__).resolve().parents[1] / "csrc" / "ops" / "mixup.cu"
CXX = shutil.which("g++") or shutil.which("c++")

_HOST = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
struct uint4 { unsigned x, y, z, w; };
static uint4 philox4(unsigned long long seed, unsigned long long offset) {
  unsigned c0 = (unsigned)offset, c1 = (unsigned)(offset >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    c0 = (unsigned)(p1 >> 32) ^ c1 ^ k0; c1 = (unsigned)p1; c2 = (unsigned)(p0 >> 32) ^ c3 ^ k1; c3 = (unsigned)p0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}
static unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull; unsigned long long z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return z ^ (z >> 31);
}
static double __dadd_rn(double a, double b) { return a + b; }
static double __dsub_rn(double a, double b) { return a - b; }
static double __dmul_rn(double a, double b) { return a * b; }
static double __ddiv_rn(double a, double b) { return a / b; }
static double __dsqrt_rn(double a) { return std::sqrt(a); }
namespace {
%s
}
int main(int argc, char** argv) {
  const double ma = atof(argv[1]), ca = atof(argv[2]), pr = atof(argv[3]), sw = atof(argv[4]);
  const long long h = atoll(argv[5]), w = atoll(argv[6]);
  unsigned long long seed = strtoull(argv[7], nullptr, 10);
  for (int i = 0, n = atoi(argv[8]); i < n; ++i) {
    Draw d;
    float lam;
    mixup_draw_kernel(&seed, &d, &lam, h, w, ma, ca, pr, sw);
    printf("%%llu %%d %%a %%a %%a %%d %%d %%d %%d\n", seed, d.mode, (double)d.a, (double)d.b, (double)lam, d.y0, d.y1,
           d.x0, d.x1);
  }
}
"""


def _draw_section() -> str:
    src = CU.read_text()
    lo = src.index("constexpr unsigned long long kFirstBeta")
    hi = src.index("// --- the draw: end ---")
    body = src[lo:hi].replace("__device__ const double", "static const double").replace("__device__ ", "")
    return body.replace("__global__ void", "void").replace("kern::philox4", "philox4").replace(
        "kern::splitmix64", "splitmix64")


@pytest.fixture(scope="module")
def host_draw(tmp_path_factory) -> Path:
    if CXX is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("mixup_draw")
    (d / "draw.cpp").write_text(_HOST % _draw_section())
    subprocess.run([CXX, "-std=c++17", "-O2", "-ffp-contract=off", "-o", str(d / "draw"), str(d / "draw.cpp")],
                   check=True, capture_output=True, text=True)
    return d / "draw"


@pytest.mark.parametrize("cfg,h,w", [(mx.MixupConfig(0.8, 1.0), 224, 224), (mx.MixupConfig(0.8, 0.0), 32, 32),
                                     (mx.MixupConfig(0.0, 1.0), 7, 9), (mx.MixupConfig(0.02, 0.05, 0.7, 0.4), 32, 32),
                                     (mx.MixupConfig(6.0, 3.0, 0.6, 0.3), 17, 5),
                                     (mx.MixupConfig(0.2, 0.4), 64, 48)])
def test_the_kernel_s_draw_is_the_python_draw(host_draw, cfg, h, w):
    seed, steps = 0x0123456789ABCDEF, 1500
    out = subprocess.run([str(host_draw), repr(cfg.mixup_alpha), repr(cfg.cutmix_alpha), repr(cfg.prob),
                          repr(cfg.switch_prob), str(h), str(w), str(seed), str(steps)],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == steps
    lams = set()
    for line in out:
        seed = philox.splitmix64(seed)
        f = line.split()
        d = mx.draw(seed, cfg, h, w)
        mode = 2 if d.cutmix else (1 if d.lam != 1.0 else 0)
        assert int(f[0]) == seed and int(f[1]) == mode and float.fromhex(f[4]) == float(d.lam32), line
        if mode == 1:
            assert float.fromhex(f[2]) == float(d.lam32) and float.fromhex(f[3]) == float(np.float32(1.0 - d.lam))
        if mode == 2:
            assert tuple(int(v) for v in f[5:9]) == d.box
        lams.add(d.lam)
    assert len(lams) >= 10  # many different draws were compared
