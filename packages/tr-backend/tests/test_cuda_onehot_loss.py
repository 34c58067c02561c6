"""onehot_loss_fwd / _inf / _bwd on the CUDA backend (csrc/ops/onehot_loss.cu) against the CPU backend, which
test_cpu_onehot_loss.py holds to torch: the loss within 1e-6 relative (both sum in float64, in other orders),
top-1/top-5 and the prediction exactly, the gradient within 1e-6 of its scale (FP32) or 2e-3 (FP16), also
written over the logits; a relaunch gives the same bytes. GPU-only."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin, close

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["bce_logits", "mse"])
@pytest.mark.parametrize("n,k,ls,dt", [(8, 10, 0.0, "fp32"), (64, 1000, 0.1, "fp16"), (5, 3, 0.2, "fp32"),
                                       (256, 37, 0.0, "fp16")])
def test_onehot_loss_matches_the_cpu(kind, n, k, ls, dt):
    tw = Twin()
    tw.add("logits", (n, 1, 1, k), dt)
    tw.add("inplace", (n, 1, 1, k), dt)
    tw.add("dlogits", (n, 1, 1, k), dt)
    tw.add("labels", (n, 1, 1, 1), "int32")
    tw.add("result", (3,))
    tw.add("result_inf", (3,))
    tw.add("scale", (1,))
    tw.add("pred", (n,), "int32")
    tw.allocate()
    z = tw.fill("logits", -6.0, 6.0)
    tw.write("inplace", z)
    tw.fill("labels", 0, k)
    tw.write("scale", np.array([1024.0 if dt == "fp16" else 1.0], np.float32))
    attrs = {"loss": kind, "label_smoothing": ls}
    calls = (op("onehot_loss_fwd", logits=tw["logits"], labels=tw["labels"], result=tw["result"], **attrs),
             op("onehot_loss_inf", logits=tw["logits"], labels=tw["labels"], result=tw["result_inf"],
                pred=tw["pred"], **attrs),
             op("onehot_loss_bwd", logits=tw["logits"], labels=tw["labels"], scale=tw["scale"],
                dlogits=tw["dlogits"], **attrs),
             op("onehot_loss_bwd", logits=tw["inplace"], labels=tw["labels"], scale=tw["scale"],
                dlogits=tw["inplace"], **attrs))
    _, gg = tw.run(*calls, poison=("result", "result_inf", "dlogits", "pred"))
    for name in ("result", "result_inf"):
        c_, g_ = (a.ravel() for a in tw.both(name))
        assert abs(float(g_[0]) - float(c_[0])) <= 1e-6 * max(1.0, abs(float(c_[0]))), name
        np.testing.assert_array_equal(g_[1:3], c_[1:3])
    np.testing.assert_array_equal(*tw.both("pred"))
    tol = 1e-6 if dt == "fp32" else 2e-3
    c_, g_ = tw.both("dlogits")
    close(g_, c_, tol, "dlogits")
    close(tw.gpu.read(tw["inplace"]), c_, tol, "in place")
    first = tw.gpu.read(tw["result"]).tobytes()
    tw.write("inplace", z)
    tw.gpu.launch(gg)
    tw.gpu.synchronize()
    assert tw.gpu.read(tw["result"]).tobytes() == first
