"""tr.backend.cuda.extern_kernel on a machine without a GPU, and the registry's side of op families made outside
tr: a fake backend records the native op ``extern_kernel`` a builder asks for (its function handle, geometry and
packed parameters) instead of making it; the extension itself is checked where it is compiled (the native op
exists) and, on a GPU, by tests-integration/test_custom_op.py."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np
import pytest
from backend_testkit import RecordingBackend, SimpleArena, op

from tr.backend import registry
from tr.backend.cuda import extern_kernel as ek
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.native import native_module
from tr.core.errors import BackendError, ConfigError
from tr.core.ops import CATALOGUE, Arg, OpDef, register_op, unregister_op

CUBE = OpDef("cube_fwd", "cube", (Arg("x", "in"), Arg("y", "out"), Arg("w", "in", optional=True)), ("scale",))


_Backend = RecordingBackend


@pytest.fixture
def cube():
    register_op(CUBE)
    yield
    unregister_op("cube_fwd")


@pytest.fixture
def binder(cube):
    a = SimpleArena()
    a.add("x", (4, 1, 1, 8))
    a.add("y", (4, 1, 1, 8), "fp16")
    backend = _Backend(a.layout())
    call = op("cube_fwd", x=a["x"], y=a["y"], scale=2.0)
    return CudaBinder(backend, "g", 0, call, CATALOGUE["cube_fwd"]), a


def test_launch_kernel_packs_the_arguments_in_order(binder):
    b, a = binder
    name, ptrs, ints, floats = ek.launch_kernel(b, 0x1234, 3, (128, 2), ["x", "y", 32, np.int32(7), np.float32(0.5),
                                                                        np.int64(-9), 2.5, np.float64(1e300)],
                                                shared=1024)
    assert name == "extern_kernel"
    base = _Backend.arena_ptr
    assert ptrs == {"function": 0x1234}
    assert ints == {"grid_x": 3, "grid_y": 1, "grid_z": 1, "block_x": 128, "block_y": 2, "block_z": 1, "shared": 1024,
                    "param_types": [ek.POINTER, ek.POINTER, ek.INT64, ek.INT32, ek.FLOAT32, ek.INT64, ek.FLOAT64,
                                    ek.FLOAT64],
                    "param_ints": [base + a["x"].offset, base + a["y"].offset, 32, 7, 0, -9, 0, 0]}
    assert floats == {"param_floats": [0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 2.5, 1e300]}


def test_a_kernel_without_parameters_has_empty_lists(binder):
    b, _ = binder
    _, _, ints, floats = ek.launch_kernel(b, 0x1234, 1, 32, [])
    assert (ints["param_types"], ints["param_ints"], floats["param_floats"]) == ([], [], [])


def test_an_address_past_2_63_keeps_its_64_bits(binder, monkeypatch):
    """param_ints holds int64: an address with the top bit set passes as its two's complement (the same bits)."""
    b, a = binder
    monkeypatch.setattr(b.backend, "arena_ptr", (1 << 63) + (1 << 40))
    _, _, ints, _ = ek.launch_kernel(b, 0x1234, 1, 32, ["y"])
    assert ints["param_ints"] == [(1 << 63) + (1 << 40) + a["y"].offset - (1 << 64)]
    assert ints["param_ints"][0] % (1 << 64) == b.ptr("y")


@pytest.mark.parametrize("kw, message", [
    ({"grid": 0}, "grid must be an int >= 1 or a tuple of 1 to 3 of them, got 0"),
    ({"grid": (1, 2, 3, 4)}, "grid must be"),
    ({"block": (32, True)}, "block must be"),
    ({"shared": -1}, "shared must be an int >= 0"),
    ({"args": ["z"]}, "kernel argument 0 names 'z', which is not an argument of cube_fwd"),
    ({"args": ["w"]}, "kernel argument 0 names 'w', which this call leaves out"),
    ({"args": [True]}, "kernel argument 0 is bool True; expected an argument name"),
    ({"args": [1 << 63]}, "does not fit a long long"),
    ({"args": "xy"}, "args must be a list of the kernel's arguments"),
    ({"kernel": 0}, "kernel handle 0x0 is not a CUfunction"),
])
def test_bad_launch_arguments_are_refused_naming_the_op(binder, kw, message):
    b, _ = binder
    call: dict[str, Any] = {"kernel": 0x10, "grid": 1, "block": 32, "args": ["x"], **kw}
    with pytest.raises(ConfigError, match=r"graph 'g', op #0 cube_fwd .*" + message):
        ek.launch_kernel(b, call.pop("kernel"), call.pop("grid"), call.pop("block"), **call)


