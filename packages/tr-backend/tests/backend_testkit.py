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


def nchw(a: np.ndarray) -> Any:
    """NHWC numpy -> NCHW float64 torch tensor that requires grad."""
    import torch

    return torch.tensor(np.ascontiguousarray(a.transpose(0, 3, 1, 2)), dtype=torch.float64, requires_grad=True)


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
