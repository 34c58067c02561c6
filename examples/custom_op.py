"""A custom activation from outside tr: squareplus, y = (x + sqrt(x^2 + b)) / 2 (Barron, 2021), a smooth relu.

    python examples/custom_op.py --device cpu [--epochs 2] [--train 6000]

This file is tr.task.extension's recipe, end to end, with no edit of tr:
1. catalogue entries: squareplus_fwd (also the inference op) and squareplus_bwd, in a family of their own;
2. their rules: the checks both backends share;
3. their numpy implementations for the CPU backend;
4. their CUDA kernels, compiled at run time by CuPy (NVRTC) and launched inside the step's CUDA graph (needs
   ``pip install 'tr-backend[cupy]'``; only when training on a GPU);
5. the layer kind ``squareplus`` and its BluePrint leaf, ``squareplus(b=4.0)``;
6. registration for the run (``with registered(...)``), then an MLP trained with it on the bundled MNIST (its first
   ``--train`` samples, normalised), on the CPU or, with ``--device cuda`` (or auto on a GPU machine), on the GPU.

Ends with one JSON line: device, epochs, train_loss (per epoch), top1 (per epoch).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from renaissance import SGD, ConstantLR, DeepLearningTask, Settings, TrainingResult, TrError, fc, seq
from tr.core.shape import Shape
from tr.data.mnist import MNIST
from tr.task.extension import (
    IO,
    Arg,
    CallBinder,
    CpuBinder,
    CudaBinder,
    Expansion,
    ExternOp,
    Kernel,
    Layer,
    LayerKind,
    LayerProblem,
    OpDef,
    OpFamily,
    Step,
    launch_kernel,
    registered,
)
from tr.task.extension import seq as steps
from tr.task.feeder import ArrayFeeder

DATA = Path(__file__).resolve().parents[1] / "data" / "mnist"

# --- 1. catalogue entries ------------------------------------------------------------------------------------------
# Written so that no step cancels: with s = sqrt(x*x + b) and c = s + |x| (>= sqrt(b) > 0), y = c/2 for x >= 0 and
# b/(2c) for x < 0 (the same value: (x + s)(s - x) = b), and y' = (1 + x/s)/2 = y/s. The naive (x + s)/2 loses every
# digit for large negative x, where y ~ b/(4|x|). Finite for |x| < 1.8e19 (x*x overflows float32 beyond).
FWD = OpDef("squareplus_fwd", "squareplus", (Arg("x", "in"), Arg("y", "out")), ("b",),
            doc="y = (x + sqrt(x*x + b)) / 2 (b > 0): c/2 for x >= 0, b/(2c) for x < 0, c = sqrt(x*x + b) + |x|, "
                "each step rounded to float32")
BWD = OpDef("squareplus_bwd", "squareplus", (Arg("x", "in"), Arg("dy", "in"), Arg("dx", "out")), ("b",),
            inplace=(("dx", "dy"),), doc="dx = dy * y / sqrt(x*x + b), y as squareplus_fwd computes it")


# --- 2. rules: what both backends check, once --------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """What a squareplus call is: its element count and b."""

    n: int
    b: float


def _b(b: CallBinder) -> float:
    v = b.float_attr("b")
    if v <= 0:
        b.fail(f"attribute 'b' must be > 0, got {v}")
    return v


def fwd_rule(b: CallBinder) -> Call:
    n = b.same_numel("x", "y")
    b.expect_float("x", "y")
    return Call(n, _b(b))


def bwd_rule(b: CallBinder) -> Call:
    n = b.same_numel("x", "dy", "dx")
    b.expect_float("x", "dy", "dx")
    if b.dtype("dx") is not b.dtype("dy"):
        b.fail(f"dx is {b.dtype('dx').name} but dy is {b.dtype('dy').name}; expected one dtype")
    return Call(n, _b(b))


# --- 3. CPU: numpy views bound once, a closure per launch ----------------------------------------------------------
class _Squareplus:
    """y = squareplus(x) for one call, with its float32 scratch: s = sqrt(x*x + b) (left there for the gradient),
    c = s + |x| and the sign mask."""

    def __init__(self, b: CpuBinder, r: Call, x: np.ndarray) -> None:
        self.x, self.b = x, np.float32(r.b)
        self.s, self.c = b.scratch((r.n,)), b.scratch((r.n,))
        self.positive = b.scratch((r.n,), np.bool_)

    def compute(self, y: np.ndarray) -> None:
        x, s, c = self.x, self.s, self.c
        np.multiply(x, x, out=s)
        np.add(s, self.b, out=s)
        np.sqrt(s, out=s)  # s
        np.abs(x, out=c)
        np.add(s, c, out=c)  # c = s + |x|
        np.divide(self.b, c, out=y)  # b/c (x < 0) ...
        np.greater_equal(x, np.float32(0), out=self.positive)
        np.copyto(y, c, where=self.positive)  # ... or c (x >= 0)
        np.multiply(y, np.float32(0.5), out=y)


def fwd_cpu(b: CpuBinder, r: Call) -> Step | None:
    x, load_x = b.load("x", (r.n,))  # float32 views (FP16/BF16 tensors are widened into scratch)
    y, store_y = b.store("y", (r.n,))
    sp = _Squareplus(b, r, x)
    return steps(load_x, partial(sp.compute, y), store_y)


def bwd_cpu(b: CpuBinder, r: Call) -> Step | None:
    x, load_x = b.load("x", (r.n,))
    dy, load_dy = b.load("dy", (r.n,))
    dx, store_dx = b.store("dx", (r.n,))
    sp = _Squareplus(b, r, x)
    slope = b.scratch((r.n,))

    def run() -> None:
        sp.compute(slope)
        np.divide(slope, sp.s, out=slope)  # y' = y/s
        np.multiply(dy, slope, out=dx)  # dx may be dy (inplace): element by element, each read before written

    return steps(load_x, load_dy, run, store_dx)


# --- 4. CUDA: kernels compiled by CuPy, launched inside the captured step -----------------------------------------
# The same float32 steps as numpy (--fmad=false: a*b+c rounds twice), so both backends give the same bytes.
# Tensors are FP32, FP16 or BF16 (a dtype code each, tr.core.dtype.DType.code); the conversions are
# PTX instructions, so the source needs no CUDA header.
SOURCE = r"""
__device__ float load(const void* p, long long i, int dt) {
  if (dt == 0) return static_cast<const float*>(p)[i];
  unsigned short h = static_cast<const unsigned short*>(p)[i];
  if (dt == 1) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
  return __uint_as_float(static_cast<unsigned int>(h) << 16);
}

