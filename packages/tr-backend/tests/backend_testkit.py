"""Test helpers for tr.backend: lay DTensors out in an arena without tr.graph, run op calls, compare.

SimpleArena places tensors one after another at 256-byte aligned offsets (each takes its
``slot_bytes_for`` slot), region by region in layout order (tr.core.memory.Region's order), and builds the
matching ArenaLayout (the regions that hold a tensor, as a memory plan's layout does), so span ops can be tested
over real region ranges.

The groups below restate the ones tr.graph declares (tr/graph/layers/groups.py and tr.graph.compiler's input and
per-dtype groups): these tests stay below tr.graph, and a span selects by the traits, which are the same here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tr.backend.cpu import CpuBackend, CpuGraph
from tr.core.dtype import DType
from tr.core.memory import Group, Region, Role, dtype_group
from tr.core.ops import CATALOGUE, OpCall
from tr.core.shape import Shape
from tr.tensor.dtensor import DTensor, slot_bytes_for
from tr.tensor.layout import ArenaLayout

# parameter groups (roles PARAM, EMA, EMA_FP16, AMP_COPY, GRAD, GRAD_FP16, MOMENT1, MOMENT2, TRUST_RATIO)
FC_W = Group("fc_w", decayed=True, amp_copy=True)
FC_B = Group("fc_b", amp_copy=True)
FIRST_CONV = Group("first_conv", decayed=True, amp_copy=True, fp16_grad=True)
DEEP_CONV = Group("deep_conv", decayed=True, amp_copy=True, fp16_grad=True, early=True)
BN_W = Group("bn_w", norm=True)
BN_B = Group("bn_b", norm=True)
# running statistics (RUNNING, RUNNING_NEXT) and folded inference parameters (FOLDED)
MEAN, VAR = Group("mean", order=0), Group("var", order=1)
FOLDED_BIAS, FOLDED_SCALE = Group("bias", order=0), Group("scale", order=1)
# the double-buffered batch (INPUT)
A_LABEL, A_DATA = Group("a_label", order=0), Group("a_data", order=1)
B_LABEL, B_DATA = Group("b_label", order=2), Group("b_data", order=3)
# per-dtype groups (SCALAR, TEMP, ACTIVATION)
FP32, FP16, INT32, INT8 = (dtype_group(d) for d in (DType.FP32, DType.FP16, DType.INT32, DType.INT8))

SCALAR_FP32, SCALAR_INT32 = Region(Role.SCALAR, FP32), Region(Role.SCALAR, INT32)
TEMP_FP32 = Region(Role.TEMP, FP32)
ACTIVATION_FP32 = Region(Role.ACTIVATION, FP32)  # features and their gradients
MASK, RESULT, RESULT_SUM = Region(Role.MASK), Region(Role.RESULT), Region(Role.RESULT_SUM)


class SimpleArena:
    def __init__(self) -> None:
        self.tensors: dict[str, DTensor] = {}
        self._bounds: dict[Region, list[int]] = {}
        self._cursor = 0
        self._last: Region | None = None
        self.backend: CpuBackend | None = None

    def add(self, name: str, shape: Iterable[int] | Shape, dtype: str | DType = "fp32",
            region: Region = TEMP_FP32) -> DTensor:
        if self.backend is not None:
            raise RuntimeError("the arena is already allocated")
        if self._last is not None and region < self._last:
            raise ValueError(f"add tensors in region order: {region.name} after {self._last.name}")
        shp = shape if isinstance(shape, Shape) else Shape.of(*tuple(shape))
        dt = DType.parse(dtype)
        self._last = region
        bounds = self._bounds.setdefault(region, [self._cursor, self._cursor])
        t = DTensor(len(self.tensors), name, region, shp, dt, slot_bytes_for(shp, dt), offset=self._cursor)
        self._cursor += t.slot_bytes
        bounds[1] = self._cursor
        self.tensors[name] = t
        return t

    def layout(self) -> ArenaLayout:
        # add() keeps the regions in layout order, each a contiguous run of its tensors
        layout = ArenaLayout(self._cursor, {r: (lo, hi) for r, (lo, hi) in self._bounds.items()})
        layout.validate()
        return layout

    def allocate(self, **options: Any) -> CpuBackend:
        self.backend = CpuBackend(**options)
        self.backend.allocate(self.layout())
        return self.backend

    def __getitem__(self, name: str) -> DTensor:
        return self.tensors[name]


def op(name: str, layer: int = -1, label: str = "", **kw: Any) -> OpCall:
    """OpCall.make with arguments and attributes given together as keywords."""
    names = {a.name for a in CATALOGUE[name].args}
    args = {k: v for k, v in kw.items() if k in names}
    attrs = {k: v for k, v in kw.items() if k not in names}
    return OpCall.make(name, args, attrs, layer=layer, label=label)


def run(be: CpuBackend, *calls: OpCall, name: str = "test") -> CpuGraph:
    g = be.capture(name, calls)
    be.launch(g)
    return g


def assert_close(actual: Any, expected: Any, tol: float = 1e-5) -> None:
    """max |actual - expected| <= tol * max(1, max |expected|): error relative to the data's scale."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
    err = float(np.max(np.abs(a - e))) if e.size else 0.0
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol:.1g} * {scale:.3g}"


# --- 16-bit floats: FP16 (numpy float16) and BF16 (its uint16 bit patterns, tr.core.bf16) -------------------------
#
# The rule for an op in FP16 or BF16 (AMP): it reads the rounded inputs, computes in float32 and rounds its result
# once to the output's dtype (the CPU Binder's store, CUDA's ``from_f``). The reference is torch in float32 from the
# same rounded inputs, its result rounded to the dtype by torch: exact where both evaluate the same float32
# operations in the same order, else within one unit in the last place of the dtype (two float32 evaluations of one
# value differ by a few float32 ulps, so their roundings differ by at most one ulp of the output), plus a floor of
# a few 2^-24 * max|e| where terms cancel to a value far below the tensor's scale (there float32 rounding of the
# terms is many ulps of the small result).

