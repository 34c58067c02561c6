"""The CUDA layer-norm family: its builders on a machine without a GPU, and its kernels against the CPU backend.

Builders (no device): tr/backend/cuda/ops/layernorm.py runs tr.backend.rules.layernorm and asks the extension
for native op ``ln_fwd`` / ``ln_bwd``; a fake backend records the request (as test_cuda_builders_on_cpu.py does),
so the sizes, the tensors passed (optional ones only when given) and their dtype codes are checked in CI. A bad
call is refused by both backends with one message.

Kernels (gpu-marked: csrc/ops/layernorm.cu on the device against the CPU backend, same inputs): the float32
expressions are the CPU's operation for operation and the float64 row sums differ only in order, so FP32 y and
dx agree within 1e-5 of the data's scale, FP16/BF16 within one rounding of the output (2e-3 / 1.6e-2),
dgamma/dbeta within 1e-4 (the GPU adds four rows in float before float64, as batch norm's column sums do);
warp rows (C <= 1024) and block rows, the 16-byte vector path and the scalar one. (Written without a GPU: not
yet run on one.)
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import RecordingBackend, SimpleArena, build_cuda, op
from cuda_testkit import Twin, close

from tr.backend.checks import where
from tr.core.dtype import DType
from tr.core.errors import TrError
from tr.core.ops import OpCall

FP32, FP16, BF16 = (d.code for d in (DType.FP32, DType.FP16, DType.BF16))


_Backend = RecordingBackend
build = build_cuda


def _arena(shape: tuple[int, int, int, int], dtype: str) -> SimpleArena:
    n, h, w, c = shape
    a = SimpleArena()
    for name in ("x", "y", "dy", "dx"):
        a.add(name, shape, dtype)
    for name in ("gamma", "beta", "dgamma", "dbeta"):
        a.add(name, (1, 1, 1, c))
    for name in ("saved_mean", "saved_rstd"):
        a.add(name, (n, h, w, 1))
    return a


def _addr(a: SimpleArena, name: str) -> int:
    return _Backend.arena_ptr + a[name].offset


def test_ln_fwd_builder_passes_rows_channels_eps_and_the_statistics_only_in_training():
    a = _arena((4, 3, 5, 13), "bf16")
    name, ptrs, ints, floats = build(op("ln_fwd", x=a["x"], gamma=a["gamma"], beta=a["beta"], y=a["y"],
                                        saved_mean=a["saved_mean"], saved_rstd=a["saved_rstd"], eps=1e-6))
    assert name == "ln_fwd"
    assert ptrs == {k: _addr(a, k) for k in ("x", "gamma", "beta", "y", "saved_mean", "saved_rstd")}
    assert ints == {"rows": 60, "c": 13, "x_dt": BF16, "y_dt": BF16, "gamma_dt": FP32, "beta_dt": FP32,
                    "saved_mean_dt": FP32, "saved_rstd_dt": FP32}
    assert floats == {"eps": 1e-6}
    name, ptrs, ints, floats = build(op("ln_fwd", x=a["x"], gamma=a["gamma"], beta=a["beta"], y=a["y"]))
    assert name == "ln_fwd" and set(ptrs) == {"x", "gamma", "beta", "y"}  # inference: no statistics
    assert (ints["rows"], ints["c"]) == (60, 13) and floats == {"eps": 1e-5}  # the catalogue's default eps


def test_ln_bwd_builder_passes_dx_only_when_given():
    a = _arena((2, 1, 1, 768), "fp16")
    args = dict(x=a["x"], gamma=a["gamma"], dy=a["dy"], saved_mean=a["saved_mean"], saved_rstd=a["saved_rstd"],
                dgamma=a["dgamma"], dbeta=a["dbeta"])
    name, ptrs, ints, floats = build(op("ln_bwd", dx=a["dx"], **args))
    assert name == "ln_bwd" and floats == {}
    assert ptrs == {k: _addr(a, k) for k in ("x", "gamma", "dy", "saved_mean", "saved_rstd", "dgamma", "dbeta", "dx")}
    assert (ints["rows"], ints["c"], ints["x_dt"], ints["dy_dt"], ints["dx_dt"]) == (2, 768, FP16, FP16, FP16)
    assert (ints["dgamma_dt"], ints["dbeta_dt"], ints["saved_rstd_dt"]) == (FP32, FP32, FP32)
    _, ptrs, ints, _ = build(op("ln_bwd", **args))  # a first layer: no input gradient
    assert "dx" not in ptrs and "dx_dt" not in ints and ptrs["dgamma"] == _addr(a, "dgamma")


def test_the_fused_residual_join_and_skip_gradient_are_passed_when_given():
    a = _arena((2, 1, 17, 64), "bf16")
    a.add("z", (2, 1, 17, 64), "bf16")
    a.add("sum", (2, 1, 17, 64), "bf16")
    a.add("dx2", (2, 1, 17, 64), "bf16")
    fwd = dict(x=a["x"], gamma=a["gamma"], beta=a["beta"], y=a["y"], saved_mean=a["saved_mean"],
               saved_rstd=a["saved_rstd"], z=a["z"])
    name, ptrs, ints, _ = build(op("ln_fwd", sum=a["sum"], **fwd))
    assert name == "ln_fwd" and (ptrs["z"], ptrs["sum"]) == (_addr(a, "z"), _addr(a, "sum"))
    assert (ints["z_dt"], ints["sum_dt"], ints["rows"], ints["c"]) == (BF16, BF16, 34, 64)
    _, ptrs, ints, _ = build(op("ln_fwd", **fwd))  # the sum not kept (inference: nothing else reads it)
    assert "sum" not in ptrs and ptrs["z"] == _addr(a, "z")
    _, ptrs, ints, _ = build(op("ln_bwd", x=a["sum"], gamma=a["gamma"], dy=a["dy"], saved_mean=a["saved_mean"],
                                saved_rstd=a["saved_rstd"], dgamma=a["dgamma"], dbeta=a["dbeta"], dx=a["dx"],
                                dx2=a["dx2"]))
    assert (ptrs["x"], ptrs["dx"], ptrs["dx2"], ints["dx2_dt"]) == (_addr(a, "sum"), _addr(a, "dx"), _addr(a, "dx2"),
                                                                   BF16)
    _, ptrs, _, _ = build(op("ln_bwd", x=a["sum"], gamma=a["gamma"], dy=a["dy"], saved_mean=a["saved_mean"],
                             saved_rstd=a["saved_rstd"], dgamma=a["dgamma"], dbeta=a["dbeta"], dx=a["dx"]))
    assert "dx2" not in ptrs


def _refusal(backend: str, a: SimpleArena, call: OpCall) -> str:
    try:
        if backend == "cuda":
            build(call)
        else:
            a.allocate().capture("g", [call])
    except TrError as e:
        return str(e).removeprefix(where("g", 0, call) + ": ")
    raise AssertionError(f"{backend} accepted {call.op}")


def test_both_backends_refuse_a_bad_call_with_one_message():
    a = _arena((2, 2, 2, 6), "fp16")
    a.add("dy_bf16", (2, 2, 2, 6), "bf16")
    bad_gamma = op("ln_fwd", x=a["x"], gamma=a["saved_mean"], beta=a["beta"], y=a["y"])
    half_stats = op("ln_fwd", x=a["x"], gamma=a["gamma"], beta=a["beta"], y=a["y"], saved_rstd=a["saved_rstd"])
    mixed = op("ln_bwd", x=a["x"], gamma=a["gamma"], dy=a["dy_bf16"], saved_mean=a["saved_mean"],
               saved_rstd=a["saved_rstd"], dgamma=a["dgamma"], dbeta=a["dbeta"])
    lone_sum = op("ln_fwd", x=a["x"], gamma=a["gamma"], beta=a["beta"], y=a["y"], sum=a["dy"])
    lone_dx2 = op("ln_bwd", x=a["x"], gamma=a["gamma"], dy=a["dy"], saved_mean=a["saved_mean"],
                  saved_rstd=a["saved_rstd"], dgamma=a["dgamma"], dbeta=a["dbeta"], dx2=a["dx"])
    for call, says in ((bad_gamma, "gamma [2,2,2,1] must be [1,1,1,6]"),
                       (lone_sum, "sum is given without z"), (lone_dx2, "dx2 is given without dx"),
                       (half_stats, "saved_rstd is given without saved_mean"),
                       (mixed, "dy is BF16 but x is FP16; a layer-norm call has one feature dtype")):
        cuda, cpu = _refusal("cuda", a, call), _refusal("cpu", a, call)
        assert cuda == cpu and cuda.startswith(says), (cuda, cpu)


# --- the kernels on the device, against the CPU backend ---------------------------------------------------------
TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}
SHAPES = [(2, 3, 5, 3), (4, 7, 9, 24), (2, 5, 7, 13), (8, 1, 197, 768), (3, 2, 2, 1000), (2, 3, 1, 1536),
          (1, 1, 1, 4099), (64, 1, 1, 1)]
IDS = ["c3", "c24-vec", "c13-scalar", "vit-c768", "c1000", "c1536-block-row", "c4099-one-row", "c1"]


def _twin(shape: tuple[int, int, int, int], dtype: str) -> Twin:
    n, h, w, c = shape
    tw = Twin()
    for name in ("x", "y", "dy", "dx"):
        tw.add(name, shape, dtype)
    for name in ("gamma", "beta", "dgamma", "dbeta"):
        tw.add(name, (1, 1, 1, c))
    for name in ("saved_mean", "saved_rstd"):
        tw.add(name, (n, h, w, 1))
    tw.allocate()
    tw.write("x", tw.fill("x") * 3 + 1)
    for name in ("dy", "beta"):
        tw.fill(name)
    tw.fill("gamma", 0.5, 1.5)
    return tw


def _calls(t: dict, dx: bool = True) -> tuple[OpCall, OpCall]:
    fwd = op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["y"], saved_mean=t["saved_mean"],
             saved_rstd=t["saved_rstd"], eps=1e-5)
    bwd = op("ln_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
             saved_rstd=t["saved_rstd"], dx=t["dx"] if dx else None, dgamma=t["dgamma"], dbeta=t["dbeta"])
    return fwd, bwd


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_cuda_layernorm_matches_the_cpu_backend(shape, dtype):
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    fwd, bwd = _calls(t)
    _, gg = tw.run(fwd, poison=("y", "saved_mean", "saved_rstd"))
    assert ("warp" if shape[-1] <= 1024 else "block") + " per row" in gg.ops[0].info
    close(*tw.both("y"), TOL[dtype], "y")
    for n in ("saved_mean", "saved_rstd"):
        close(*tw.both(n), 1e-6, n)
    for n in ("saved_mean", "saved_rstd"):  # the backward from the GPU's own statistics on both sides
        tw.cpu.write(t[n], tw.gpu.read(t[n]))
    tw.run(bwd, poison=("dx", "dgamma", "dbeta"))
    close(*tw.both("dx"), TOL[dtype], "dx")
    for n in ("dgamma", "dbeta"):
        close(*tw.both(n), 1e-4, n)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_cuda_vector_path_inference_and_a_first_layer(dtype):
    shape = (16, 14, 14, 64)
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    fwd, bwd = _calls(t, dx=False)
    _, gg = tw.run(fwd)
    assert "vec" + ("4" if dtype == "fp32" else "8") in gg.ops[0].info
    trained = tw.gpu.read(t["y"])
    tw.gpu.write(t["saved_mean"], np.full(shape[:3], 5.0))
    tw.run(op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["y"]), poison=("y",))
    assert tw.gpu.read(t["y"]).tobytes() == trained.tobytes()  # inference: the same y, no statistics written
    assert np.all(tw.gpu.read(t["saved_mean"]) == 5.0)
    tw.run(fwd)
    tw.poison("dx")
    tw.run(bwd, poison=("dgamma", "dbeta"))
    for n in ("dgamma", "dbeta"):
        close(*tw.both(n), 1e-4, n)
    assert np.isnan(tw.gpu.read(t["dx"]).astype(np.float32)).all()  # no dx: its bytes untouched


@pytest.mark.gpu
def test_cuda_layernorm_is_deterministic():
    """Fixed row groups, a fixed butterfly and fixed column chunks: the same bytes on every launch."""
    tw = _twin((64, 1, 197, 768), "bf16")
    t = tw.arena.tensors
    graph = tw.gpu.capture("step", list(_calls(t)))
    runs = []
    for _ in range(3):
        tw.gpu.launch(graph)
        tw.gpu.synchronize()
        runs.append([tw.gpu.read(t[n]).tobytes() for n in ("y", "saved_mean", "saved_rstd", "dx", "dgamma", "dbeta")])
    assert runs[0] == runs[1] == runs[2]
