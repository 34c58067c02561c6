"""The native Philox4x32-10 and seed derivation are bit-identical to tr.core.philox, and the schedule of
tr.data.seeds (sample seeds, per-transform streams, shuffles) is what the native pipeline uses."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core import philox
from tr.core.errors import ConfigError
from tr.data import Compose, RandomCrop, _native
from tr.data.seeds import TAG_SHUFFLE, TAG_TRAIN, TAG_VAL, sample_seed, seed_prefix, shuffle_order

SEEDS = [0, 1, 123, 2**32 - 1, 2**32, 0xDEADBEEFCAFEBABE, 2**64 - 1]
OFFSETS = [0, 1, 2**32 - 2, 2**32 + 5, 7 << 32, 2**64 - 40]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("offset", OFFSETS)
def test_raw_draws_equal_python(seed, offset):
    np.testing.assert_array_equal(_native.philox_raw(seed, offset, 33), philox.raw(seed, offset, 33))


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_derived_draws_equal_python(seed):
    np.testing.assert_array_equal(_native.philox_uniform(seed, 11, 500), philox.uniform(seed, 11, 500))
    np.testing.assert_array_equal(_native.philox_randint(seed, 3, -5, 17, 500), philox.randint(seed, 3, -5, 17, 500))
    np.testing.assert_array_equal(_native.philox_randint(seed, 3, 0, 2**40, 50), philox.randint(seed, 3, 0, 2**40, 50))
    a = _native.philox_normal(seed, 9, 2000, 1.5, 3.0)
    b = philox.normal(seed, 9, 2000, mean=1.5, std=3.0)
    np.testing.assert_allclose(a, b, rtol=0, atol=4e-6)  # libm vs numpy log/cos may differ in the last ulp
    assert (a == b).mean() > 0.99


def test_derive_seed_equals_python():
    for parts in ([], [0], [1, 2, 3], [2**64 - 1, 0, 5], [123, TAG_VAL, 7, 59999]):
        assert _native.derive_seed(parts) == philox.derive_seed(*parts)


def test_sample_seed_scheme():
    assert sample_seed(5, 3, 17) == philox.derive_seed(5, TAG_TRAIN, 3, 17)
    assert sample_seed(5, 3, 17, train=False) == philox.derive_seed(5, TAG_VAL, 3, 17)
    assert seed_prefix(5, 3) == philox.derive_seed(5, TAG_TRAIN, 3)
    assert len({sample_seed(5, e, i) for e in range(4) for i in range(50)}) == 200


def test_shuffle_is_a_pure_function_of_seed_and_epoch():
    a = shuffle_order(1000, 42, 3)
    np.testing.assert_array_equal(a, philox.shuffle_indices(1000, philox.derive_seed(42, TAG_SHUFFLE, 3)))
    np.testing.assert_array_equal(a, shuffle_order(1000, 42, 3))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, shuffle_order(1000, 42, 4))
    assert not np.array_equal(a, shuffle_order(1000, 43, 3))


@pytest.mark.parametrize("seed", SEEDS)
def test_native_shuffle_is_tr_core_s_permutation(seed):
    for n in (0, 1, 2, 3, 17, 1000, 70001):
        np.testing.assert_array_equal(_native.shuffle_indices(n, seed), philox.shuffle_indices(n, seed))
    assert _native.shuffle_indices(5, seed).dtype == np.int64
    with pytest.raises(ConfigError, match="shuffle length"):
        _native.shuffle_indices(-1, seed)


def test_each_transform_owns_a_stream():
    """Adding a transform before another changes neither's draws (streams are keyed by chain position)."""
    img = np.zeros((40, 40, 1), np.uint8)
    a = Compose([RandomCrop(20)]).params(img.shape, index=4)[0]["params"]
    k = sample_seed(0, 0, 4)
    top = philox.randint(k, 1 << 32, 0, 20)
    left = philox.randint(k, (1 << 32) + 1, 0, 20)
    assert (a["top"], a["left"]) == (top, left)
