"""Layer norm (ln_fwd, ln_bwd) on the CPU backend against torch.nn.functional.layer_norm and its autograd.

FP32: against torch in float64 from the same inputs, within 1e-5 of the data's scale (tr's statistics and row
sums are float64; what is left is float32 rounding of y, xhat and the products).
FP16 / BF16: against torch computing in float32 from the same rounded inputs, its results rounded to the
feature dtype (round to nearest even): y and dx within one unit in the last place of the output dtype, plus
2 * 2^-24 * max|e| where terms cancel to values far below the tensor's scale (two float32 evaluations then
differ by float32 rounding of the terms, which is many ulps of the tiny result). Measured over these shapes and
larger ones (up to 32x8x8x768): the excess over one ulp is at most 1.01 (y) and 0.27 (dx) of those units; most
elements agree exactly. dgamma and dbeta (FP32) within 1e-5 of torch's float64 on the same rounded values.
C = 1 is checked exactly (y = beta, dx = 0): torch's own results are rounding noise there.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, assert_close, op, run

from tr.backend.checks import where
from tr.core.errors import BackendError, CompileError, DTypeError, ShapeError
from tr.core.ops import OpCall

FEATURES = ("x", "y", "dy", "dx")
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _arena(shape: tuple[int, int, int, int], dtype: str = "fp32") -> tuple[SimpleArena, dict]:
    n, h, w, c = shape
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in FEATURES}
    t.update({name: a.add(name, (1, 1, 1, c)) for name in ("gamma", "beta", "dgamma", "dbeta")})
    t.update({name: a.add(name, (n, h, w, 1)) for name in ("saved_mean", "saved_rstd")})
    return a, t


def _fwd(t: dict, eps: float = 1e-5, stats: bool = True) -> OpCall:
    saved = {"saved_mean": t["saved_mean"], "saved_rstd": t["saved_rstd"]} if stats else {}
    return op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["y"], eps=eps, **saved)


def _bwd(t: dict, dx: bool = True) -> OpCall:
    return op("ln_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
              saved_rstd=t["saved_rstd"], dx=t["dx"] if dx else None, dgamma=t["dgamma"], dbeta=t["dbeta"])


def _fill(be, t: dict, shape: tuple[int, int, int, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = shape[-1]
    be.write(t["x"], 2.0 + 1.5 * rng.standard_normal(shape))  # an offset: the mean is not ~0
    be.write(t["dy"], rng.standard_normal(shape))
    be.write(t["gamma"], rng.uniform(0.5, 1.5, c))
    be.write(t["beta"], rng.standard_normal(c))


def _torch_ln(be, t: dict, dtype: torch.dtype, eps: float, c: int, feature: torch.dtype | None = None):
    """y, dx, dgamma, dbeta of torch's layer norm in ``dtype`` on the arena's (rounded) values."""
    def tensor(name: str, grad: bool = False) -> torch.Tensor:
        v = be.read(t[name])
        if v.dtype == np.uint16:  # BF16 bits
            v = (v.astype(np.uint32) << 16).view(np.float32)
        return torch.tensor(v.astype(np.float64), dtype=dtype, requires_grad=grad)

    x, dy = tensor("x", True), tensor("dy")
    gamma, beta = tensor("gamma", True).reshape(c), tensor("beta", True).reshape(c)
    gamma.retain_grad()
    beta.retain_grad()
    y = torch.nn.functional.layer_norm(x, (c,), gamma, beta, eps)
    y.backward(dy)
    return y.detach(), x.grad, gamma.grad, beta.grad


def _as_f64(v: np.ndarray | torch.Tensor, dtype: str) -> np.ndarray:
    """Feature values as float64: tr's (FP16, or BF16 bits) or torch's float32 result rounded to ``dtype``."""
    if isinstance(v, torch.Tensor):
        return v.to(TORCH[dtype]).to(torch.float64).numpy()
    if v.dtype == np.uint16:
        return (v.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return v.astype(np.float64)


def _ulp(e: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` values at |e| (its subnormal spacing below the normal range)."""
    mant, lowest = (10, -14) if dtype == "fp16" else (7, -126)
    exp = np.floor(np.log2(np.where(e != 0, np.abs(e), 1.0)))
    return 2.0 ** (np.maximum(exp, lowest) - mant)


def _within_one_ulp(actual: np.ndarray, expected: torch.Tensor, dtype: str) -> float:
    """|a - e| <= ulp(e) + 2 * 2^-24 * max|e| everywhere, e torch's float32 result rounded to ``dtype``; returns
    the largest excess over one ulp in units of 2^-24 * max|e|. The floor term: where the terms of y or dx cancel
    to a value far below the tensor's scale, two float32 evaluations differ by float32 rounding of the terms."""
    a, e = _as_f64(actual, dtype), _as_f64(expected, dtype)
    floor = 2.0 ** -24 * float(np.abs(e).max())
    excess = float((np.abs(a - e) - _ulp(e, dtype)).max()) / floor
    assert excess <= 2.0, f"{excess:.2f} units of 2^-24 * max|e| past one {dtype} ulp"
    return excess


