"""bn_maxpool_fwd / bn_maxpool_bwd against the unfused chain bn_fwd(relu) -> maxpool_fwd and maxpool_bwd ->
bn_bwd(relu) on the same inputs: the same bytes (the chain's ops are compared with torch in their own tests),
and against torch in float64 for one geometry."""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, assert_close, nchw, nhwc, op, run

from tr.core.errors import ShapeError

VEC = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma",
       "dbeta")
GEOS = [(2, 2, 0, 8), (3, 2, 1, 9), (3, 1, 1, 6), (2, 2, 0, 7)]
GEO_IDS = ["2x2/2", "3x3/2 pad 1", "3x3/1 pad 1", "2x2/2 odd"]


def _out(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def _setup(k, s, p, h, dtype, c=8, n=3):
    q = _out(h, k, s, p)
    a = SimpleArena()
    t = {name: a.add(name, (n, h, h, c), dtype) for name in ("x", "act", "dact", "dx", "dx2")}
    t.update({name: a.add(name, (n, q, q, c), dtype) for name in ("y", "y2", "dy")})
    t.update({name: a.add(name, (c,)) for name in VEC})
    t.update({name + "2": a.add(name + "2", (c,)) for name in VEC if name not in ("gamma", "beta", "mean_in",
                                                                                   "var_in")})
    for name in ("mask", "mask2"):
        t[name] = a.add(name, (n, q, q, c), "int8", region=a.tensors["x"].region)
    t["badmask"] = a.add("badmask", (n, h, h, c), "int8", region=a.tensors["x"].region)
    be = a.allocate()
    rng = np.random.default_rng(k * 100 + h)
    x = 0.5 + rng.standard_normal((n, h, h, c))
    x[0, :2, :2, :] = 0.25  # ties inside a window: the first max must win on both paths
    be.write(t["x"], x)
    be.write(t["dy"], rng.standard_normal((n, q, q, c)))
    be.write(t["gamma"], rng.uniform(0.5, 1.5, c))
    be.write(t["beta"], rng.standard_normal(c))
    be.write(t["var_in"], np.ones(c))
    return be, t


def _fused(t, geo):
    return [op("bn_maxpool_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"],
               var_in=t["var_in"], mean_out=t["mean_out"], var_out=t["var_out"], y=t["y"], mask=t["mask"],
               saved_mean=t["saved_mean"], saved_inv_std=t["saved_inv_std"], momentum=0.1, eps=1e-5, **geo),
            op("bn_maxpool_bwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], dy=t["dy"], mask=t["mask"],
               saved_mean=t["saved_mean"], saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"],
               dx=t["dx"], eps=1e-5, **geo)]


def _chain(t, geo):
    return [op("bn_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"], var_in=t["var_in"],
               mean_out=t["mean_out2"], var_out=t["var_out2"], y=t["act"], saved_mean=t["saved_mean2"],
               saved_inv_std=t["saved_inv_std2"], momentum=0.1, eps=1e-5, activation="relu"),
            op("maxpool_fwd", x=t["act"], y=t["y2"], mask=t["mask2"], **geo),
            op("maxpool_bwd", dy=t["dy"], mask=t["mask2"], dx=t["dact"], **geo),
            op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dact"], saved_mean=t["saved_mean2"],
               saved_inv_std=t["saved_inv_std2"], dgamma=t["dgamma2"], dbeta=t["dbeta2"], dx=t["dx2"],
               activation="relu", y=t["act"])]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("k,s,p,h", GEOS, ids=GEO_IDS)
def test_fused_equals_the_chain_bit_for_bit(k, s, p, h, dtype):
    be, t = _setup(k, s, p, h, dtype)
    geo = {"kernel": k, "stride": s, "padding": p}
    run(be, *_fused(t, geo), *_chain(t, geo))
    for a, b in (("y", "y2"), ("mask", "mask2"), ("dx", "dx2"), ("mean_out", "mean_out2"), ("var_out", "var_out2"),
                 ("saved_inv_std", "saved_inv_std2"), ("dgamma", "dgamma2"), ("dbeta", "dbeta2")):
        assert be.read(t[a]).tobytes() == be.read(t[b]).tobytes(), a


def test_fused_against_torch():
    be, t = _setup(3, 2, 1, 9, "fp32")
    run(be, *_fused(t, {"kernel": 3, "stride": 2, "padding": 1}))
    x = nchw(be.read(t["x"]))
    gamma = torch.tensor(be.read(t["gamma"]).ravel(), dtype=torch.float64, requires_grad=True)
    beta = torch.tensor(be.read(t["beta"]).ravel(), dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.batch_norm(x, None, None, gamma, beta,
                                                                                  training=True)), 3, 2, 1)
    y.backward(nchw(be.read(t["dy"])))
    assert_close(be.read(t["y"]), nhwc(y))
    assert_close(be.read(t["dx"]), nhwc(x.grad))
    assert_close(be.read(t["dgamma"]).ravel(), gamma.grad.numpy(), 1e-4)
    assert_close(be.read(t["dbeta"]).ravel(), beta.grad.numpy(), 1e-4)


def test_fused_rules():
    be, t = _setup(2, 2, 0, 8, "fp32")
    geo = {"kernel": 2, "stride": 2, "padding": 0}
    with pytest.raises(ShapeError, match="mask .* must have y's shape"):
        bad = dict(t, mask=t["badmask"])
        run(be, _fused(bad, geo)[0])
    with pytest.raises(ShapeError, match=r"y \[3,4,4,8\] must be \[3,3,3,\*\] for input \[3,8,8,8\], kernel 3x3"):
        run(be, _fused(t, {"kernel": 3, "stride": 2, "padding": 0})[0])  # y is not the 3x3/2 output of x
