"""add_fwd: y = a + b (+ relu), also in place over a or b; compared exactly (one float32 rounding; FP16 and BF16:
one rounding of the float32 sum, torch's float32 sum rounded to the dtype)."""

import numpy as np
import pytest
import torch
from backend_testkit import HALF_DTYPES, SimpleArena, as_dtype, assert_rounded, op, run


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("out", ["y", "a", "b"])
def test_add(activation, out):
    shape = (2, 4, 4, 3)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("a", "b", "y")}
    be = a.allocate()
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    be.write(t["a"], av)
    be.write(t["b"], bv)
    run(be, op("add_fwd", a=t["a"], b=t["b"], y=t[out], activation=activation))
    ref = av + bv
    if activation == "relu":
        ref = np.maximum(ref, 0)
    np.testing.assert_array_equal(be.read(t[out]), ref)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_add_half_and_shape_check(dtype):
    """FP16 / BF16: the float32 sum (and relu) of the rounded inputs rounded once, as torch's float32 sum rounded to
    the dtype: exactly (one operation)."""
    shape = (1, 2, 2, 8)
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("a", "b", "y")}
    t["bad"] = a.add("bad", (1, 2, 2, 4), dtype)
    be = a.allocate()
    rng = np.random.default_rng(1)
    a32, b32 = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    a32[0, 0, 0, :3], b32[0, 0, 0, :3] = (1.0, 1.0078125, 256.0), (2.0 ** -8, 2.0 ** -8, 1.0)  # BF16 ties: to even
    (av, a32), (bv, b32) = as_dtype(a32, dtype), as_dtype(b32, dtype)
    be.write(t["a"], av)
    be.write(t["b"], bv)
    run(be, op("add_fwd", a=t["a"], b=t["b"], y=t["y"], activation="relu"))
    if dtype == "fp16":
        np.testing.assert_array_equal(be.read(t["y"]), np.maximum(av.astype(np.float32) + bv, 0).astype(np.float16))
    assert_rounded(be.read(t["y"]), torch.relu(torch.from_numpy(a32) + torch.from_numpy(b32)), dtype)
    with pytest.raises(Exception, match="must have a's shape"):
        be.capture("g", [op("add_fwd", a=t["a"], b=t["bad"], y=t["y"])])
