import math

import numpy as np
import pytest
import torch

from tr.algo.init import (
    FanMode,
    Initializer,
    InitKind,
    InitSpec,
    constant,
    fans,
    initialize,
    kaiming_normal,
    kaiming_uniform,
    ones,
    truncated_normal,
    xavier_normal,
    xavier_uniform,
    zeros,
)
from tr.core import philox
from tr.core.errors import ConfigError, ShapeError

CONV = (64, 3, 3, 32)  # KRSC: fan_in = 3*3*32 = 288, fan_out = 64*3*3 = 576
FC = (100, 1, 1, 400)  # [out, 1, 1, in]
TRUNC_STD_FACTOR = 0.8796256610  # std of N(0, 1) truncated to [-2, 2]


def _torch_weight(shape_krsc) -> torch.Tensor:
    k, r, s, c = shape_krsc
    return torch.empty(k, c, r, s, dtype=torch.float64)  # torch's OIHW


def test_fans_of_fc_and_conv_layouts_match_torch():
    assert fans(CONV) == (288, 576)
    assert fans(FC) == (400, 100)
    assert fans((10, 20)) == (20, 10)
    for shape in (CONV, FC, (8, 5, 5, 3), (1, 1, 1, 1)):
        assert fans(shape) == torch.nn.init._calculate_fan_in_and_fan_out(_torch_weight(shape))
    for bad in ((5,), (2, 3, 4), (0, 3, 3, 1)):
        with pytest.raises(ShapeError):
            fans(bad)


def test_std_and_bound_formulas_match_torch_nn_init():
    fi, fo = fans(CONV)
    relu = torch.nn.init.calculate_gain("relu")
    assert kaiming_uniform().bound(fi, fo) == pytest.approx(relu * math.sqrt(3.0 / fi), rel=1e-12)
    assert kaiming_uniform(mode=FanMode.FAN_OUT).bound(fi, fo) == pytest.approx(relu * math.sqrt(3.0 / fo))
    assert kaiming_normal().std(fi, fo) == pytest.approx(relu / math.sqrt(fi))
    assert kaiming_uniform(gain=1.0).std(fi, fo) == pytest.approx(1 / math.sqrt(fi))
    assert xavier_uniform().bound(fi, fo) == pytest.approx(math.sqrt(6.0 / (fi + fo)))
    assert xavier_normal(gain=2.0).std(fi, fo) == pytest.approx(2.0 * math.sqrt(2.0 / (fi + fo)))
    assert truncated_normal(scale=1.0).std(fi, fo) == pytest.approx(math.sqrt(1.0 / fi))
    assert truncated_normal().bound(fi, fo) == pytest.approx(2 * math.sqrt(2.0 / fi))
    assert kaiming_normal().bound(fi, fo) == math.inf
    assert constant(-3.0).bound(fi, fo) == 3.0 and zeros().std(fi, fo) == 0.0
    assert InitSpec(kind=InitKind.XAVIER_NORMAL).effective_gain == 1.0
    assert InitSpec(kind=InitKind.KAIMING_UNIFORM).effective_gain == pytest.approx(math.sqrt(2.0))


def _torch_sample(fn, shape, **kw) -> np.ndarray:
    torch.manual_seed(0)
    t = _torch_weight(shape)
    fn(t, **kw)
    return t.numpy()