SHAPES = [(4, 3, 5, 24), (2, 3, 3, 13), (3, 1, 1, 768), (5, 2, 1, 1), (1, 1, 1, 37)]
IDS = ["c24", "odd-c13", "vit-c768", "c1", "one-row"]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_fp32_forward_and_backward_match_torch(shape, eps):
    a, t = _arena(shape)
    be = a.allocate()
    _fill(be, t, shape, sum(shape))
    run(be, _fwd(t, eps), _bwd(t))
    c = shape[-1]
    y, dx, dgamma, dbeta = _torch_ln(be, t, torch.float64, eps, c)
    assert_close(be.read(t["y"]), y.numpy())
    assert_close(be.read(t["dx"]), dx.numpy())
    assert_close(be.read(t["dgamma"]).ravel(), dgamma.numpy())
    assert_close(be.read(t["dbeta"]).ravel(), dbeta.numpy())
    rows = be.read(t["x"]).reshape(-1, c).astype(np.float64)
    assert_close(be.read(t["saved_mean"]).ravel(), rows.mean(1), 1e-7)
    assert_close(be.read(t["saved_rstd"]).ravel(), 1 / np.sqrt(rows.var(1) + eps), 1e-6)
    assert be.read(t["saved_mean"]).shape == shape[:3] + (1,)


HALF_SHAPES = [s for s in SHAPES if s[-1] > 1] + [(8, 8, 8, 768)]  # (C = 1: below, exactly)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", HALF_SHAPES, ids=[*IDS[:3], IDS[4], "vit-512-rows"])
def test_half_precision_within_one_output_ulp_of_torch_in_float32(shape, dtype):
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, 7 + sum(shape))
    run(be, _fwd(t), _bwd(t))
    c = shape[-1]
    y, dx, _, _ = _torch_ln(be, t, torch.float32, 1e-5, c)
    _within_one_ulp(be.read(t["y"]), y, dtype)
    _within_one_ulp(be.read(t["dx"]), dx, dtype)
    _, _, dgamma, dbeta = _torch_ln(be, t, torch.float64, 1e-5, c)
    assert_close(be.read(t["dgamma"]).ravel(), dgamma.numpy())
    assert_close(be.read(t["dbeta"]).ravel(), dbeta.numpy())


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_one_channel_normalises_to_beta_exactly(dtype):
    """C = 1: xhat = 0, so y = beta (rounded to the feature dtype), dx = 0, dgamma = 0, dbeta = sum dy, exactly
    (torch's own float32 and float64 give rounding noise around these values)."""
    shape = (5, 2, 1, 1)
    a, t = _arena(shape, dtype)
    be = a.allocate()
    _fill(be, t, shape, 2)
    run(be, _fwd(t), _bwd(t))
    beta = float(be.read(t["beta"]).ravel()[0])
    rounded = _as_f64(torch.full(shape, beta), dtype) if dtype != "fp32" else np.full(shape, beta)
    assert np.array_equal(_as_f64(be.read(t["y"]), dtype), rounded)
    assert np.all(_as_f64(be.read(t["dx"]), dtype) == 0)
    assert be.read(t["dgamma"]).ravel()[0] == 0
    assert be.read(t["dbeta"]).ravel()[0] == np.float32(_as_f64(be.read(t["dy"]), dtype).sum())


def test_inference_saves_nothing_and_gives_the_training_output():
    shape = (3, 2, 4, 20)
    a, t = _arena(shape, "fp16")
    be = a.allocate()
    _fill(be, t, shape, 11)
    run(be, _fwd(t))
    trained = be.read(t["y"]).copy()
    be.write(t["y"], np.zeros(shape))
    be.write(t["saved_mean"], np.full(shape[:3], 7.0))
    run(be, _fwd(t, stats=False))
    assert np.array_equal(be.read(t["y"]), trained)
    assert np.all(be.read(t["saved_mean"]) == 7.0)  # inference writes no statistics


def test_first_layer_backward_writes_no_dx_and_the_same_parameter_gradients():
    shape = (4, 2, 2, 9)
    a, t = _arena(shape)
    be = a.allocate()
    _fill(be, t, shape, 5)
    run(be, _fwd(t), _bwd(t))
    dgamma, dbeta = be.read(t["dgamma"]).copy(), be.read(t["dbeta"]).copy()
    be.write(t["dx"], np.full(shape, 3.0))
    be.write(t["dgamma"], np.zeros(9))
    run(be, _bwd(t, dx=False))
    assert np.all(be.read(t["dx"]) == 3.0)
    assert np.array_equal(be.read(t["dgamma"]), dgamma) and np.array_equal(be.read(t["dbeta"]), dbeta)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_two_runs_give_the_same_bytes(dtype):
    shape = (16, 7, 7, 45)

    def once() -> list[bytes]:
        a, t = _arena(shape, dtype)
        be = a.allocate()
        _fill(be, t, shape, 3)
        run(be, _fwd(t), _bwd(t))
        first = [be.read(t[k]).tobytes() for k in ("y", "dx", "dgamma", "dbeta", "saved_mean", "saved_rstd")]
        run(be, _fwd(t), _bwd(t))  # a second launch of the same plan, scratch reused
        assert first == [be.read(t[k]).tobytes() for k in ("y", "dx", "dgamma", "dbeta", "saved_mean", "saved_rstd")]
        return first

    assert once() == once()


