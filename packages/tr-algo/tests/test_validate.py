import numpy as np
import pytest

from tr.algo import _validate as v
from tr.core.errors import ConfigError


def test_real_accepts_numbers_and_numpy_scalars():
    assert v.real("x", 3) == 3.0 and isinstance(v.real("x", 3), float)
    assert v.real("x", np.float32(0.5)) == 0.5
    assert v.non_negative("x", 0) == 0.0
    assert v.positive("x", 1e-30) == 1e-30
    assert v.unit_open("x", 0.0) == 0.0 and v.unit_closed("x", 1.0) == 1.0


@pytest.mark.parametrize("bad", [True, "1", b"1", None, [1.0], float("nan"), float("-inf")])
def test_real_refuses_non_numbers(bad):
    with pytest.raises(ConfigError, match="my value"):
        v.real("my value", bad)


def test_ranges_name_the_value_and_the_bound():
    with pytest.raises(ConfigError, match=r"lr must be >= 0, got -1"):
        v.non_negative("lr", -1)
    with pytest.raises(ConfigError, match=r"eps must be > 0, got 0"):
        v.positive("eps", 0)
    with pytest.raises(ConfigError, match=r"beta1 must be in \[0, 1\), got 1"):
        v.unit_open("beta1", 1)
    with pytest.raises(ConfigError, match=r"f must be in \[0, 1\], got 1.01"):
        v.unit_closed("f", 1.01)


def test_integer_and_boolean():
    assert v.integer("n", 3, 1) == 3 and v.integer("n", 4.0, 1) == 4 and v.integer("n", np.int64(2), 0) == 2
    for bad in (2.5, True, "3", None, float("inf")):
        with pytest.raises(ConfigError, match="n must be an integer"):
            v.integer("n", bad, 0)
    with pytest.raises(ConfigError, match="n must be >= 1, got 0"):
        v.integer("n", 0, 1)
    assert v.boolean("b", False) is False
    with pytest.raises(ConfigError, match="b must be True or False, got 1"):
        v.boolean("b", 1)