@pytest.mark.parametrize(
    "spec,torch_fn,kw",
    [
        (kaiming_uniform(), torch.nn.init.kaiming_uniform_, {"nonlinearity": "relu"}),
        (kaiming_uniform(mode=FanMode.FAN_OUT), torch.nn.init.kaiming_uniform_,
         {"nonlinearity": "relu", "mode": "fan_out"}),
        (kaiming_normal(), torch.nn.init.kaiming_normal_, {"nonlinearity": "relu"}),
        (xavier_uniform(), torch.nn.init.xavier_uniform_, {}),
        (xavier_normal(gain=1.5), torch.nn.init.xavier_normal_, {"gain": 1.5}),
        (truncated_normal(), torch.nn.init.trunc_normal_,
         {"std": math.sqrt(2.0 / 288), "a": -2 * math.sqrt(2.0 / 288), "b": 2 * math.sqrt(2.0 / 288)}),
    ],
    ids=["kaiming_uniform", "kaiming_uniform_fan_out", "kaiming_normal", "xavier_uniform", "xavier_normal",
         "trunc_normal"],
)
def test_statistics_match_torch(spec, torch_fn, kw):
    fi, fo = fans(CONV)
    x = initialize(spec, CONV, fi, fo, seed=123, stream_id=4)
    assert x.dtype == np.float32 and x.shape == CONV
    ref = _torch_sample(torch_fn, CONV, **kw)
    n = x.size
    expected_std = spec.std(fi, fo) * (TRUNC_STD_FACTOR if spec.kind is InitKind.TRUNC_NORMAL else 1.0)
    # the sample std of n draws is within a few 1/sqrt(2n) of the truth
    assert x.std() == pytest.approx(expected_std, rel=4 / math.sqrt(2 * n))
    assert ref.std() == pytest.approx(expected_std, rel=4 / math.sqrt(2 * n))
    assert abs(x.mean()) < 4 * expected_std / math.sqrt(n)
    b = spec.bound(fi, fo)
    if math.isfinite(b):
        assert np.abs(x).max() <= b * (1 + 1e-6)
        assert np.abs(x).max() > 0.99 * b  # the whole range is used
        assert np.abs(ref).max() <= b * (1 + 1e-6)


def test_fc_layout_kaiming_uniform_bound():
    fi, fo = fans(FC)
    x = initialize(kaiming_uniform(), FC, fi, fo, seed=1, stream_id=0)
    b = math.sqrt(2.0) * math.sqrt(3.0 / 400)
    assert np.abs(x).max() <= b and np.abs(x).max() > 0.999 * b
    assert x.min() < -0.999 * b


def test_draws_are_philox_keyed_by_seed_and_stream():
    fi, fo = fans(CONV)
    spec = kaiming_uniform()
    a = initialize(spec, CONV, fi, fo, seed=77, stream_id=3)
    assert a.tobytes() == initialize(spec, CONV, fi, fo, seed=77, stream_id=3).tobytes()
    assert not np.array_equal(a, initialize(spec, CONV, fi, fo, seed=77, stream_id=4))
    assert not np.array_equal(a, initialize(spec, CONV, fi, fo, seed=78, stream_id=3))
    key = philox.derive_seed(77, 3)
    b = spec.bound(fi, fo)
    u = philox.uniform(key, 0, 10).astype(np.float64)
    np.testing.assert_array_equal(a.ravel()[:10], (-b + 2 * b * u).astype(np.float32))
    # element i depends only on i, not on the shape it is laid out in
    flat = initialize(spec, (a.size, 1), fi, fo, seed=77, stream_id=3)
    np.testing.assert_array_equal(flat.ravel(), a.ravel())
    std = kaiming_normal().std(fi, fo)
    nrm = initialize(kaiming_normal(), CONV, fi, fo, seed=77, stream_id=3)
    np.testing.assert_allclose(nrm.ravel()[:10], std * philox.normal(key, 0, 10).astype(np.float64), rtol=1e-6)


def test_truncated_normal_redraws_at_offset_round_times_n_plus_i():
    shape = (50, 1, 1, 40)
    n = 2000
    fi, fo = fans(shape)
    spec = truncated_normal(scale=1.0)
    x = initialize(spec, shape, fi, fo, seed=5, stream_id=9).ravel().astype(np.float64)
    sigma = spec.std(fi, fo)
    key = philox.derive_seed(5, 9)
    z0 = philox.normal(key, 0, n).astype(np.float64)
    ok = np.abs(z0) <= 2
    assert 0 < (~ok).sum() < 0.1 * n  # some rejections happened (4.55% expected)
    np.testing.assert_allclose(x[ok], sigma * z0[ok], rtol=1e-6)
    for i in np.flatnonzero(~ok)[:10]:
        r = 1
        z = philox.normal(key, r * n + int(i))
        while abs(z) > 2:
            r += 1
            z = philox.normal(key, r * n + int(i))
        assert x[i] == pytest.approx(sigma * z, rel=1e-6)
    assert np.abs(x).max() <= 2 * sigma * (1 + 1e-6)


