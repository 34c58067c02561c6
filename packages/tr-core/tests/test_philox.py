"""Philox4x32-10 against Random123's published known-answer vectors, and bulk == single draws."""

import numpy as np
import pytest

from tr.core import philox
from tr.core.errors import ConfigError

# Random123 kat_vectors: philox4x32 10 rounds (counter, key, expected output)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answer_vectors(ctr, key, expected):
    out = philox.philox4x32(np.array(ctr, np.uint32), key)
    assert tuple(int(x) for x in out) == expected


def test_kat_through_seed_offset_api():
    # seed = key (lo, hi), offset = counter words 0 and 1 (words 2, 3 are zero)
    assert tuple(int(x) for x in philox.raw(0, 0)) == KAT[0][2]


@pytest.mark.parametrize("fn", [philox.uniform, philox.uint32, philox.uint64, philox.normal])
def test_bulk_equals_singles(fn):
    seed, base, n = 0xDEADBEEFCAFE, 2**32 - 3, 40  # crosses the 32-bit counter boundary
    bulk = fn(seed, base, n)
    singles = [fn(seed, base + i) for i in range(n)]
    assert np.array_equal(np.asarray(bulk), np.asarray(singles, dtype=np.asarray(bulk).dtype))


def test_randint_bulk_and_range():
    v = philox.randint(7, 100, -3, 5, 2000)
    assert v.min() == -3 and v.max() == 5
    assert [philox.randint(7, 100 + i, -3, 5) for i in range(20)] == list(v[:20])


def test_uniform_statistics():
    u = philox.uniform(42, 0, 200_000)
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002


def test_normal_statistics():
    z = philox.normal(42, 0, 200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


def test_shuffle_is_permutation_and_pure():
    p = philox.shuffle_indices(1000, 5)
    assert sorted(p.tolist()) == list(range(1000))
    assert np.array_equal(p, philox.shuffle_indices(1000, 5))
    assert not np.array_equal(p, philox.shuffle_indices(1000, 6))


def test_shuffle_matches_reference_fisher_yates():
    n, seed = 50, 99
    ref = list(range(n))
    for i in range(n - 1, 0, -1):
        j = int(philox.raw(seed, i)[0]) % (i + 1)
        ref[i], ref[j] = ref[j], ref[i]
    assert philox.shuffle_indices(n, seed).tolist() == ref


def test_derive_seed_is_pure_and_distinct():
    a = philox.derive_seed(1, 2, 3)
    assert a == philox.derive_seed(1, 2, 3)
    assert len({philox.derive_seed(1, e, i) for e in range(10) for i in range(100)}) == 1000


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_bad_seed(bad):
    with pytest.raises(ConfigError, match="seed"):
        philox.uniform(bad, 0)


def test_bad_randint_range():
    with pytest.raises(ConfigError, match="lo=5, hi=2"):
        philox.randint(1, 0, 5, 2)
