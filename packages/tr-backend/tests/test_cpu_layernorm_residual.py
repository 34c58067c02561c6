"""The residual join fused into layer norm on the CPU backend (tr.graph.passes.fuse_add_norm): ln_fwd with z (and
sum) against add_fwd then ln_fwd, ln_bwd with dx2 against ln_bwd then accumulate, in FP32, FP16 and BF16.

The fused ops compute the unfused pair's float operations in the same order (the join rounded to the feature dtype
before the statistics read it, the layer norm's dx rounded before dx2 is added), so every output must equal the
unfused pair's byte for byte, in every dtype, in training and inference, also when sum shares x's or z's bytes and
dx shares dx2's (the in-place pairs the catalogue allows). One FP32 case is checked against torch's autograd of
layer_norm(a + b) with a skip-path gradient, so the composition itself is the right one.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, as_dtype, assert_close, op, run

from tr.backend.checks import where
from tr.core.errors import BackendError, DTypeError, ShapeError
from tr.core.ops import OpCall

DTYPES = ("fp32", "fp16", "bf16")
# odd token counts (ViT's 17 = 16 patches + the class token, 197), widths of the vector and scalar paths
SHAPES = [(2, 1, 17, 64), (3, 1, 5, 13), (2, 1, 197, 768), (1, 1, 3, 1)]
IDS = ["t17-c64", "t5-c13", "t197-c768", "c1"]
FEATURES = ("a", "b", "s", "y", "dy", "dskip", "dx", "dx_f", "y_f", "s_f")


def _arena(shape: tuple[int, int, int, int], dtype: str) -> tuple[SimpleArena, dict]:
    n, h, w, c = shape
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in FEATURES}
    t.update({name: a.add(name, (1, 1, 1, c)) for name in ("gamma", "beta", "dgamma", "dbeta", "dgamma_f", "dbeta_f")})
    t.update({name: a.add(name, (n, h, w, 1)) for name in ("mean", "rstd", "mean_f", "rstd_f")})
    return a, t


def _fill(be, t: dict, shape: tuple[int, int, int, int], dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = shape[-1]
    # a + b lands between representable values often, so the join's rounding matters in FP16 and BF16
    be.write(t["a"], as_dtype(1.5 + 2.0 * rng.standard_normal(shape), dtype)[0])
    be.write(t["b"], as_dtype(0.3 * rng.standard_normal(shape), dtype)[0])
    be.write(t["dy"], as_dtype(rng.standard_normal(shape), dtype)[0])
    be.write(t["dskip"], as_dtype(rng.standard_normal(shape), dtype)[0])
    be.write(t["gamma"], rng.uniform(0.5, 1.5, c))
    be.write(t["beta"], rng.standard_normal(c))


def _unfused_fwd(t: dict, eps: float, stats: bool = True) -> list[OpCall]:
    saved = {"saved_mean": t["mean"], "saved_rstd": t["rstd"]} if stats else {}
    return [op("add_fwd", a=t["a"], b=t["b"], y=t["s"], activation=None),
            op("ln_fwd", x=t["s"], gamma=t["gamma"], beta=t["beta"], y=t["y"], eps=eps, **saved)]


def _fused_fwd(t: dict, eps: float, stats: bool = True, x: str = "a", z: str = "b", out: str | None = "s_f") -> OpCall:
    saved = {"saved_mean": t["mean_f"], "saved_rstd": t["rstd_f"]} if stats else {}
    extra = {"sum": t[out]} if out else {}
    return op("ln_fwd", x=t[x], z=t[z], gamma=t["gamma"], beta=t["beta"], y=t["y_f"], eps=eps, **saved, **extra)


def _unfused_bwd(t: dict) -> list[OpCall]:
    return [op("ln_bwd", x=t["s"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["mean"], saved_rstd=t["rstd"],
               dx=t["dx"], dgamma=t["dgamma"], dbeta=t["dbeta"]),
            op("accumulate", x=t["dskip"], y=t["dx"])]


def _fused_bwd(t: dict, dx: str = "dx_f") -> OpCall:
    return op("ln_bwd", x=t["s"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["mean"], saved_rstd=t["rstd"],
              dx=t[dx], dx2=t["dskip"], dgamma=t["dgamma_f"], dbeta=t["dbeta_f"])


def _same(be, t: dict, pairs: tuple[tuple[str, str], ...]) -> None:
    for unfused, fused in pairs:
        u, f = be.read(t[unfused]), be.read(t[fused])
        assert u.dtype == f.dtype and u.tobytes() == f.tobytes(), (
            f"{fused} differs from the unfused {unfused}: {int((u != f).sum())} of {u.size} values")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_fused_forward_and_backward_give_the_unfused_bytes(shape, dtype):
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, dtype, 3 + sum(shape))
    run(be, *_unfused_fwd(t, 1e-6), _fused_fwd(t, 1e-6))
    _same(be, t, (("s", "s_f"), ("y", "y_f"), ("mean", "mean_f"), ("rstd", "rstd_f")))
    run(be, *_unfused_bwd(t), _fused_bwd(t))
    _same(be, t, (("dx", "dx_f"), ("dgamma", "dgamma_f"), ("dbeta", "dbeta_f")))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_join_is_rounded_before_the_statistics_read_it(dtype):
    """a + b is rounded to the feature dtype first (add_fwd's y): statistics of the unrounded sum would differ in FP16
    and BF16. Checked where the sum needs the rounding: a = 1, b below half an ulp of 1 (the float32 sum is not a
    value of the dtype)."""
    shape = (1, 1, 4, 8)
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, dtype, 1)
    tiny = {"fp32": 2.0 ** -30, "fp16": 2.0 ** -13, "bf16": 2.0 ** -10}[dtype]
    be.write(t["a"], as_dtype(np.tile([1.0, -1.0], 16).reshape(shape), dtype)[0])
    be.write(t["b"], as_dtype(np.full(shape, tiny), dtype)[0])
    run(be, _fused_fwd(t, 1e-6))
    assert np.array_equal(be.read(t["s_f"]), be.read(t["a"]))  # 1 + tiny rounds to 1 in every dtype
    assert be.read(t["mean_f"]).ravel()[0] == 0.0  # the rounded row's mean, exactly


@pytest.mark.parametrize("dtype", DTYPES)
def test_inference_without_sum_and_training_give_one_y(dtype):
    """Inference may fuse the join without keeping the sum (nothing else reads it): y is training's y."""
    shape = (2, 1, 9, 24)
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, dtype, 9)
    run(be, _fused_fwd(t, 1e-5))
    trained, s = be.read(t["y_f"]).copy(), be.read(t["s_f"]).copy()
    be.write(t["y_f"], np.zeros(shape))
    be.write(t["s_f"], np.zeros(shape))
    be.write(t["mean_f"], np.full(shape[:3], 7.0))
    run(be, _fused_fwd(t, 1e-5, stats=False, out=None))
    assert be.read(t["y_f"]).tobytes() == trained.tobytes()
    assert np.all(be.read(t["s_f"]).astype(np.float32) == 0) and np.all(be.read(t["mean_f"]) == 7.0)
    run(be, _fused_fwd(t, 1e-5, stats=False))
    assert be.read(t["s_f"]).tobytes() == s.tobytes()


