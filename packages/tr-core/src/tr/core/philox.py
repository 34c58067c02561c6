"""Philox4x32-10 (Salmon et al., SC'11), vectorised with numpy, as pure functions of (key, counter).

The generator is stateless: a draw is a function of a 64-bit key (the seed) and a 64-bit offset.
Element ``i`` of a bulk draw starting at ``offset`` equals the single draw at ``offset + i``, so results
never depend on how the work is split between threads. Conventions follow the seed system (§13):
key = (seed low 32, seed high 32), counter = (offset low 32, offset high 32, 0, 0).

Derived draws (per counter, from the four 32-bit outputs r0..r3):
- uniform float32 in [0, 1): (r0 >> 8) * 2**-24
- uint32: r0;  uint64: r0 << 32 | r1
- normal: Box-Muller on r0, r1 with u1 = ((r0 >> 8) | 1) * 2**-24, u2 = (r1 >> 8) * 2**-24
- random integer in [lo, hi]: lo + uint64 % (hi - lo + 1)
"""

from __future__ import annotations

import numpy as np

from tr.core.errors import ConfigError

PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint32(0x9E3779B9)
PHILOX_W1 = np.uint32(0xBB67AE85)
ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)
_U64_MAX = (1 << 64) - 1


def _check_u64(name: str, value: int) -> int:
    value = int(value)
    if not 0 <= value <= _U64_MAX:
        raise ConfigError(f"{name} must be an unsigned 64-bit integer, got {value}")
    return value


def philox4x32(counter: np.ndarray, key: tuple, rounds: int = ROUNDS) -> np.ndarray:
    """Raw Philox4x32: ``counter`` is uint32 [..., 4], ``key`` two uint32 (ints, or arrays broadcasting against
    the counters' leading shape: one key per counter); returns uint32 [..., 4]."""
    c = np.asarray(counter, dtype=np.uint32)
    if c.shape[-1] != 4:
        raise ConfigError(f"philox4x32 counter must have a trailing dimension of 4, got shape {c.shape}")
    c0, c1, c2, c3 = (c[..., i].astype(np.uint64) for i in range(4))
    k0 = np.asarray(key[0], dtype=np.uint64) & _MASK32
    k1 = np.asarray(key[1], dtype=np.uint64) & _MASK32
    for r in range(rounds):
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0 = hi1 ^ c1 ^ k0
        c1 = lo1
        c2 = hi0 ^ c3 ^ k1
        c3 = lo0
        if r + 1 < rounds:
            k0 = (k0 + np.uint64(PHILOX_W0)) & _MASK32
            k1 = (k1 + np.uint64(PHILOX_W1)) & _MASK32
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1).astype(np.uint32)


def raw_keys(keys: np.ndarray, offset: int) -> np.ndarray:
    """The four 32-bit outputs at one ``offset`` for many 64-bit keys (uint64 [n]): uint32 [n, 4]."""
    offset = _check_u64("offset", offset)
    keys = np.asarray(keys, dtype=np.uint64)
    ctr = np.zeros((*keys.shape, 4), dtype=np.uint32)
    ctr[..., 0] = offset & 0xFFFFFFFF
    ctr[..., 1] = offset >> 32
    return philox4x32(ctr, (keys & _MASK32, keys >> np.uint64(32)))


def raw(seed: int, offset: int, count: int | None = None) -> np.ndarray:
    """The four 32-bit outputs at offsets ``offset .. offset+count-1``: uint32 [count, 4] (or [4])."""
    seed = _check_u64("seed", seed)
    offset = _check_u64("offset", offset)
    n = 1 if count is None else int(count)
    if n < 0:
        raise ConfigError(f"count must be >= 0, got {count}")
    offs = (np.uint64(offset) + np.arange(n, dtype=np.uint64)) if n else np.zeros(0, np.uint64)
    ctr = np.zeros((n, 4), dtype=np.uint32)
    ctr[:, 0] = (offs & _MASK32).astype(np.uint32)
    ctr[:, 1] = (offs >> np.uint64(32)).astype(np.uint32)
    out = philox4x32(ctr, (seed & 0xFFFFFFFF, seed >> 32))
    return out[0] if count is None else out


def uniform(seed: int, offset: int, count: int | None = None) -> np.ndarray | float:
    """Float32 uniform in [0, 1) at consecutive offsets."""
    r0 = raw(seed, offset, 1 if count is None else count)[:, 0]
    u = ((r0 >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)
    return float(u[0]) if count is None else u


def uint32(seed: int, offset: int, count: int | None = None) -> np.ndarray | int:
    r0 = raw(seed, offset, 1 if count is None else count)[:, 0]
    return int(r0[0]) if count is None else r0


def uint64(seed: int, offset: int, count: int | None = None) -> np.ndarray | int:
    r = raw(seed, offset, 1 if count is None else count)
    v = (r[:, 0].astype(np.uint64) << np.uint64(32)) | r[:, 1].astype(np.uint64)
    return int(v[0]) if count is None else v


def normal(
    seed: int, offset: int, count: int | None = None, mean: float = 0.0, std: float = 1.0
) -> np.ndarray | float:
    """Gaussian draws by Box-Muller on (r0, r1); one normal per counter."""
    r = raw(seed, offset, 1 if count is None else count)
    u1 = (((r[:, 0] >> np.uint32(8)) | np.uint32(1)).astype(np.float64)) * 2.0**-24
    u2 = (r[:, 1] >> np.uint32(8)).astype(np.float64) * 2.0**-24
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    z = (mean + std * z).astype(np.float32)
    return float(z[0]) if count is None else z


def randint(seed: int, offset: int, lo: int, hi: int, count: int | None = None) -> np.ndarray | int:
    """Integers in the closed range [lo, hi]: lo + uint64 % (hi - lo + 1)."""
    if hi < lo:
        raise ConfigError(f"randint needs lo <= hi, got lo={lo}, hi={hi}")
    span = hi - lo + 1
    v = uint64(seed, offset, 1 if count is None else count)
    if span > _U64_MAX:
        out = v.astype(object) + lo
    else:
        out = (v % np.uint64(span)).astype(np.int64) + lo
    return int(out[0]) if count is None else out


def shuffle_indices(n: int, seed: int) -> np.ndarray:
    """Fisher-Yates permutation of range(n), a pure function of (n, seed).

    For i = n-1 .. 1: j = r0(seed, offset=i) % (i + 1); swap(i, j).
    The random numbers are drawn in one vectorised call; the swaps are inherently sequential.
    """
    if n < 0:
        raise ConfigError(f"shuffle length must be >= 0, got {n}")
    perm = np.arange(n, dtype=np.int64)
    if n < 2:
        return perm
    r0 = raw(seed, 0, n)[:, 0].astype(np.int64)
    idx = np.arange(n, dtype=np.int64)
    js = r0 % (idx + 1)
    for i in range(n - 1, 0, -1):
        j = js[i]
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser, used to derive independent seeds (e.g. per rank)."""
    x = (int(x) + 0x9E3779B97F4A7C15) & _U64_MAX
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64_MAX
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64_MAX
    return z ^ (z >> 31)


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every element of a uint64 array (the arithmetic wraps modulo 2^64, as the masks above do)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def derive_seed(*parts: int) -> int:
    """A 64-bit seed that is a pure function of its integer parts (e.g. (seed, epoch, sample))."""
    h = 0x6A09E667F3BCC908
    for p in parts:
        h = splitmix64(h ^ (int(p) & _U64_MAX))
    return h
