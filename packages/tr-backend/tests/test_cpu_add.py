"""add_fwd: y = a + b (+ relu), also in place over a or b; compared exactly (one float32 rounding)."""

import numpy as np
import pytest
from backend_testkit import SimpleArena, op, run


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


def test_add_fp16_and_shape_check():
    shape = (1, 2, 2, 8)
    a = SimpleArena()
    t = {name: a.add(name, shape, "fp16") for name in ("a", "b", "y")}
    t["bad"] = a.add("bad", (1, 2, 2, 4), "fp16")
    be = a.allocate()
    rng = np.random.default_rng(1)
    av, bv = rng.standard_normal(shape).astype(np.float16), rng.standard_normal(shape).astype(np.float16)
    be.write(t["a"], av)
    be.write(t["b"], bv)
    run(be, op("add_fwd", a=t["a"], b=t["b"], y=t["y"], activation="relu"))
    np.testing.assert_array_equal(be.read(t["y"]), np.maximum(av.astype(np.float32) + bv, 0).astype(np.float16))
    with pytest.raises(Exception, match="must have a's shape"):
        be.capture("g", [op("add_fwd", a=t["a"], b=t["bad"], y=t["y"])])