def test_constant_kinds():
    assert np.array_equal(initialize(zeros(), (3, 4), 1, 1, 0, 0), np.zeros((3, 4), np.float32))
    assert np.array_equal(initialize(ones(), (1, 1, 1, 7), 1, 1, 0, 0), np.ones((1, 1, 1, 7), np.float32))
    c = initialize(constant(-0.25), (2, 2), 1, 1, 0, 0)
    assert c.dtype == np.float32 and np.all(c == -0.25)


def test_initializer_policy_defaults_and_families():
    init = Initializer()
    assert init.spec_for("conv") == InitSpec(kind=InitKind.TRUNC_NORMAL)
    fc = init.spec_for("fc")
    assert fc.kind is InitKind.KAIMING_UNIFORM and fc.mode is FanMode.FAN_IN
    assert fc.effective_gain == pytest.approx(math.sqrt(2.0))
    # the policy draws weights only: zeros, ones and constants are filled by their InitSpec's kind
    for family in ("bias", "bn", "", "FC", "W_FC_WEIGHT", None):
        with pytest.raises(ConfigError, match=f"initializer family {family!r} is not one of .'conv', 'fc'."):
            init.spec_for(family)
    # the seed's example: .conv(KAIMING_UNIFORM).fc(KAIMING_UNIFORM).fan(FAN_IN)
    custom = Initializer().conv(InitKind.KAIMING_UNIFORM).fc(InitKind.XAVIER_NORMAL).fan(FanMode.FAN_OUT).gain(1.0)
    assert custom.spec_for("conv") == kaiming_uniform(gain=1.0, mode=FanMode.FAN_OUT)
    assert custom.spec_for("fc").kind is InitKind.XAVIER_NORMAL
    assert custom.spec_for("fc").mode is FanMode.FAN_OUT and custom.spec_for("fc").effective_gain == 1.0
    assert Initializer().conv(InitKind.CONSTANT).constant(0.5).spec_for("conv").fill_value == 0.5
    assert Initializer().scale(1.0).spec_for("conv").std(9, 9) == pytest.approx(1 / 3)
    assert init.conv_kind is InitKind.TRUNC_NORMAL  # setters returned new values


def test_bad_specs_and_calls():
    with pytest.raises(ConfigError, match="gain must be > 0"):
        kaiming_uniform(gain=0.0)
    with pytest.raises(ConfigError, match="gain"):
        Initializer().gain(-1)
    with pytest.raises(ConfigError, match="scale must be > 0"):
        truncated_normal(scale=-2.0)
    with pytest.raises(ConfigError, match="scale"):
        Initializer().scale(float("nan"))
    with pytest.raises(ConfigError, match="unknown init kind"):
        InitSpec(kind=42)
    with pytest.raises(ConfigError, match="unknown fan mode"):
        Initializer().fan(5)
    with pytest.raises(ConfigError, match="unknown init kind"):
        Initializer().conv("kaiming")
    with pytest.raises(ConfigError, match="constant value"):
        constant(float("inf"))
    with pytest.raises(ConfigError, match="fan_in must be >= 1"):
        initialize(kaiming_uniform(), CONV, 0, 10, 0, 0)
    with pytest.raises(ConfigError, match="seed"):
        initialize(kaiming_uniform(), CONV, 10, 10, -1, 0)
    with pytest.raises(ConfigError, match="stream_id"):
        initialize(kaiming_uniform(), CONV, 10, 10, 0, 1.5)
    with pytest.raises(ConfigError, match="InitSpec"):
        initialize(InitKind.ZEROS, CONV, 10, 10, 0, 0)
    with pytest.raises(ShapeError):
        initialize(zeros(), (3, 0), 1, 1, 0, 0)


def test_redraw_helper_equals_philox_normal():
    from tr.algo.init import _normal_at

    key = philox.derive_seed(3, 1)
    offs = np.array([0, 5, 2**32 + 7, 123456789012, 2**63 + 1], dtype=np.uint64)
    expected = [philox.normal(key, int(o)) for o in offs]
    np.testing.assert_array_equal(_normal_at(key, offs), np.array(expected, dtype=np.float32))
