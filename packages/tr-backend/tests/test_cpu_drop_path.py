"""drop_path_fwd / drop_path_bwd (stochastic depth): one counter-based keep decision a sample, checked exactly.

The mask is a pure function of (seed, sample index): recomputed here with tr.core.philox and compared bit for bit.
Values: tr divides, y = x / (1-p) in float32 (dropout's rule); timm's DropPath and torchvision's stochastic_depth
multiply by the float32 reciprocal, x * (1 / (1-p)), which is within one float32 ulp of the quotient, so against
torch's formula (given tr's mask) the bound is one ulp. FP16/BF16: the float32 quotient of the rounded values
rounded once, exactly torch's float32 division rounded to the dtype.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from backend_testkit import HALF_DTYPES, SimpleArena, as_dtype, assert_rounded, op, run

from tr.core import philox
from tr.core.errors import BackendError, ShapeError

SHAPE = (6, 1, 5, 8)  # six samples of 5 tokens x 8 channels (a ViT branch's [N, 1, T, C])


def _setup(shape=SHAPE, seed=0x0123456789ABCDEF, dtype="fp32"):
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("x", "y", "dy", "dx")}
    t["mask"] = a.add("mask", (shape[0], 1, 1, 1), "int8")  # as the layer declares it: one byte a sample
    t["seed"] = a.add("seed", (2,), "int32")
    be = a.allocate()
    be.write(t["seed"], np.array([seed], dtype="<u8").view(np.int32))
    return be, t


def _seed(be, t) -> int:
    return int(be.read(t["seed"]).reshape(-1).view("<u8")[0])


def _mask(be, t) -> np.ndarray:
    return be.read(t["mask"]).reshape(-1)


def _fwd(t, p):
    return op("drop_path_fwd", x=t["x"], y=t["y"], mask=t["mask"], seed=t["seed"], p=p)


def _bwd(t, p, dx="dx"):
    return op("drop_path_bwd", dy=t["dy"], mask=t["mask"], dx=t[dx], p=p)


def _keep(seed: int, n: int, p: float) -> np.ndarray:
    """The keep decision of samples 0..n-1 under the (already advanced) seed."""
    return np.asarray(philox.uniform(seed, 0, n)) >= np.float32(p)


def _per_sample(keep: np.ndarray, ndim: int = 4) -> np.ndarray:
    return keep.reshape((-1,) + (1,) * (ndim - 1))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_forward_keeps_whole_samples_by_philox_and_advances_the_seed(p):
    shape = (64, 1, 3, 4)
    be, t = _setup(shape)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    be.write(t["x"], x)
    g = be.capture("g", [_fwd(t, p)])
    seed = 0x0123456789ABCDEF
    masks = []
    for _ in range(2):
        be.launch(g)
        seed = philox.splitmix64(seed)
        assert _seed(be, t) == seed
        keep = _keep(seed, shape[0], p)
        np.testing.assert_array_equal(_mask(be, t), keep.astype(np.int8))
        expected = np.where(_per_sample(keep), x / np.float32(1 - p), np.float32(0)).astype(np.float32)
        np.testing.assert_array_equal(be.read(t["y"]), expected)  # whole samples kept or zeroed
        masks.append(keep)
    assert not np.array_equal(masks[0], masks[1])  # a fresh draw every launch


def _torch_drop_path(x: torch.Tensor, keep: np.ndarray, p: float) -> torch.Tensor:
    """timm's drop_path (torchvision's stochastic_depth in mode "row") with tr's mask as its Bernoulli draw:
    random_tensor = bernoulli(keep_prob) of shape [N, 1, ...], divided by keep_prob, times x."""
    keep_prob = 1 - p
    random_tensor = torch.from_numpy(_per_sample(keep, x.ndim).astype(np.float32))
    random_tensor.div_(keep_prob)
    return x * random_tensor


def test_forward_and_backward_match_timms_drop_path_given_the_mask():
    p = 0.3
    be, t = _setup()
    rng = np.random.default_rng(2)
    x, dy = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, _fwd(t, p), _bwd(t, p))
    keep = _mask(be, t).astype(bool)
    assert 0 < keep.sum() < len(keep)  # (this seed drops some samples and keeps others)
    xt = torch.from_numpy(x).requires_grad_()
    yt = _torch_drop_path(xt, keep, p)
    yt.backward(torch.from_numpy(dy))
    for got, ref in ((be.read(t["y"]), yt.detach().numpy()), (be.read(t["dx"]), xt.grad.numpy())):
        assert np.all(np.abs(got - ref) <= np.spacing(np.abs(ref)))  # within one float32 ulp
        np.testing.assert_array_equal(got == 0, ref == 0)  # the same samples dropped


def test_backward_in_place_and_dropped_samples_are_zero_even_for_inf_and_nan():
    p = 0.5
    be, t = _setup(seed=99)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    x[:, 0, 0, :3] = [np.inf, -np.inf, np.nan]  # in every sample
    dy = rng.standard_normal(SHAPE).astype(np.float32)
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, _fwd(t, p), _bwd(t, p))
    keep = _mask(be, t).astype(bool)
    assert 0 < keep.sum() < len(keep)
    assert np.all(be.read(t["y"])[~keep] == 0)
    np.testing.assert_array_equal(be.read(t["dx"]), np.where(_per_sample(keep), dy / np.float32(0.5), 0))
    run(be, _bwd(t, p, dx="dy"))  # dx over dy
    np.testing.assert_array_equal(be.read(t["dy"]), be.read(t["dx"]))


def test_gradient_by_central_differences():
    """d/dx sum(w * y) with the mask held (the seed written back before every forward) is the backward's dx."""
    p, seed0 = 0.25, 0x5EED
    be, t = _setup(seed=seed0)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    be.write(t["dy"], w)
    fwd = be.capture("f", [_fwd(t, p)])

    def loss(xv: np.ndarray) -> float:
        be.write(t["seed"], np.array([seed0], dtype="<u8").view(np.int32))
        be.write(t["x"], xv)
        be.launch(fwd)
        return float(np.sum(w.astype(np.float64) * be.read(t["y"])))

    loss(x)
    run(be, _bwd(t, p))
    dx = be.read(t["dx"]).astype(np.float64)
    keep = _mask(be, t).astype(bool)
    assert 0 < keep.sum() < len(keep)
    eps = 1e-2
    numeric = np.zeros(SHAPE)
    for idx in np.ndindex(*SHAPE):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        numeric[idx] = (loss(xp) - loss(xm)) / (2 * eps)
    np.testing.assert_allclose(dx, numeric, rtol=1e-4, atol=1e-4)  # the loss is linear: float32 rounding only


