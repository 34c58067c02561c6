"""copy, accumulate, flatten_fwd/bwd, channel_pad_fwd/bwd: data movement, compared exactly."""

import numpy as np
import pytest
from backend_testkit import SimpleArena, op, run


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


def test_channel_padding():
    a = SimpleArena()
    x, y, dx = a.add("x", (2, 3, 3, 3), "fp16"), a.add("y", (2, 3, 3, 8), "fp16"), a.add("dx", (2, 3, 3, 3), "fp16")
    be = a.allocate()
    be.write(y, np.full((2, 3, 3, 8), 7.0))  # stale values in the padding must be cleared
    xv = np.random.default_rng(2).standard_normal((2, 3, 3, 3)).astype(np.float16)
    be.write(x, xv)
    run(be, op("channel_pad_fwd", x=x, y=y), op("channel_pad_bwd", dy=y, dx=dx))
    out = be.read(y)
    np.testing.assert_array_equal(out[..., :3], xv)
    assert not out[..., 3:].any()
    np.testing.assert_array_equal(be.read(dx), xv)
