"""The CUDA batch-norm family (csrc/ops/bn.cu) against the CPU backend: training forward with the fused relu
or relu6 and residual, backward with the mask recomputed from x or read from y (and the residual's gradient), inference,
across dtypes, channel counts that take the 16-byte vector path or not, odd spatial sizes and many chunks.

Tolerances (relative to the data's scale): FP32 1e-5 (both sum in float64; the GPU's statistics are one
pass over shifted values, the CPU's two passes); FP16/BF16 outputs within one rounding of the reference
(2e-3 / 1.6e-2), per-channel sums 1e-4. The backward is compared on the GPU's own forward (its y and saved
statistics are copied to the CPU first), so a pre-activation within rounding of zero cannot take the relu
mask different ways on the two sides.
"""

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

pytestmark = pytest.mark.gpu

VEC = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma",
       "dbeta", "scale", "bias")
FEAT = ("x", "z", "y", "dy", "dx", "dz", "dy2")
TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}
SHAPES = [(2, 3, 5, 3), (4, 7, 9, 12), (8, 11, 13, 40), (16, 23, 29, 64), (4, 3, 3, 2048)]
IDS = ["c3", "c12", "c40", "c64-many-chunks", "c2048-many-tiles"]


def _twin(shape, dtype):
    tw = Twin()
    for name in FEAT:
        tw.add(name, shape, dtype)
    for name in VEC:
        tw.add(name, (shape[-1],))
    tw.allocate()
    for name in ("z", "dy", "dy2", "gamma", "beta", "mean_in"):
        tw.fill(name)
    tw.fill("var_in", 0.5, 2)
    tw.write("x", tw.fill("x") * 3 + 1)
    return tw


def _fwd(t, **kw):
    return op("bn_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"], var_in=t["var_in"],
              mean_out=t["mean_out"], var_out=t["var_out"], y=t["y"], saved_mean=t["saved_mean"],
              saved_inv_std=t["saved_inv_std"], momentum=0.1, eps=1e-5, **kw)


def _bwd(t, **kw):
    return op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
              saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"], eps=1e-5, **kw)


def _gpu_forward_to_cpu(tw, *names):
    for n in names:
        tw.cpu.write(tw[n], tw.gpu.read(tw[n]))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("mode", ["plain", "relu", "relu+residual", "relu+residual+dy2", "relu+dy2", "relu6",
                                  "relu6+residual", "silu", "silu+dy2"])
def test_bn_forward_backward_fused(shape, dtype, mode):
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    relu = mode.split("+")[0] if mode != "plain" else None
    if relu == "relu6":  # pre-activations on both sides of 6 as well as of 0
        tw.fill("gamma", 3.0, 6.0)
    residual = "residual" in mode
    fwd = {"activation": relu, **({"z": t["z"]} if residual else {})}
    tw.run(_fwd(t, **fwd), poison=("y", "mean_out", "var_out", "saved_mean", "saved_inv_std"))
    tol = TOL[dtype]
    close(*tw.both("y"), tol, "y")
    for n in ("mean_out", "var_out", "saved_mean", "saved_inv_std"):
        close(*tw.both(n), 1e-5, n)
    _gpu_forward_to_cpu(tw, "y", "saved_mean", "saved_inv_std")
    if residual:
        bwd = {"y": t["y"], "dz": t["dz"]}
    elif relu:
        bwd = {"beta": t["beta"]}
    else:
        bwd = {}
    if "dy2" in mode:  # a branch point's second gradient contribution, added as it is read
        bwd["dy2"] = t["dy2"]
    tw.run(_bwd(t, activation=relu, **bwd), poison=("dx", "dgamma", "dbeta") + (("dz",) if residual else ()))
    close(*tw.both("dx"), tol, "dx")
    for n in ("dgamma", "dbeta"):
        close(*tw.both(n), 1e-4, n)
    if residual:
        cpu, gpu = tw.both("dz")
        assert cpu.tobytes() == gpu.tobytes()  # dy times a 0/1 mask: exact


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_backward_in_place_and_vector_path(dtype):
    """dx over x and dz over dy (the catalogue's in-place pairs); channels of 64 take 16-byte vectors."""
    shape = (8, 9, 7, 64)
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    _, gg = tw.run(_fwd(t, activation="relu", z=t["z"]))
    assert "vec" + ("4" if dtype == "fp32" else "8") in gg.ops[0].info
    _gpu_forward_to_cpu(tw, "y", "saved_mean", "saved_inv_std")
    tw.run(op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
              saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["x"], y=t["y"], dz=t["dy"],
              activation="relu"))
    close(*tw.both("x"), TOL[dtype], "dx over x")
    close(*tw.both("dy"), 0.0, "dz over dy")


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES[1:4], ids=IDS[1:4])
def test_bn_inference_fused(shape, dtype):
    tw = _twin(shape, dtype)
    t = tw.arena.tensors
    tw.fill("scale", 0.5, 2)
    tw.fill("bias")
    for act, z in ((None, None), ("relu", None), ("relu", t["z"]), ("relu6", None), ("relu6", t["z"]),
                   ("silu", None)):
        tw.run(op("bn_inf", x=t["x"], scale=t["scale"], bias=t["bias"], y=t["y"], z=z, activation=act),
               poison=("y",))
        exact = dtype == "fp32" and act != "silu"  # (silu: CUDA's expf and numpy's exp differ by an ulp or two)
        close(*tw.both("y"), 0.0 if exact else max(TOL[dtype], 1e-6), f"y {act} {z is not None}")