# --- rule errors (tr.backend.rules.layernorm): the call is refused at capture, naming the argument ---------------

def _refused(a: SimpleArena, call: OpCall, exc: type[Exception], pattern: str) -> None:
    be = a.allocate()
    with pytest.raises(exc, match=pattern) as info:
        be.capture("g", [call])
    assert str(info.value).startswith(where("g", 0, call) + ": ")


def test_a_wrong_gamma_shape_is_refused():
    a, t = _arena((2, 2, 2, 6))
    t["g5"] = a.add("g5", (1, 1, 1, 5))
    _refused(a, op("ln_fwd", x=t["x"], gamma=t["g5"], beta=t["beta"], y=t["y"]), ShapeError,
             r"gamma \[1,1,1,5\] must be \[1,1,1,6\] \(one value per channel of x\)")
    a2, t2 = _arena((2, 2, 2, 6))
    t2["gflat"] = a2.add("gflat", (6, 1, 1, 1))
    _refused(a2, op("ln_bwd", x=t2["x"], gamma=t2["gamma"], dy=t2["dy"], saved_mean=t2["saved_mean"],
                    saved_rstd=t2["saved_rstd"], dgamma=t2["gflat"], dbeta=t2["dbeta"]), ShapeError,
             r"dgamma \[6,1,1,1\] must be \[1,1,1,6\]")


def test_mixed_feature_dtypes_and_a_half_beta_are_refused():
    a, t = _arena((2, 2, 2, 8))
    t["y16"] = a.add("y16", (2, 2, 2, 8), "fp16")
    _refused(a, op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["y16"]), DTypeError,
             "y is FP16 but x is FP32; a layer-norm call has one feature dtype")
    a2, t2 = _arena((2, 2, 2, 8), "bf16")
    t2["dy16"] = a2.add("dy16", (2, 2, 2, 8), "fp16")
    _refused(a2, op("ln_bwd", x=t2["x"], gamma=t2["gamma"], dy=t2["dy16"], saved_mean=t2["saved_mean"],
                    saved_rstd=t2["saved_rstd"], dgamma=t2["dgamma"], dbeta=t2["dbeta"]), DTypeError,
             "dy is FP16 but x is BF16")
    a3, t3 = _arena((2, 2, 2, 8), "fp16")
    t3["b16"] = a3.add("b16", (1, 1, 1, 8), "fp16")
    _refused(a3, op("ln_fwd", x=t3["x"], gamma=t3["gamma"], beta=t3["b16"], y=t3["y"]), DTypeError,
             "beta is FP16; one value per channel of x is FP32")


def test_saved_statistics_are_both_or_neither_and_required_by_the_backward():
    a, t = _arena((2, 3, 1, 4))
    _refused(a, op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["y"], saved_mean=t["saved_mean"]),
             BackendError, "saved_mean is given without saved_rstd: training writes both saved statistics")
    with pytest.raises(CompileError, match="op ln_bwd: required argument 'saved_rstd' is missing"):
        op("ln_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"], dgamma=t["dgamma"],
           dbeta=t["dbeta"])
    # a call built around OpCall.make is refused at capture all the same
    bare = OpCall("ln_bwd", MappingProxyType({"x": t["x"], "gamma": t["gamma"], "dy": t["dy"],
                                              "saved_mean": t["saved_mean"], "saved_rstd": None, "dx": None,
                                              "dgamma": t["dgamma"], "dbeta": t["dbeta"]}))
    _refused(a, bare, BackendError, "required argument 'saved_rstd' is missing")
    a2, t2 = _arena((2, 3, 1, 4))
    t2["rows"] = a2.add("rows", (6, 1, 1, 1))  # the right count, not [N,H,W,1]
    _refused(a2, op("ln_fwd", x=t2["x"], gamma=t2["gamma"], beta=t2["beta"], y=t2["y"],
                    saved_mean=t2["saved_mean"], saved_rstd=t2["rows"]), ShapeError,
             r"saved_rstd \[6,1,1,1\] must be \[2,3,1,1\] \(one statistic per row of x\)")


def test_a_wrong_feature_shape_and_eps_are_refused():
    a, t = _arena((2, 2, 2, 8))
    t["short"] = a.add("short", (2, 2, 1, 8))
    _refused(a, op("ln_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], y=t["short"]), ShapeError,
             r"y \[2,2,1,8\] must have x's shape \[2,2,2,8\]")
    a2, t2 = _arena((2, 2, 2, 8))
    _refused(a2, _fwd(t2, eps=-1.0), BackendError, r"attribute 'eps' = -1.0 is out of range")