def test_keep_fraction_within_a_binomial_bound():
    p, n, launches = 0.3, 256, 100
    be, t = _setup((n, 1, 1, 2), seed=7)
    be.write(t["x"], np.ones((n, 1, 1, 2)))
    g = be.capture("g", [_fwd(t, p)])
    kept = 0
    for _ in range(launches):
        be.launch(g)
        kept += int(_mask(be, t).sum())
    draws = n * launches
    sigma = math.sqrt(p * (1 - p) / draws)
    assert abs(kept / draws - (1 - p)) <= 4.5 * sigma  # 25,600 independent draws


def test_the_same_seed_gives_the_same_mask_another_seed_another():
    n, p = 128, 0.4
    shape = (n, 1, 1, 4)
    masks = {}
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        be, t = _setup(shape, seed=seed)
        be.write(t["x"], np.ones(shape))
        run(be, _fwd(t, p))
        masks[name] = _mask(be, t).tobytes()
    assert masks["a"] == masks["b"]
    assert masks["a"] != masks["c"]


def test_two_layers_on_one_stream_draw_different_masks():
    """Each forward advances the shared seed, so the second layer draws from the first one's successor."""
    n, p, seed = 128, 0.5, 0xABCDEF
    a = SimpleArena()
    t = {name: a.add(name, (n, 1, 1, 4)) for name in ("x", "y1", "y2")}
    for name in ("m1", "m2"):
        t[name] = a.add(name, (n, 1, 1, 1), "int8")
    t["seed"] = a.add("seed", (2,), "int32")
    be = a.allocate()
    be.write(t["seed"], np.array([seed], dtype="<u8").view(np.int32))
    be.write(t["x"], np.ones((n, 1, 1, 4)))
    run(be, op("drop_path_fwd", x=t["x"], y=t["y1"], mask=t["m1"], seed=t["seed"], p=p),
        op("drop_path_fwd", x=t["y1"], y=t["y2"], mask=t["m2"], seed=t["seed"], p=p))
    first, second = philox.splitmix64(seed), philox.splitmix64(philox.splitmix64(seed))
    m1, m2 = be.read(t["m1"]).reshape(-1), be.read(t["m2"]).reshape(-1)
    np.testing.assert_array_equal(m1, _keep(first, n, p))
    np.testing.assert_array_equal(m2, _keep(second, n, p))
    assert not np.array_equal(m1, m2)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_16_bits_round_the_float32_quotient_once(dtype):
    p = 0.2
    be, t = _setup(seed=0xFEEDFACE, dtype=dtype)
    rng = np.random.default_rng(5)
    (x, x32), (dy, dy32) = (as_dtype(rng.standard_normal(SHAPE), dtype) for _ in range(2))
    be.write(t["x"], x)
    be.write(t["dy"], dy)
    run(be, _fwd(t, p), _bwd(t, p))
    keep = _keep(philox.splitmix64(0xFEEDFACE), SHAPE[0], p)
    np.testing.assert_array_equal(_mask(be, t), keep.astype(np.int8))  # the FP32 plan's mask
    q, k = torch.tensor(1 - p, dtype=torch.float32), torch.from_numpy(_per_sample(keep))
    zero = torch.zeros(SHAPE)
    assert_rounded(be.read(t["y"]), torch.where(k, torch.from_numpy(x32) / q, zero), dtype)
    assert_rounded(be.read(t["dx"]), torch.where(k, torch.from_numpy(dy32) / q, zero), dtype)


def test_p_zero_keeps_every_sample_unchanged():
    be, t = _setup()
    x = np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32)
    be.write(t["x"], x)
    run(be, _fwd(t, 0.0))
    np.testing.assert_array_equal(be.read(t["y"]), x)
    assert _mask(be, t).all()


def test_bad_calls_are_refused_naming_the_problem():
    be, t = _setup()
    with pytest.raises(BackendError, match=r"drop_path_fwd .*p must be in \[0, 1\), got 1.0"):
        be.capture("g", [_fwd(t, 1.0)])
    a = SimpleArena()
    x = a.add("x", SHAPE)
    y = a.add("y", SHAPE)
    mask = a.add("mask", SHAPE, "int8")  # an element-wise mask: drop path keeps one byte a sample
    seed = a.add("seed", (2,), "int32")
    with pytest.raises(ShapeError, match=r"'mask' .* has 240 elements; expected 6"):
        a.allocate().capture("g", [op("drop_path_fwd", x=x, y=y, mask=mask, seed=seed, p=0.1)])
