"""The CUDA batch-norm builders (tr/backend/cuda/ops/bn.py, bn_pool.py) on a machine without a GPU.

A fake backend records the native op's record (backend_testkit.RecordingNative) instead of making it, so what
each builder passes is checked in CI: every tensor with its dtype code, an optional tensor only when the kernels
read it (z: the residual; beta or y: the activation mask's source; dz; dy2), the act and mask codes
(tr.core.ops.BN_ACTIVATION_CODES, BN_MASK_CODES), the sizes and the float attributes.
"""

from __future__ import annotations

import pytest
from backend_testkit import RecordingBackend, SimpleArena, build_cuda, op

from tr.core.dtype import DType
from tr.core.ops import BN_ACTIVATION_CODES, BN_MASK_CODES

FP32, FP16 = DType.FP32.code, DType.FP16.code
SHAPE = (2, 4, 6, 24)  # m = 48 rows
FEAT = ("x", "z", "y", "dy", "dx", "dz", "dy2")
VEC = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma",
       "dbeta", "scale", "bias", "mean", "var")
_FWD = ("x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "y", "saved_mean", "saved_inv_std")
_BWD = ("x", "dy", "dx", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta")


@pytest.fixture(scope="module")
def a() -> SimpleArena:
    arena = SimpleArena()
    for name in FEAT:
        arena.add(name, SHAPE, "fp16")
    for name in VEC:
        arena.add(name, (SHAPE[-1],))
    arena.add("pooled", (2, 2, 3, 24), "fp16")
    arena.add("mask", (2, 2, 3, 24), "int8")
    return arena


def _addr(a: SimpleArena, name: str) -> int:
    return RecordingBackend.arena_ptr + a[name].offset


def _ptrs(a: SimpleArena, *names: str) -> dict[str, int]:
    return {n: _addr(a, n) for n in names}


def _fwd(a: SimpleArena, **kw) -> tuple:
    return build_cuda(op("bn_fwd", **{n: a[n] for n in _FWD}, momentum=0.25, eps=1e-3, **kw))


def _bwd(a: SimpleArena, **kw) -> tuple:
    return build_cuda(op("bn_bwd", **{n: a[n] for n in _BWD}, eps=1e-3, **kw))


def test_bn_fwd_passes_every_tensor_the_act_code_and_z_only_as_the_residual(a):
    name, ptrs, ints, floats = _fwd(a, z=a["z"], activation="relu6")
    assert name == "bn_fwd" and ptrs == _ptrs(a, *_FWD, "z")
    assert (ints["m"], ints["c"], ints["act"]) == (48, 24, BN_ACTIVATION_CODES["relu6"])
    assert (ints["x_dt"], ints["z_dt"], ints["gamma_dt"]) == (FP16, FP16, FP32)
    assert floats == {"momentum": 0.25, "eps": 1e-3}
    _, ptrs, ints, _ = _fwd(a, activation="silu")
    assert ptrs == _ptrs(a, *_FWD) and "z_dt" not in ints and ints["act"] == BN_ACTIVATION_CODES["silu"]
    assert _fwd(a)[2]["act"] == BN_ACTIVATION_CODES[None]


def test_bn_bwd_passes_the_mask_s_source_and_nothing_the_kernels_do_not_read(a):
    # relu recomputed from x: beta, not y
    _, ptrs, ints, floats = _bwd(a, beta=a["beta"], activation="relu")
    assert ptrs == _ptrs(a, *_BWD, "beta") and ints["mask"] == BN_MASK_CODES["x", "relu"] and floats == {}
    assert (ints["m"], ints["c"], ints["dx_dt"], ints["dgamma_dt"]) == (48, 24, FP16, FP32)
    # relu6 read from y, with the residual's gradient and a second gradient: beta is not passed though given
    _, ptrs, ints, _ = _bwd(a, beta=a["beta"], y=a["y"], dz=a["dz"], dy2=a["dy2"], activation="relu6")
    assert ptrs == _ptrs(a, *_BWD, "y", "dz", "dy2") and ints["mask"] == BN_MASK_CODES["y", "relu6"]
    # no activation: no mask, so neither beta nor y
    _, ptrs, ints, _ = _bwd(a, beta=a["beta"], y=a["y"])
    assert ptrs == _ptrs(a, *_BWD) and ints["mask"] == BN_MASK_CODES["", None]
    _, ptrs, ints, _ = _bwd(a, beta=a["beta"], activation="silu")
    assert ptrs == _ptrs(a, *_BWD, "beta") and ints["mask"] == BN_MASK_CODES["x", "silu"]


def test_bn_inf_and_bn_update_eq(a):
    name, ptrs, ints, floats = build_cuda(op("bn_inf", x=a["x"], scale=a["scale"], bias=a["bias"], y=a["y"],
                                             z=a["z"], activation="relu"))
    assert name == "bn_inf" and ptrs == _ptrs(a, "x", "scale", "bias", "y", "z") and floats == {}
    assert (ints["m"], ints["c"], ints["act"]) == (48, 24, BN_ACTIVATION_CODES["relu"])
    _, ptrs, _, _ = build_cuda(op("bn_inf", x=a["x"], scale=a["scale"], bias=a["bias"], y=a["y"]))
    assert "z" not in ptrs
    eq = ("gamma", "beta", "mean", "var", "scale", "bias")
    name, ptrs, ints, floats = build_cuda(op("bn_update_eq", **{n: a[n] for n in eq}, eps=1e-4))
    assert name == "bn_update_eq" and ptrs == _ptrs(a, *eq)
    assert ints == {"c": 24, **{f"{n}_dt": FP32 for n in eq}} and floats == {"eps": 1e-4}


def test_bn_maxpool_builders_pass_the_rows_and_the_window(a):
    window = {"n": 2, "h": 4, "w": 6, "c": 24, "kh": 2, "kw": 2, "sh": 2, "sw": 2, "ph": 0, "pw": 0, "p": 2, "q": 3}
    fwd = ("x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std")
    name, ptrs, ints, floats = build_cuda(op("bn_maxpool_fwd", **{n: a[n] for n in fwd}, y=a["pooled"],
                                             mask=a["mask"], kernel=2, stride=2, momentum=0.5, eps=1e-4))
    assert name == "bn_maxpool_fwd" and ptrs == {**_ptrs(a, *fwd), "y": _addr(a, "pooled"), "mask": _addr(a, "mask")}
    assert {k: ints[k] for k in ("m", *window)} == {"m": 48, **window} and ints["mask_dt"] == DType.INT8.code
    assert floats == {"momentum": 0.5, "eps": 1e-4}
    bwd = ("x", "gamma", "beta", "saved_mean", "saved_inv_std", "dgamma", "dbeta", "dx")
    name, ptrs, ints, floats = build_cuda(op("bn_maxpool_bwd", **{n: a[n] for n in bwd}, dy=a["pooled"],
                                             mask=a["mask"], kernel=2, stride=2))
    assert name == "bn_maxpool_bwd" and ptrs == {**_ptrs(a, *bwd), "dy": _addr(a, "pooled"), "mask": _addr(a, "mask")}
    assert {k: ints[k] for k in ("m", *window)} == {"m": 48, **window} and floats == {}