def test_a_kernel_without_cupy_is_a_clear_error(binder, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    b, _ = binder
    k = ek.Kernel('extern "C" __global__ void cube(float* x) {}', "cube")
    with pytest.raises(BackendError, match=r"compiling kernel 'cube' needs CuPy, which is not installed .*"
                                           r"tr-backend\[cupy\]"):
        ek.launch_kernel(b, k, 1, 32, ["x"])
    with pytest.raises(BackendError, match="needs CuPy"):
        ek.launch_kernel(b, object(), 1, 32, ["x"])


def test_cupy_s_function_objects_are_kept_alive_with_the_backend(binder, monkeypatch):
    b, _ = binder

    class Function:  # what cupy.RawKernel.kernel gives: .ptr is the CUfunction
        ptr = 0xBEEF

    monkeypatch.setattr(ek.Kernel, "function", lambda self, device: Function())
    k = ek.Kernel('extern "C" __global__ void cube(float* x) {}', "cube")
    _, ptrs, _, _ = ek.launch_kernel(b, k, 1, 32, ["x"])
    assert ptrs["function"] == 0xBEEF
    assert [type(f).__name__ for f in ek._KEEP[b.backend]] == ["Function"]


@pytest.mark.parametrize("args, message", [
    (("", "k"), "Kernel code must be CUDA C\\+\\+ source"),
    (("void k() {}", "k k"), "Kernel name must be the __global__ function's name"),
    (("void k() {}", "k", "-O3"), "Kernel options must be a sequence of str"),
    (("void other() {}", "k"), "Kernel code defines no function 'k'"),
])
def test_a_malformed_kernel_is_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        ek.Kernel(*args)


def test_the_extension_binds_the_native_op_s_record():
    """The record is bound in every build (make_op, which launches it, in CUDA builds): its lists keep their
    entries, an address with its top bit set (as int64) among them."""
    native = native_module()
    if native is None:
        pytest.skip("the extension is not built")
    assert "extern_kernel" in native.NATIVE_OPS
    rec = native.ExternKernelArgs(function=0x10, grid_x=1, grid_y=1, grid_z=1, block_x=32, block_y=1, block_z=1,
                                  shared=0, param_types=[ek.POINTER, ek.INT32, ek.FLOAT32],
                                  param_ints=[-(1 << 63), 7, 0], param_floats=[0.0, 0.0, 0.5])
    assert rec.fields()["param_ints"] == [-(1 << 63), 7, 0] and rec.param_floats == [0.0, 0.0, 0.5]
    assert rec.function == 0x10


# --- the registry: families made outside tr ----------------------------------------------------------------------

def test_implementations_of_an_outside_family_register_and_unregister(cube):
    def impl(b):
        return None

    registry.register_op("cpu", "cube_fwd")(impl)
    assert registry.op_impls("cpu")["cube_fwd"] is impl and registry.missing_ops("cpu") == []
    registry.import_families("tr.backend.cpu.ops")  # tr's families only: "cube" has no module there
    assert registry.unregister_op("cpu", "cube_fwd") is impl
    assert registry.missing_ops("cpu") == ["cube_fwd"]
    with pytest.raises(BackendError, match="cpu has no implementation of 'cube_fwd' to remove"):
        registry.unregister_op("cpu", "cube_fwd")


def test_the_registry_refuses_what_it_cannot_file(cube):
    with pytest.raises(BackendError, match="cpu op 'copy' is tr's own"):
        registry.unregister_op("cpu", "copy")
    with pytest.raises(ConfigError, match="unknown backend 'gpu'"):
        registry.register_op("gpu", "cube_fwd")
    with pytest.raises(BackendError, match="the cpu implementation of 'cube_fwd' must be callable, got str"):
        registry.register_op("cpu", "cube_fwd")("impl")


def test_import_families_imports_tr_s_families_only(cube, monkeypatch):
    imported: list[str] = []
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name))
    registry.import_families("pkg")
    assert imported == [f"pkg.{f}" for f in sorted(registry.TR_FAMILIES)] and "pkg.cube" not in imported
