"""dropout_fwd / dropout_bwd: counter-based masks from tr.core.philox, checked exactly.

The mask is a pure function of (seed, flat index), so the test recomputes it with tr.core.philox and
compares bit for bit; values are compared exactly too (x / (1-p) in float32 on both sides; FP16 and BF16: that
quotient of the rounded values rounded once, as torch's float32 quotient rounded to the dtype).
"""

import numpy as np
import pytest
import torch
from backend_testkit import HALF_DTYPES, SimpleArena, as_dtype, assert_rounded, op, run

from tr.core import philox


def _setup(shape, seed, dtype="fp32"):
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("x", "y", "dy", "dx")}
    t["mask"] = a.add("mask", shape, "int8")
    t["seed"] = a.add("seed", (2,), "int32")
    be = a.allocate()
    be.write(t["seed"], np.array([seed], dtype="<u8").view(np.int32))
    return be, t


def _seed(be, t):
    return int(be.read(t["seed"]).reshape(-1).view("<u8")[0])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_forward_matches_philox_and_advances_seed(p):
    shape = (4, 3, 5, 7)
    be, t = _setup(shape, 0x0123456789ABCDEF)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    be.write(t["x"], x)
    g = be.capture("g", [op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=p)])
    seed = 0x0123456789ABCDEF
    masks = []
    for _ in range(2):
        be.launch(g)
        seed = philox.splitmix64(seed)
        assert _seed(be, t) == seed
        keep = philox.uniform(seed, 0, x.size).reshape(shape) >= np.float32(p)
        np.testing.assert_array_equal(be.read(t["mask"]), keep.astype(np.int8))
        np.testing.assert_array_equal(be.read(t["y"]), np.where(keep, x / np.float32(1 - p), 0).astype(np.float32))
        masks.append(keep)
    assert not np.array_equal(masks[0], masks[1])  # a fresh mask every launch


def test_dropout_keep_rate():
    shape = (8, 16, 16, 8)
    be, t = _setup(shape, 7)
    be.write(t["x"], np.ones(shape))
    run(be, op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=0.3))
    rate = float(be.read(t["mask"]).mean())
    assert abs(rate - 0.7) < 0.01  # 16384 draws: 4.5 standard deviations
    assert abs(float(be.read(t["y"]).mean()) - 1.0) < 0.015  # inverted dropout keeps the mean


def test_dropout_backward_and_in_place():
    shape = (2, 3, 3, 4)
    be, t = _setup(shape, 99)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 1.0]
    dy = rng.standard_normal(shape).astype(np.float32)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=0.5),
        op("dropout_bwd", dy=t["dy"], mask=t["mask"], dx=t["dx"], p=0.5))
    keep = be.read(t["mask"]).astype(bool)
    y = be.read(t["y"])
    assert np.all(y[~keep] == 0)  # dropped elements are 0 even for inf/NaN inputs
    np.testing.assert_array_equal(be.read(t["dx"]), np.where(keep, dy / np.float32(0.5), 0).astype(np.float32))
    run(be, op("dropout_bwd", dy=t["dy"], mask=t["mask"], dx=t["dy"], p=0.5))  # dx over dy
    np.testing.assert_array_equal(be.read(t["dy"]), be.read(t["dx"]))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_dropout_p_zero_is_identity_in_16_bits(dtype):
    shape = (2, 2, 2, 8)
    be, t = _setup(shape, 5, dtype)
    x = as_dtype(np.random.default_rng(3).standard_normal(shape), dtype)[0]  # float16 or BF16 bits
    be.write(t["x"], x)
    run(be, op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=0.0))
    np.testing.assert_array_equal(be.read(t["y"]), x)
    assert be.read(t["mask"]).all()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_dropout_in_16_bits_rounds_the_float32_quotient_once(dtype):
    """y = x / (1-p) and dx = dy / (1-p) in float32 from the rounded values, rounded once (CUDA's from_f): torch's
    float32 division rounded to the dtype, exactly; the mask is the FP32 plan's."""
    shape, p = (3, 4, 5, 8), 0.3
    be, t = _setup(shape, 0xFEEDFACE, dtype)
    rng = np.random.default_rng(4)
    (x, x32), (dy, dy32) = as_dtype(rng.standard_normal(shape), dtype), as_dtype(rng.standard_normal(shape), dtype)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=p),
        op("dropout_bwd", dy=t["dy"], mask=t["mask"], dx=t["dx"], p=p))
    keep = philox.uniform(philox.splitmix64(0xFEEDFACE), 0, x.size).reshape(shape) >= np.float32(p)
    np.testing.assert_array_equal(be.read(t["mask"]), keep.astype(np.int8))
    q, k = torch.tensor(1 - p, dtype=torch.float32), torch.from_numpy(keep)
    zero = torch.zeros(shape)
    assert_rounded(be.read(t["y"]), torch.where(k, torch.from_numpy(x32) / q, zero), dtype)
    assert_rounded(be.read(t["dx"]), torch.where(k, torch.from_numpy(dy32) / q, zero), dtype)


def test_dropout_rejects_p_one():
    be, t = _setup((1, 1, 1, 4), 1)
    with pytest.raises(Exception, match=r"dropout_fwd .*p must be in \[0, 1\)"):
        be.capture("g", [op("dropout_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=1.0)])