def _alias(t: dict, name: str, of: str, tid: int) -> dict:
    """t with ``name`` another tensor at ``of``'s bytes (the compiler's in-place aliasing)."""
    return {**t, name: dataclasses.replace(t[of], id=tid, name=name)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("into", ["a", "b"])
def test_sum_may_share_the_bytes_of_x_or_z(dtype, into):
    shape = (3, 1, 17, 64)
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, dtype, 21)
    run(be, *_unfused_fwd(t, 1e-6))
    t2 = _alias(t, "s_in_place", into, 1000)
    run(be, _fused_fwd(t2, 1e-6, out="s_in_place"))
    _same(be, t, (("s", into), ("y", "y_f"), ("mean", "mean_f"), ("rstd", "rstd_f")))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dx_may_share_the_bytes_of_dx2(dtype):
    shape = (2, 1, 17, 64)
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, dtype, 5)
    run(be, *_unfused_fwd(t, 1e-6), *_unfused_bwd(t))
    t2 = _alias(t, "dx_in_place", "dskip", 1000)
    run(be, _fused_bwd(t2, dx="dx_in_place"))
    _same(be, t, (("dx", "dskip"), ("dgamma", "dgamma_f"), ("dbeta", "dbeta_f")))


def test_fp32_composition_matches_torch():
    """y = layer_norm(a + b) read by the block, s = a + b also read by the skip path: the gradient of a (and b) is
    the layer norm's input gradient plus the skip path's, which the fused backward writes."""
    shape, eps = (2, 1, 17, 64), 1e-6
    a, t = _arena(shape, "fp32")
    be = a.allocate()
    _fill(be, t, shape, "fp32", 13)
    run(be, _fused_fwd(t, eps), op("ln_bwd", x=t["s_f"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["mean_f"],
                                   saved_rstd=t["rstd_f"], dx=t["dx_f"], dx2=t["dskip"], dgamma=t["dgamma_f"],
                                   dbeta=t["dbeta_f"]))

    def tensor(name: str, grad: bool = False) -> torch.Tensor:
        return torch.tensor(be.read(t[name]).astype(np.float64), requires_grad=grad)

    xa, xb = tensor("a", True), tensor("b", True)
    gamma, beta = tensor("gamma", True).reshape(-1), tensor("beta", True).reshape(-1)
    gamma.retain_grad()
    beta.retain_grad()
    s = xa + xb
    y = torch.nn.functional.layer_norm(s, (shape[-1],), gamma, beta, eps)
    (y * tensor("dy")).sum().add((s * tensor("dskip")).sum()).backward()
    assert_close(be.read(t["s_f"]), s.detach().numpy())
    assert_close(be.read(t["y_f"]), y.detach().numpy())
    assert_close(be.read(t["dx_f"]), xa.grad.numpy())
    assert np.array_equal(xa.grad.numpy(), xb.grad.numpy())
    assert_close(be.read(t["dgamma_f"]).ravel(), gamma.grad.numpy())
    assert_close(be.read(t["dbeta_f"]).ravel(), beta.grad.numpy())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_two_runs_give_the_same_bytes(dtype):
    shape = (4, 1, 17, 96)

    def once() -> list[bytes]:
        a, t = _arena(shape, dtype)
        be = a.allocate()
        _fill(be, t, shape, dtype, 8)
        calls = [_fused_fwd(t, 1e-6), _fused_bwd(t)]
        run(be, *calls)
        first = [be.read(t[k]).tobytes() for k in ("s_f", "y_f", "mean_f", "rstd_f", "dx_f", "dgamma_f", "dbeta_f")]
        run(be, *calls)
        assert first == [be.read(t[k]).tobytes() for k in ("s_f", "y_f", "mean_f", "rstd_f", "dx_f", "dgamma_f",
                                                            "dbeta_f")]
        return first

    assert once() == once()


# --- rule errors (tr.backend.rules.layernorm) --------------------------------------------------------------------

def _refused(a: SimpleArena, call: OpCall, exc: type[Exception], pattern: str) -> None:
    be = a.allocate()
    with pytest.raises(exc, match=pattern) as info:
        be.capture("g", [call])
    assert str(info.value).startswith(where("g", 0, call) + ": ")


def test_sum_without_z_and_dx2_without_dx_are_refused():
    a, t = _arena((2, 1, 3, 8), "fp32")
    _refused(a, op("ln_fwd", x=t["a"], gamma=t["gamma"], beta=t["beta"], y=t["y"], sum=t["s"]), BackendError,
             "sum is given without z: it receives x [+] z")
    a2, t2 = _arena((2, 1, 3, 8), "fp32")
    _refused(a2, op("ln_bwd", x=t2["s"], gamma=t2["gamma"], dy=t2["dy"], saved_mean=t2["mean"],
                    saved_rstd=t2["rstd"], dx2=t2["dskip"], dgamma=t2["dgamma"], dbeta=t2["dbeta"]), BackendError,
             "dx2 is given without dx")


def test_a_residual_of_another_shape_or_dtype_is_refused():
    a, t = _arena((2, 1, 3, 8), "fp16")
    t["z32"] = a.add("z32", (2, 1, 3, 8))
    _refused(a, op("ln_fwd", x=t["a"], z=t["z32"], gamma=t["gamma"], beta=t["beta"], y=t["y"]), DTypeError,
             "z is FP32 but x is FP16; a layer-norm call has one feature dtype")
    a2, t2 = _arena((2, 1, 3, 8), "fp32")
    t2["short"] = a2.add("short", (2, 1, 2, 8))
    _refused(a2, op("ln_fwd", x=t2["a"], z=t2["b"], sum=t2["short"], gamma=t2["gamma"], beta=t2["beta"], y=t2["y"]),
             ShapeError, r"sum \[2,1,2,8\] must have x's shape \[2,1,3,8\]")
    a3, t3 = _arena((2, 1, 3, 8), "bf16")
    t3["d16"] = a3.add("d16", (2, 1, 3, 8), "fp16")
    _refused(a3, op("ln_bwd", x=t3["s"], gamma=t3["gamma"], dy=t3["dy"], saved_mean=t3["mean"], saved_rstd=t3["rstd"],
                    dx=t3["dx"], dx2=t3["d16"], dgamma=t3["dgamma"], dbeta=t3["dbeta"]), DTypeError,
             "dx2 is FP16 but x is BF16")
