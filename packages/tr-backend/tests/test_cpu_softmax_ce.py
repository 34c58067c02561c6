"""softmax_ce_fwd / _bwd / _inf against torch.nn.functional.cross_entropy with label smoothing (float64).

Loss within 1e-6 relative (float64 per-sample sums over float32 log-probabilities), probabilities and
gradients within 1e-6 of the data's scale; top-1/top-5 fractions exactly, including ties ("first max
wins") and K < 5. FP16 and BF16 logits: see test_half_logits.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_testkit import HALF_DTYPES, SimpleArena, as_dtype, assert_close, assert_within_ulp, op, run


def _setup(n, k, dtype="fp32"):
    a = SimpleArena()
    t = {"logits": a.add("logits", (n, 1, 1, k), dtype), "probs": a.add("probs", (n, 1, 1, k)),
         "dlogits": a.add("dlogits", (n, 1, 1, k), dtype), "labels": a.add("labels", (n, 1, 1, 1), "int32"),
         "result": a.add("result", (3,)), "result_inf": a.add("result_inf", (3,)), "scale": a.add("scale", (1,)),
         "pred": a.add("pred", (n,), "int32")}
    return a, t


def _topk(z, y, k):
    order = np.argsort(-z, axis=1, kind="stable")  # descending value, ascending index among ties
    return float(np.mean([y[i] in order[i, :k] for i in range(len(y))]))


@pytest.mark.parametrize("n,k,ls,scale", [(8, 10, 0.0, 1.0), (16, 10, 0.1, 1.0), (5, 3, 0.2, 8192.0),
                                          (32, 100, 0.05, 4.0)])
def test_softmax_ce_against_torch(n, k, ls, scale):
    a, t = _setup(n, k)
    be = a.allocate()
    rng = np.random.default_rng(n + k)
    z = (3 * rng.standard_normal((n, k))).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    be.write(t["logits"], z)
    be.write(t["labels"], y)
    be.write(t["scale"], [scale])
    run(be, op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"],
               label_smoothing=ls),
        op("softmax_ce_inf", logits=t["logits"], labels=t["labels"], result=t["result_inf"], pred=t["pred"],
           label_smoothing=ls),
        op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["scale"], dlogits=t["dlogits"],
           label_smoothing=ls))
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(zt, torch.tensor(y, dtype=torch.long), label_smoothing=ls)
    (loss * scale).backward()
    res = be.read(t["result"]).ravel()
    assert abs(res[0] - loss.item()) <= 1e-6 * max(1.0, abs(loss.item()))
    assert res[1] == pytest.approx(_topk(z, y, 1), abs=1e-7)
    assert res[2] == pytest.approx(_topk(z, y, 5), abs=1e-7)
    np.testing.assert_array_equal(be.read(t["result_inf"]).ravel(), res)
    np.testing.assert_array_equal(be.read(t["pred"]).ravel(), np.argmax(z, axis=1))
    assert_close(be.read(t["probs"]).reshape(n, k), torch.softmax(zt, 1).detach().numpy(), 1e-6)
    assert_close(be.read(t["dlogits"]).reshape(n, k), zt.grad.numpy(), 1e-6)


def test_topk_ties_and_few_classes():
    a, t = _setup(4, 3)
    be = a.allocate()
    z = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [2, 1, 3]], np.float32)
    y = np.array([0, 1, 2, 1], np.int32)
    be.write(t["logits"], z)
    be.write(t["labels"], y)
    run(be, op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"]))
    res = be.read(t["result"]).ravel()
    assert res[1] == pytest.approx(0.25)  # only sample 0: its label is the first of the tied maxima
    assert res[2] == pytest.approx(1.0)  # K = 3 < 5: every label is in the top 5


def test_top5_ranks_ties_by_index():
    a, t = _setup(2, 8)
    be = a.allocate()
    z = np.array([[5, 5, 5, 5, 5, 5, 0, 0], [5, 5, 5, 5, 5, 5, 0, 0]], np.float32)
    be.write(t["logits"], z)
    be.write(t["labels"], [4, 5])  # rank 4 (in the top 5) and rank 5 (out)
    run(be, op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"]))
    assert be.read(t["result"]).ravel()[2] == pytest.approx(0.5)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_logits(dtype):
    """16-bit logits and dlogits (FP32 probs): the loss within 1e-6 relative of torch's float64 one on the same
    rounded logits; probs within 1e-6 of torch's float32 softmax, dlogits within one ulp of torch's float32 gradient
    rounded to the dtype (p - onehot, another float32 softmax), plus 2 * 2^-24 * max|e| where p - 1 cancels."""
    n, k = 16, 10
    a, t = _setup(n, k, dtype)
    be = a.allocate()
    rng = np.random.default_rng(3)
    z, z32 = as_dtype(rng.standard_normal((n, k)), dtype)
    y = rng.integers(0, k, n).astype(np.int32)
    be.write(t["logits"], z)
    be.write(t["labels"], y)
    be.write(t["scale"], [1.0])
    run(be, op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"]),
        op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["scale"], dlogits=t["dlogits"]))
    zt = torch.tensor(z32.astype(np.float64), requires_grad=True)
    loss = F.cross_entropy(zt, torch.tensor(y, dtype=torch.long))
    loss.backward()
    assert be.read(t["result"]).ravel()[0] == pytest.approx(loss.item(), rel=1e-6)
    if dtype == "fp16":
        assert_close(be.read(t["dlogits"]).reshape(n, k), zt.grad.numpy(), 1e-3)
    z32t = torch.tensor(z32, requires_grad=True)
    F.cross_entropy(z32t, torch.tensor(y, dtype=torch.long)).backward()
    assert_close(be.read(t["probs"]).reshape(n, k), torch.softmax(z32t, 1).detach().numpy(), 1e-6)
    assert_within_ulp(be.read(t["dlogits"]).reshape(n, k), z32t.grad, dtype, 2.0)


def test_label_out_of_range_raises_at_launch():
    a, t = _setup(2, 4)
    be = a.allocate()
    be.write(t["labels"], [1, 4])
    g = be.capture("train", [op("softmax_ce_fwd", layer=7, logits=t["logits"], labels=t["labels"],
                                probs=t["probs"], result=t["result"])])
    with pytest.raises(ValueError, match=r"graph 'train', op #0 softmax_ce_fwd \(layer 7\): label 4 is outside"):
        be.launch(g)


@pytest.mark.parametrize("k", [6, 3])  # K < 5: a finite row is always in the top 5, a NaN row still never
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_are_never_correct(bad, k):
    # A diverged model's NaN row used to rank its label first ((z > zy).sum() is 0 for NaN): 100 % top-1.
    n = 4
    a, t = _setup(n, k)
    be = a.allocate()
    z = np.zeros((n, k), np.float32)
    z[:, 2] = 5.0  # every label (2) is the clear argmax ...
    z[0, k - 1] = bad  # ... but rows 0 and 1 hold a non-finite logit
    z[1, :] = bad
    be.write(t["logits"], z)
    be.write(t["labels"], np.full(n, 2, np.int32))
    run(be, op("softmax_ce_fwd", logits=t["logits"], labels=t["labels"], probs=t["probs"], result=t["result"]),
        op("softmax_ce_inf", logits=t["logits"], labels=t["labels"], result=t["result_inf"]))
    for name in ("result", "result_inf"):
        res = be.read(t[name]).ravel()
        assert res[1] == 0.5 and res[2] == 0.5, (name, res)


def test_div_takes_the_batch_count_s_place():
    """softmax_ce_bwd's div (a gradient-accumulation window's samples): div == N gives the bytes of no div, div = 2N
    exactly half of them (a power of two), any div the factor fl32(scale / div) of the float64 quotient."""
    n, k, ls = 12, 7, 0.1
    a, t = _setup(n, k)
    a.add("div", (1,))
    a.add("plain", (n, 1, 1, k))
    be = a.allocate()
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(k), n).astype(np.float32)
    be.write(t["probs"], p)
    be.write(t["labels"], rng.integers(0, k, n).astype(np.int32))
    be.write(t["scale"], [1024.0])
    common = {"probs": t["probs"], "labels": t["labels"], "scale": t["scale"], "label_smoothing": ls}
    run(be, op("softmax_ce_bwd", **common, dlogits=a["plain"]))
    plain = be.read(a["plain"])
    g = be.capture("div", [op("softmax_ce_bwd", **common, dlogits=t["dlogits"], div=a["div"])])
    for div, expect in ((n, plain), (2 * n, plain * np.float32(0.5)), (37, None)):
        be.write(a["div"], [div])
        be.launch(g)
        got = be.read(t["dlogits"])
        if expect is None:  # the factor of the float64 quotient, rounded once, times (p - smoothed one-hot)
            rows = np.arange(n)
            d = p - np.float32(ls / k)
            d[rows, be.read(t["labels"]).ravel()] -= np.float32(1.0 - ls)
            expect = (d * np.float32(1024.0 / div)).reshape(got.shape)
        np.testing.assert_array_equal(got, expect)
