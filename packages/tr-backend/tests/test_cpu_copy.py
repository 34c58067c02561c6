"""copy, accumulate, flatten_fwd/bwd, channel_pad_fwd/bwd: data movement, compared exactly (FP16 and BF16 too)."""

import numpy as np
import pytest
import torch
from backend_testkit import HALF_DTYPES, SimpleArena, as_dtype, assert_rounded, op, run


def test_copy_and_accumulate():
    a = SimpleArena()
    x, y = a.add("x", (2, 3, 4, 5)), a.add("y", (6, 1, 1, 20))
    h, acc = a.add("h", (2, 3, 4, 5), "fp16"), a.add("acc", (2, 3, 4, 5), "fp16")
    be = a.allocate()
    rng = np.random.default_rng(0)
    xv, yv = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((6, 1, 1, 20))
    be.write(x, xv)
    be.write(y, yv)
    run(be, op("accumulate", x=x, y=y))
    np.testing.assert_array_equal(be.read(y).ravel(), (yv.astype(np.float32).ravel() + xv.astype(np.float32).ravel()))
    run(be, op("copy", x=x, y=y))
    np.testing.assert_array_equal(be.read(y).ravel(), xv.astype(np.float32).ravel())
    hv, av = xv.astype(np.float16), rng.standard_normal((2, 3, 4, 5)).astype(np.float16)
    be.write(h, hv)
    be.write(acc, av)
    run(be, op("accumulate", x=h, y=acc))
    np.testing.assert_array_equal(be.read(acc), (hv.astype(np.float32) + av.astype(np.float32)).astype(np.float16))


@pytest.mark.parametrize("xdt, ydt", [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "bf16"), ("bf16", "fp32"),
                                      ("fp16", "bf16")])
def test_accumulate_in_16_bits_rounds_the_float32_sum_once(xdt, ydt):
    """y += x: both widened, one float32 add, rounded once to y's dtype (CUDA's from_f(to_f(y) + to_f(x))): torch's
    float32 sum of the same values rounded to y's dtype, exactly. copy moves the bits (BF16's too)."""
    shape = (2, 3, 4, 5)
    a = SimpleArena()
    x, y, z = a.add("x", shape, xdt), a.add("y", shape, ydt), a.add("z", shape, xdt)
    be = a.allocate()
    rng = np.random.default_rng(4)
    xs, x32 = as_dtype(rng.standard_normal(shape), xdt)
    ys, y32 = as_dtype(rng.standard_normal(shape), ydt)
    be.write(x, xs)
    be.write(y, ys)
    run(be, op("accumulate", x=x, y=y))
    assert_rounded(be.read(y), torch.from_numpy(y32) + torch.from_numpy(x32), ydt)
    run(be, op("copy", x=x, y=z))
    np.testing.assert_array_equal(be.read(z), xs)


def test_copy_rejects_a_cast():
    a = SimpleArena()
    x, y = a.add("x", (4,)), a.add("y", (4,), "fp16")
    be = a.allocate()
    with pytest.raises(Exception, match="copy does not cast"):
        be.capture("g", [op("copy", x=x, y=y)])


def test_flatten_round_trip():
    a = SimpleArena()
    x, y, dx = a.add("x", (3, 2, 4, 5)), a.add("y", (3, 1, 1, 40)), a.add("dx", (3, 2, 4, 5))
    be = a.allocate()
    xv = np.random.default_rng(1).standard_normal((3, 2, 4, 5)).astype(np.float32)
    be.write(x, xv)
    run(be, op("flatten_fwd", x=x, y=y), op("flatten_bwd", dy=y, dx=dx))
    np.testing.assert_array_equal(be.read(y).reshape(3, 40), xv.reshape(3, 40))  # NHWC order
    np.testing.assert_array_equal(be.read(dx), xv)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_channel_padding(dtype):
    a = SimpleArena()
    x, y, dx = a.add("x", (2, 3, 3, 3), dtype), a.add("y", (2, 3, 3, 8), dtype), a.add("dx", (2, 3, 3, 3), dtype)
    be = a.allocate()
    be.write(y, np.full((2, 3, 3, 8), 7.0))  # stale values in the padding must be cleared
    xv = as_dtype(np.random.default_rng(2).standard_normal((2, 3, 3, 3)), dtype)[0]  # float16 or BF16 bits
    be.write(x, xv)
    run(be, op("channel_pad_fwd", x=x, y=y), op("channel_pad_bwd", dy=y, dx=dx))
    out = be.read(y)
    np.testing.assert_array_equal(out[..., :3], xv)
    assert not out[..., 3:].any()  # +0.0: zero bits
    np.testing.assert_array_equal(be.read(dx), xv)