__device__ void store(void* p, long long i, int dt, float v) {
  if (dt == 0) { static_cast<float*>(p)[i] = v; return; }
  unsigned short h;
  if (dt == 1) asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  else asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  static_cast<unsigned short*>(p)[i] = h;
}

__device__ float squareplus(float x, float b, float* s) {  // the numpy steps above, one by one
  *s = sqrtf(x * x + b);
  const float c = *s + fabsf(x);
  return (x >= 0.0f ? c : b / c) * 0.5f;
}

extern "C" __global__ void squareplus_fwd(const void* x, void* y, long long n, float b, int x_dt, int y_dt) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float s;
    store(y, i, y_dt, squareplus(load(x, i, x_dt), b, &s));
  }
}

extern "C" __global__ void squareplus_bwd(const void* x, const void* dy, void* dx, long long n, float b, int x_dt,
                                          int dy_dt, int dx_dt) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float s;
    const float y = squareplus(load(x, i, x_dt), b, &s);
    store(dx, i, dx_dt, load(dy, i, dy_dt) * (y / s));
  }
}
"""
FWD_KERNEL = Kernel(SOURCE, "squareplus_fwd", ("--fmad=false",))
BWD_KERNEL = Kernel(SOURCE, "squareplus_bwd", ("--fmad=false",))
BLOCK = 256


def _grid(n: int) -> int:
    return max(1, min(-(-n // BLOCK), 4096))  # a grid-stride loop covers the rest


def _code(b: CudaBinder, name: str) -> np.int32:
    return np.int32(b.dtype(name).code)


def fwd_cuda(b: CudaBinder, r: Call) -> Any:  # the native op
    return launch_kernel(b, FWD_KERNEL, _grid(r.n), BLOCK,
                         ["x", "y", r.n, np.float32(r.b), _code(b, "x"), _code(b, "y")])


def bwd_cuda(b: CudaBinder, r: Call) -> Any:
    return launch_kernel(b, BWD_KERNEL, _grid(r.n), BLOCK,
                         ["x", "dy", "dx", r.n, np.float32(r.b), _code(b, "x"), _code(b, "dy"), _code(b, "dx")])


SQUAREPLUS_OPS = OpFamily("squareplus", (ExternOp(FWD, fwd_rule, fwd_cpu, fwd_cuda),
                                         ExternOp(BWD, bwd_rule, bwd_cpu, bwd_cuda)))


# --- 5. the layer kind and its BluePrint leaf ---------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Squareplus(Layer):
    """The BluePrint value: ``squareplus()`` or ``squareplus(b=1.0)``; its repr reads like that call."""

    b: float = 4.0


def squareplus(b: float = 4.0) -> Squareplus:
    return Squareplus(b)


@dataclass(frozen=True, slots=True)
class SquareplusParams:
    b: float = 4.0


class SquareplusKind(LayerKind):
    kinds = ("squareplus",)
    schema = SquareplusParams
    nodes = (Squareplus,)
    elementwise = True  # y = f(x) value by value: a bn after it normalises what came before it

    def expand(self, node: Squareplus, channels: int | None) -> Expansion:
        return Expansion("squareplus", {"b": node.b}, channels)

    def describe(self, layer) -> str:
        return f"squareplus b={layer.params['b']:g}"

    def check(self, layer) -> None:
        b = layer.params["b"]
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
            raise LayerProblem(f"squareplus b must be a finite number > 0, got {b!r}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def forward(self, layer, io: IO) -> None:
        io.op("squareplus_fwd", {"b": float(layer.params["b"])}, x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("squareplus_bwd", {"b": float(layer.params["b"])}, x=io.x[0], dy=io.dy, dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("squareplus_fwd", {"b": float(layer.params["b"])}, x=io.x[0], y=io.y)
        return io.y


# --- 6. registered for the run: an MLP on MNIST ------------------------------------------------------------------
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def mnist(root: Path, train: int, val: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The first ``train`` / ``val`` samples, normalised floats [N, 28, 28, 1]."""
    data = MNIST(root)

    def part(split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        s = data.load(split)
        x = (s.images[:n].astype(np.float32) / 255 - MNIST_MEAN) / MNIST_STD
        return x, s.labels[:n].astype(np.int32)

    return part("train", train), part("val", val)


def model():
    return seq(fc(256), squareplus(), fc(128), squareplus(b=1.0), fc(10))


def train(device: str = "cpu", epochs: int = 2, samples: int = 6000, batch: int = 100, amp: bool = False,
          data: Path = DATA) -> tuple[DeepLearningTask, TrainingResult]:
    """The MLP trained for ``epochs`` on the first ``samples`` MNIST images; call inside ``registered(...)``."""
    (x, y), val = mnist(data, samples, samples // 6)
    task = (DeepLearningTask(Settings().manual_seed(123).global_batch_size(batch).amp(amp))
            .device(device)
            .quiet()
            .model(model())
            .optimizer(SGD().momentum(0.9))
            .scheduler(ConstantLR(0.05))
            .total_epochs(epochs)
            .data(ArrayFeeder((x, y), val, batch, seed=1, num_classes=10)))
    task.compile()
    return task, task.run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train", type=int, default=6000, help="training samples (the first ones)")
    ap.add_argument("--amp", action="store_true", help="FP16 activations (the kernels' FP16 path)")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    with registered(SQUAREPLUS_OPS, SquareplusKind()):
        task, result = train(args.device, args.epochs, args.train, amp=args.amp, data=args.data)
    history = result.history
    print(json.dumps({"device": task.backend.name, "epochs": len(history),
                      "train_loss": [round(r.train_loss, 4) for r in history],
                      "top1": [round(r.top1, 4) for r in history]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TrError as e:  # a clear one-line message for bad input (no device, no CuPy, missing data)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
