"""tr.core.bf16: the one bfloat16 rounding (nearest, ties to even, overflow to inf, NaN quiet), exact widening,
and the same bits as torch's own cast."""

import numpy as np
import pytest

from tr.core.bf16 import MAX, QUIET_NAN, bf16_bits, bf16_values, round_bf16


def test_ties_round_to_even_and_halfway_up_otherwise():
    x = np.array([1.00390625, 1.01171875, 1.0 + 2**-8 + 2**-20, -1.00390625], np.float32)
    assert round_bf16(x).tolist() == [1.0, 1.015625, 1.0078125, -1.0]


def test_overflow_goes_to_infinity_and_the_largest_finite_value_stays():
    x = np.array([MAX, np.float32(3.4e38), np.inf, -np.inf, -MAX], np.float32)
    assert round_bf16(x).tolist() == [MAX, np.inf, np.inf, -np.inf, -MAX]


def test_nan_becomes_the_quiet_nan_and_subnormals_round():
    x = np.array([np.nan, -np.nan, 1e-40, -1e-45, 0.0, -0.0], np.float32)
    b = bf16_bits(x)
    assert b[0] == b[1] == QUIET_NAN
    assert np.isnan(bf16_values(b[:2])).all()
    assert bf16_values(b[2:]).tolist() == [2.0**-133, -0.0, 0.0, -0.0]  # 2^-133: the subnormal step
    assert np.signbit(bf16_values(b[5:])).all()


def test_widening_is_exact_and_round_trips():
    bits = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16)
    finite = ~np.isnan(bf16_values(bits))
    assert (bf16_bits(bf16_values(bits))[finite] == bits[finite]).all()


def test_out_arrays_are_written_in_place_and_shapes_kept():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    out = np.empty((3, 4), np.uint16)
    assert bf16_bits(x, out=out) is out
    wide = np.empty((3, 4), np.float32)
    assert bf16_values(out, out=wide) is wide and wide.shape == (3, 4)
    with pytest.raises(TypeError, match="uint16"):
        bf16_values(x)


def test_the_same_bits_as_torchs_cast():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1 << 18) * np.exp(rng.uniform(-90, 88, 1 << 18))).astype(np.float32)
    x = np.concatenate([x, np.array([np.inf, -np.inf, MAX, -MAX, 1e-40, 1.00390625], np.float32)])
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert (bf16_bits(x) == theirs).all()
