"""onehot_loss_fwd / _bwd / _inf (binary cross-entropy with logits, mean squared error against the smoothed
one-hot label) against torch's binary_cross_entropy_with_logits and mse_loss (float64).

Loss within 1e-6 relative (float64 sums over float32 logits); gradients within 1e-6 of the data's scale (FP32)
or 2e-3 (FP16 logits and gradient); FP16 and BF16 gradients also within one ulp of torch's float32 gradient from
the same rounded logits, rounded to the dtype (sigmoid or z, minus the target, times scale / (N*K): other float32
evaluations), plus 2 * 2^-24 * max|e| where the target cancels sigmoid(z) or z; top-1/top-5 as softmax
cross-entropy ranks them; the gradient may be written over the logits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_testkit import SimpleArena, as_dtype, assert_close, assert_within_ulp, op, run

from tr.core.errors import BackendError, DataError, ShapeError

TORCH = {"bce_logits": F.binary_cross_entropy_with_logits, "mse": F.mse_loss}


def _setup(n, k, dtype="fp32"):
    a = SimpleArena()
    t = {"logits": a.add("logits", (n, 1, 1, k), dtype), "dlogits": a.add("dlogits", (n, 1, 1, k), dtype),
         "labels": a.add("labels", (n, 1, 1, 1), "int32"), "result": a.add("result", (3,)),
         "result_inf": a.add("result_inf", (3,)), "scale": a.add("scale", (1,)), "pred": a.add("pred", (n,), "int32")}
    return a, t


def _torch(kind, z, y, ls, scale, dtype=torch.float64):
    zt = torch.tensor(z, dtype=dtype, requires_grad=True)
    target = F.one_hot(torch.tensor(y, dtype=torch.long), z.shape[1]).to(dtype) * (1 - ls) + ls / z.shape[1]
    loss = TORCH[kind](zt, target)
    (loss * scale).backward()
    return loss.item(), zt.grad.numpy()


def _topk(z, y, k):
    order = np.argsort(-z, axis=1, kind="stable")
    return float(np.mean([y[i] in order[i, :k] for i in range(len(y))]))


@pytest.mark.parametrize("kind", ["bce_logits", "mse"])
@pytest.mark.parametrize("n,k,ls,scale,dtype", [(8, 10, 0.0, 1.0, "fp32"), (16, 7, 0.1, 1.0, "fp32"),
                                                (5, 3, 0.2, 8192.0, "fp32"), (32, 100, 0.05, 1024.0, "fp16"),
                                                (32, 100, 0.05, 1024.0, "bf16")])
def test_onehot_losses_against_torch(kind, n, k, ls, scale, dtype):
    a, t = _setup(n, k, dtype)
    be = a.allocate()
    rng = np.random.default_rng(n + k)
    stored, z = as_dtype(4 * rng.standard_normal((n, k)), dtype)  # z: the rounded logits' float32 values
    y = rng.integers(0, k, n).astype(np.int32)
    be.write(t["logits"], stored)
    be.write(t["labels"], y)
    be.write(t["scale"], [scale])
    attrs = {"loss": kind, "label_smoothing": ls}
    run(be, op("onehot_loss_fwd", logits=t["logits"], labels=t["labels"], result=t["result"], **attrs),
        op("onehot_loss_inf", logits=t["logits"], labels=t["labels"], result=t["result_inf"], pred=t["pred"],
           **attrs),
        op("onehot_loss_bwd", logits=t["logits"], labels=t["labels"], scale=t["scale"], dlogits=t["dlogits"],
           **attrs))
    ref, grad = _torch(kind, z, y, ls, scale)
    res = be.read(t["result"]).ravel()
    assert abs(res[0] - ref) <= 1e-6 * max(1.0, abs(ref))
    assert res[1] == pytest.approx(_topk(z.astype(np.float32), y, 1), abs=1e-7)
    assert res[2] == pytest.approx(_topk(z.astype(np.float32), y, 5), abs=1e-7)
    np.testing.assert_array_equal(be.read(t["result_inf"]).ravel(), res)
    np.testing.assert_array_equal(be.read(t["pred"]).ravel(), np.argmax(z, axis=1))
    if dtype != "bf16":
        assert_close(be.read(t["dlogits"]).reshape(n, k), grad, 1e-6 if dtype == "fp32" else 2e-3)
    if dtype != "fp32":
        grad32 = _torch(kind, z, y, ls, scale, torch.float32)[1]
        assert_within_ulp(be.read(t["dlogits"]).reshape(n, k), grad32, dtype, 2.0)


@pytest.mark.parametrize("kind", ["bce_logits", "mse"])
def test_gradient_written_over_the_logits(kind):
    a, t = _setup(6, 5)
    be = a.allocate()
    z = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 3, 4, 0], np.int32)
    be.write(t["logits"], z)
    be.write(t["labels"], y)
    be.write(t["scale"], [2.0])
    run(be, op("onehot_loss_bwd", logits=t["logits"], labels=t["labels"], scale=t["scale"], dlogits=t["logits"],
               loss=kind))
    assert_close(be.read(t["logits"]).reshape(6, 5), _torch(kind, z, y, 0.0, 2.0)[1], 1e-6)


def test_bad_labels_and_attributes_are_named():
    a, t = _setup(2, 3)
    be = a.allocate()
    be.write(t["labels"], np.array([0, 3], np.int32))
    with pytest.raises(DataError, match="label 3 is outside"):
        run(be, op("onehot_loss_fwd", logits=t["logits"], labels=t["labels"], result=t["result"], loss="mse"))
    with pytest.raises(BackendError, match="attribute 'loss' must be one of"):
        be.capture("g", [op("onehot_loss_fwd", logits=t["logits"], labels=t["labels"], result=t["result"],
                            loss="hinge")])
    with pytest.raises(BackendError, match="label_smoothing"):
        be.capture("g", [op("onehot_loss_fwd", logits=t["logits"], labels=t["labels"], result=t["result"],
                            loss="mse", label_smoothing=1.0)])


@pytest.mark.parametrize("kind", ["bce_logits", "mse"])
def test_div_takes_the_batch_count_s_place(kind):
    """onehot_loss_bwd's div: div[0] * K in N * K's place; div == N gives the bytes of no div, 2N half of them."""
    n, k = 6, 5
    a, t = _setup(n, k)
    a.add("div", (1,))
    a.add("plain", (n, 1, 1, k))
    be = a.allocate()
    rng = np.random.default_rng(4)
    be.write(t["logits"], rng.standard_normal((n, k)).astype(np.float32))
    be.write(t["labels"], rng.integers(0, k, n).astype(np.int32))
    be.write(t["scale"], [8.0])
    common = {"logits": t["logits"], "labels": t["labels"], "scale": t["scale"], "loss": kind, "label_smoothing": 0.1}
    run(be, op("onehot_loss_bwd", **common, dlogits=a["plain"]))
    plain = be.read(a["plain"])
    g = be.capture("div", [op("onehot_loss_bwd", **common, dlogits=t["dlogits"], div=a["div"])])
    for div, expect in ((n, plain), (2 * n, plain * np.float32(0.5))):
        be.write(a["div"], [div])
        be.launch(g)
        np.testing.assert_array_equal(be.read(t["dlogits"]), expect)
    with pytest.raises(ShapeError, match="argument .div. .* has 3 elements; expected 1"):
        be.capture("bad", [op("onehot_loss_bwd", **common, dlogits=t["dlogits"], div=t["result"])])