def test_fused_bn_is_deterministic():
    """Fixed chunking and summation order: the same bytes on every launch."""
    tw = _twin((16, 23, 29, 64), "fp16")
    t = tw.arena.tensors
    graph = tw.gpu.capture("step", [_fwd(t, activation="relu", z=t["z"]),
                                    _bwd(t, activation="relu", y=t["y"], dz=t["dz"])])
    runs = []
    for _ in range(3):
        tw.gpu.launch(graph)
        tw.gpu.synchronize()
        runs.append([tw.gpu.read(t[n]).tobytes() for n in ("y", "mean_out", "var_out", "saved_inv_std", "dx", "dz",
                                                           "dgamma", "dbeta")])
    assert runs[0] == runs[1] == runs[2]


# the backward's walks: exact tilings by window (2x2/2 c64, c12; 3x3/3 c8), at most two windows a row and column
# by cell (3x3/2 with padding, even and odd sizes; 2x2/1 overlapping; 2x2/2 with uncovered inputs and 3x3/3 with
# padding: one window; 4x4/2), more by input row (3x3/1); the forward's window loop unrolled for 2x2 and 3x3,
# general for 4x4
POOLS = [((2, 2, 0), (4, 8, 8, 64)), ((3, 2, 1), (4, 9, 9, 64)), ((2, 2, 0), (2, 6, 6, 12)),
         ((3, 2, 1), (2, 16, 16, 8)), ((2, 2, 0), (2, 7, 9, 16)), ((3, 3, 0), (2, 9, 9, 8)),
         ((3, 2, 1), (2, 13, 11, 24)), ((2, 1, 0), (2, 7, 6, 16)), ((3, 3, 1), (2, 8, 8, 8)),
         ((3, 1, 1), (2, 7, 9, 16)), ((4, 2, 1), (2, 10, 10, 16))]
POOL_IDS = ["2x2/2 c64", "3x3/2 pad c64", "2x2/2 c12", "3x3/2 pad c8", "2x2/2 odd c16", "3x3/3 c8",
            "3x3/2 pad odd c24", "2x2/1 c16", "3x3/3 pad c8", "3x3/1 pad c16", "4x4/2 pad c16"]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("pool,shape", POOLS, ids=POOL_IDS)
def test_bn_maxpool_fused(pool, shape, dtype):
    """The pooled output within the BN tolerance and its argmax as the CPU's (but where two window values are
    within the statistics' rounding of each other); the backward, on the GPU's mask and statistics, within the
    BN tolerances."""
    k, s, p = pool
    n, h, w, c = shape
    hp, q = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    tw = Twin()
    for name in ("x", "dx"):
        tw.add(name, shape, dtype)
    for name in ("y", "dy"):
        tw.add(name, (n, hp, q, c), dtype)
    tw.add("mask", (n, hp, q, c), "int8")
    for name in VEC:
        tw.add(name, (c,))
    tw.allocate()
    for name in ("dy", "gamma", "beta", "mean_in"):
        tw.fill(name)
    tw.fill("var_in", 0.5, 2)
    tw.write("x", tw.fill("x") * 3 + 1)
    t = tw.arena.tensors
    geo = {"kernel": k, "stride": s, "padding": p}
    vecs = {n_: t[n_] for n_ in ("gamma", "beta", "saved_mean", "saved_inv_std")}
    fwd = op("bn_maxpool_fwd", x=t["x"], y=t["y"], mask=t["mask"], mean_in=t["mean_in"], var_in=t["var_in"],
             mean_out=t["mean_out"], var_out=t["var_out"], momentum=0.1, eps=1e-5, **vecs, **geo)
    tw.run(fwd, poison=("y", "mask", "mean_out", "var_out", "saved_mean", "saved_inv_std"))
    for n_ in ("mean_out", "var_out", "saved_mean", "saved_inv_std"):
        close(*tw.both(n_), 1e-5, n_)
    close(*tw.both("y"), TOL[dtype], "y")
    cpu, gpu = tw.both("mask")
    assert float(np.mean(cpu != gpu)) < (1e-3 if dtype == "fp32" else 2e-2)
    _gpu_forward_to_cpu(tw, "saved_mean", "saved_inv_std", "mask")
    tw.run(op("bn_maxpool_bwd", x=t["x"], dy=t["dy"], mask=t["mask"], dgamma=t["dgamma"], dbeta=t["dbeta"],
              dx=t["dx"], eps=1e-5, **vecs, **geo), poison=("dx", "dgamma", "dbeta"))
    close(*tw.both("dx"), TOL[dtype], "dx")
    for n_ in ("dgamma", "dbeta"):
        close(*tw.both(n_), 1e-4, n_)