HALF_DTYPES = ("fp16", "bf16")
_BITS = {"fp16": (10, -14), "bf16": (7, -126)}  # explicit mantissa bits, smallest normal exponent


def as_dtype(x: Any, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(what a ``dtype`` tensor holds for the values ``x`` rounded once from float32: float32, float16 or BF16 bit
    patterns, the array to ``write``; those values as float32)."""
    from tr.core.bf16 import bf16_bits, bf16_values

    x32 = np.asarray(x, np.float32)
    if dtype == "bf16":
        bits = bf16_bits(x32)
        return bits, bf16_values(bits)
    if dtype == "fp16":
        h = x32.astype(np.float16)
        return h, h.astype(np.float32)
    return x32, x32.copy()


def values(a: Any) -> np.ndarray:
    """float64 values of an array read from a tensor (BF16 bit patterns widened)."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def rounded(e: Any, dtype: str) -> np.ndarray:
    """float64 values of ``e`` (a float32 evaluation: torch tensor or array) rounded once to ``dtype`` by torch."""
    import torch

    t = e.detach() if isinstance(e, torch.Tensor) else torch.from_numpy(np.asarray(e, np.float32))
    t = t.to(torch.float32)
    if dtype in _BITS:
        t = t.to(torch.float16 if dtype == "fp16" else torch.bfloat16)
    return t.to(torch.float64).numpy()


def ulp(e: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` values at |e| (its subnormal spacing below the normal range)."""
    mant, lowest = _BITS[dtype]
    exp = np.floor(np.log2(np.where(e != 0, np.abs(e), 1.0)))
    return 2.0 ** (np.maximum(exp, lowest) - mant)


def assert_rounded(actual: Any, expected: Any, dtype: str) -> None:
    """``actual`` (read from a ``dtype`` tensor) is ``expected`` rounded once to ``dtype``, exactly."""
    np.testing.assert_array_equal(values(actual), rounded(expected, dtype))


def assert_within_ulp(actual: Any, expected: Any, dtype: str, floor: float = 0.0) -> float:
    """|a - e| <= ulp(e) + floor * 2^-24 * max|e| everywhere, ``e`` the float32 ``expected`` rounded to ``dtype``;
    returns the largest |a - e| in ulps of e (at most 1 where ``floor`` is 0)."""
    a, e = values(actual), rounded(expected, dtype)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    u = ulp(e, dtype)
    bound = u + floor * 2.0 ** -24 * float(np.abs(e).max(initial=0.0))
    err = np.abs(a - e)
    assert np.all(err <= bound), (f"{int((err > bound).sum())} elements past one {dtype} ulp"
                                  f" (+ {floor} * 2^-24 * max|e|): worst {float((err / u).max()):.2f} ulps")
    return float((err / u).max(initial=0.0))


def nchw(a: np.ndarray, dtype: Any = None) -> Any:
    """NHWC numpy -> NCHW torch tensor (float64 unless ``dtype``) that requires grad."""
    import torch

    return torch.tensor(np.ascontiguousarray(a.transpose(0, 3, 1, 2)), dtype=dtype or torch.float64,
                        requires_grad=True)


def nhwc(t: Any) -> np.ndarray:
    return t.detach().numpy().transpose(0, 2, 3, 1)


# --- CUDA builders without a device ---------------------------------------------------------------------------

def record_maps(record: Any) -> tuple[str, dict, dict, dict]:
    """A native op's argument record (tr.backend._native.ScaleFwdArgs, ...) as (name, ptrs, ints, floats): a
    tensor field gives its address under its name and its dtype code under ``<name>_dt``, a pointer its address,
    an integer, bool or code field an int, a float field a float, a list field a list; absent optional fields are
    left out."""
    ptrs: dict = {}
    ints: dict = {}
    floats: dict = {}
    for name, value in record.fields().items():
        kind = type(record).field_types[name]
        if value is None or (kind == "ptr?" and value == 0):
            continue
        if kind in ("tensor", "tensor?"):
            ptrs[name] = value.ptr
            ints[f"{name}_dt"] = value.dt
        elif kind in ("ptr", "ptr?"):
            ptrs[name] = value
        elif kind in ("f64", "f64s"):
            floats[name] = value
        else:
            ints[name] = int(value) if kind == "bool" else value
    return record.op, ptrs, ints, floats


class RecordingNative:
    """The extension's make_op, recording: a builder's native op comes back as (name, ptrs, ints, floats)."""

    def make_op(self, ctx: Any, *args: Any) -> tuple:
        if len(args) == 1:  # a typed record
            return record_maps(args[0])
        name, ptrs, ints, floats = args
        return name, ptrs, ints, floats


class RecordingBackend:
    """What a CUDA builder reads from a CudaBackend at capture, and no device."""

    arena_ptr = 1 << 40
    use_tf32 = False
    ctx = None
    device = 0
    native = RecordingNative()

    def __init__(self, layout: Any = None) -> None:
        self.layout = layout


def build_cuda(call: OpCall, layout: Any = None) -> Any:
    """The CUDA builder's native op(s) for ``call``, recorded."""
    from tr.backend.cuda.binder import CudaBinder
    from tr.backend.registry import op_impls

    return op_impls("cuda")[call.op](CudaBinder(RecordingBackend(layout), "g", 0, call, CATALOGUE[call.op]))
