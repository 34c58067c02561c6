"""BCEWithLogitsLoss and MSELoss: the reference math against torch's binary_cross_entropy_with_logits and mse_loss
on one-hot (and smoothed) targets, float64."""

import numpy as np
import pytest
import torch

from tr.algo.onehot_loss import BCEWithLogitsLoss, MSELoss, onehot_target
from tr.core.errors import ConfigError, DataError


def _torch(kind, z, y, ls):
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    t = torch.nn.functional.one_hot(torch.tensor(y, dtype=torch.long), z.shape[1]).double() * (1 - ls) + ls / z.shape[1]
    f = torch.nn.functional.binary_cross_entropy_with_logits if kind == "bce" else torch.nn.functional.mse_loss
    loss = f(zt, t)
    loss.backward()
    return loss.item(), zt.grad.numpy()


@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("kind,cls", [("bce", BCEWithLogitsLoss), ("mse", MSELoss)])
def test_matches_torch(kind, cls, ls):
    rng = np.random.default_rng(2)
    z = rng.standard_normal((6, 7)) * 4  # large logits: BCE's stable form
    y = rng.integers(0, 7, 6)
    loss = cls().label_smoothing(ls)
    ref, grad = _torch(kind, z, y, ls)
    assert loss.forward(z, y) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(loss.backward(z, y, scaling=8.0), 8.0 * grad, rtol=1e-12)


def test_nhwc_logits_keep_their_shape_and_dtype():
    z = np.zeros((3, 1, 1, 4), np.float32)
    g = BCEWithLogitsLoss().backward(z, np.array([0, 1, 3]))
    assert g.shape == z.shape and g.dtype == np.float32
    np.testing.assert_allclose(g[0, 0, 0], np.array([-0.5, 0.5, 0.5, 0.5]) / 12)


def test_target_rows_sum_to_one_and_bad_input_is_named():
    t = onehot_target(np.array([2, 0]), 5, 0.2)
    np.testing.assert_allclose(t.sum(1), 1.0)
    assert t[0, 2] == pytest.approx(0.84)
    with pytest.raises(ConfigError, match="label_smoothing must be in"):
        MSELoss(smoothing=1.0)
    with pytest.raises(DataError, match="label 5 is outside"):
        MSELoss().forward(np.zeros((2, 5)), np.array([0, 5]))
    assert (BCEWithLogitsLoss.kind, MSELoss.kind) == ("bce_logits", "mse")
