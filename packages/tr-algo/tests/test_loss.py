import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tr.algo.loss import (
    CrossEntropyLoss,
    cross_entropy_grad,
    cross_entropy_loss,
    cross_entropy_per_sample,
    top_k_correct,
)
from tr.core.errors import ConfigError, DataError, ShapeError


def _case(b: int, k: int, seed: int, spread: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, k)) * spread).astype(np.float32), rng.integers(0, k, size=b)


def _torch_ref(z: np.ndarray, y: np.ndarray, ls: float, scaling: float = 1.0) -> tuple[float, np.ndarray]:
    t = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(t, torch.tensor(y, dtype=torch.int64), label_smoothing=ls)
    (loss * scaling).backward()
    return float(loss.detach()), t.grad.numpy()


@pytest.mark.parametrize("ls", [0.0, 0.1, 0.2, 0.5, 0.9])
@pytest.mark.parametrize("b,k", [(1, 2), (7, 10), (32, 1000)])
def test_forward_and_backward_match_torch(ls, b, k):
    z, y = _case(b, k, seed=b * 1000 + k)
    ref_loss, ref_grad = _torch_ref(z, y, ls)
    assert cross_entropy_loss(z, y, ls) == pytest.approx(ref_loss, rel=1e-6)
    g = cross_entropy_grad(z, y, ls)
    assert g.dtype == np.float32 and g.shape == z.shape
    np.testing.assert_allclose(g, ref_grad, rtol=1e-5, atol=1e-8)


def test_config_value_forward_backward_with_scaling_and_nhwc():
    z, y = _case(16, 10, seed=3)
    loss = CrossEntropyLoss().label_smoothing(0.1)
    ref_loss, ref_grad = _torch_ref(z, y, 0.1, scaling=8192.0)
    z4 = z.reshape(16, 1, 1, 10)
    assert loss.forward(z4, y) == pytest.approx(ref_loss, rel=1e-6)
    g = loss.backward(z4, y.reshape(16, 1, 1, 1), scaling=8192.0)
    assert g.shape == (16, 1, 1, 10)
    np.testing.assert_allclose(g.reshape(16, 10), ref_grad, rtol=1e-5, atol=1e-6)


def test_closed_form_small_example():
    # Two classes, logits (0, ln 3): p = (1/4, 3/4); label 1, ls 0.2.
    z = np.array([[0.0, np.log(3.0)]])
    y = np.array([1])
    expected = -(0.8) * np.log(0.75) - 0.1 * (np.log(0.25) + np.log(0.75))
    assert cross_entropy_loss(z, y, 0.2) == pytest.approx(expected, rel=1e-12)
    g = cross_entropy_grad(z, y, 0.2)
    np.testing.assert_allclose(g, [[0.25 - 0.1, 0.75 - 0.1 - 0.8]], rtol=1e-12)
    assert g.dtype == np.float64


def test_gradient_rows_sum_to_zero_and_loss_is_exact_for_confident_logits():
    # Huge margins: the seed's log(p + 1e-8) would cap each term at ~18.42; the exact loss is much larger.
    z = np.array([[100.0, 0.0, 0.0]], dtype=np.float32)
    y = np.array([0])
    per = cross_entropy_per_sample(z, y, 0.1)
    ref, _ = _torch_ref(z, y, 0.1)
    assert per[0] == pytest.approx(ref, rel=1e-9)
    assert per[0] > 0.1 / 3 * 2 * 18.42 + 1.0
    z2, y2 = _case(8, 5, seed=9, spread=40.0)
    g = cross_entropy_grad(z2, y2, 0.3)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g.sum(axis=1), 0.0, atol=1e-7)


def test_top_k_matches_torch_and_first_max_wins():
    z, y = _case(200, 10, seed=5)
    for k in (1, 5):
        idx = torch.topk(torch.tensor(z), k, dim=1).indices.numpy()
        expected = int((idx == y[:, None]).any(axis=1).sum())
        assert top_k_correct(z, y, k) == expected
    ties = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]])
    assert top_k_correct(ties, np.array([0, 1]), 1) == 2
    assert top_k_correct(ties, np.array([1, 2]), 1) == 0
    assert top_k_correct(ties, np.array([2, 0]), 10) == 2  # k larger than K counts every row


def test_label_smoothing_validation():
    assert CrossEntropyLoss().smoothing == 0.0
    base = CrossEntropyLoss()
    assert base.label_smoothing(0.2).smoothing == 0.2
    assert base.smoothing == 0.0  # immutable
    for bad in (-0.01, 1.0, 1.5, float("nan"), float("inf"), "0.1", True, None):
        with pytest.raises(ConfigError, match="label_smoothing"):
            base.label_smoothing(bad)
    with pytest.raises(ConfigError, match="label_smoothing"):
        CrossEntropyLoss(smoothing=-1)
    with pytest.raises(ConfigError, match="label_smoothing"):
        cross_entropy_loss(np.zeros((1, 2)), np.array([0]), 1.0)


def test_bad_inputs():
    z = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(DataError, match="label 3 is outside"):
        cross_entropy_loss(z, np.array([0, 1, 2, 3]))
    with pytest.raises(DataError, match="label -1"):
        cross_entropy_grad(z, np.array([0, -1, 2, 1]))
    with pytest.raises(DataError, match="integers"):
        cross_entropy_loss(z, np.array([0.0, 1.0, 2.0, 1.0]))
    with pytest.raises(ShapeError, match="expected 4 labels"):
        cross_entropy_loss(z, np.array([0, 1]))
    with pytest.raises(ShapeError, match="B, 1, 1, K"):
        cross_entropy_loss(np.zeros((4, 2, 1, 3)), np.zeros(4, dtype=int))
    with pytest.raises(ShapeError):
        cross_entropy_loss(np.zeros(3), np.zeros(3, dtype=int))
    with pytest.raises(ConfigError, match="scaling"):
        cross_entropy_grad(z, np.zeros(4, dtype=int), scaling=0.0)
    with pytest.raises(ConfigError, match="k must be >= 1"):
        top_k_correct(z, np.zeros(4, dtype=int), 0)
