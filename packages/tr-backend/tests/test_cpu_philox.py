"""The CPU backend's allocation-free Philox4x32-10 is bit-identical to the tr.core.philox reference."""

import numpy as np
import pytest

from tr.backend.cpu.philox_fast import PhiloxBlocks, keep_threshold
from tr.core import philox


@pytest.mark.parametrize("seed", [0, 1, 0xFFFFFFFFFFFFFFFF, 0x0123456789ABCDEF, 2**32 + 7])
@pytest.mark.parametrize("n,chunk,offset", [(1000, 64, 0), (5000, 1 << 15, 0), (777, 100, (1 << 32) - 300)])
def test_uniform_bit_identical(seed, n, chunk, offset):
    out = np.empty(n, np.float32)
    PhiloxBlocks(n, chunk).uniform(seed, out, offset)
    np.testing.assert_array_equal(out, philox.uniform(seed, offset, n))


@pytest.mark.parametrize("p", [0.0, 1e-9, 0.1, 0.3, 0.5, 0.999])
def test_keep_mask_is_uniform_ge_p(p):
    n = 4096
    keep = np.empty(n, bool)
    PhiloxBlocks(n, 1000).keep_mask(42, keep_threshold(p), keep)
    np.testing.assert_array_equal(keep, philox.uniform(42, 0, n) >= np.float32(p))
