"""Batch norm (bn_fwd, bn_bwd, bn_inf, bn_update_eq) against torch.nn.functional.batch_norm, float64.

Tolerance: FP32 within 1e-5 of the reference relative to the data's scale (statistics use float64
accumulators); FP16 activations within 3e-3.
"""

import numpy as np
import pytest
import torch
from backend_testkit import SimpleArena, assert_close, nchw, nhwc, op, run

from tr.core.errors import BackendError, DTypeError, ShapeError

VEC = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std", "dgamma",
       "dbeta")


def _setup(shape, dtype="fp32"):
    c = shape[-1]
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("x", "y", "dy", "dx")}
    t.update({name: a.add(name, (c,)) for name in VEC})
    return a, t


@pytest.mark.parametrize("shape,momentum,eps", [((4, 3, 5, 6), 0.1, 1e-5), ((8, 1, 1, 10), 0.3, 1e-3),
                                                ((2, 7, 7, 3), 0.0, 1e-5), ((3, 4, 4, 16), 1.0, 1e-5)])
def test_bn_train_forward_backward(shape, momentum, eps):
    a, t = _setup(shape)
    be = a.allocate()
    rng = np.random.default_rng(sum(shape))
    c = shape[-1]
    be.write(t["x"], 3.0 + 2.0 * rng.standard_normal(shape))
    be.write(t["dy"], rng.standard_normal(shape))
    be.write(t["gamma"], rng.uniform(0.5, 1.5, c))
    be.write(t["beta"], rng.standard_normal(c))
    be.write(t["mean_in"], rng.standard_normal(c))
    be.write(t["var_in"], rng.uniform(0.5, 2.0, c))
    run(be, op("bn_fwd", **{k: t[k] for k in ("x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out",
                                              "y", "saved_mean", "saved_inv_std")}, momentum=momentum, eps=eps),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
           saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"], eps=eps))

    def vec(name):
        return torch.tensor(be.read(t[name]).ravel(), dtype=torch.float64)

    x = nchw(be.read(t["x"]))
    gamma, beta = vec("gamma").requires_grad_(), vec("beta").requires_grad_()
    rm, rv = vec("mean_in"), vec("var_in")
    y = torch.nn.functional.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=momentum, eps=eps)
    y.backward(nchw(be.read(t["dy"])))
    assert_close(be.read(t["y"]), nhwc(y))
    assert_close(be.read(t["mean_out"]).ravel(), rm.numpy())
    assert_close(be.read(t["var_out"]).ravel(), rv.numpy())
    xs = be.read(t["x"]).reshape(-1, c).astype(np.float64)
    assert_close(be.read(t["saved_mean"]).ravel(), xs.mean(0))
    assert_close(be.read(t["saved_inv_std"]).ravel(), 1 / np.sqrt(xs.var(0) + eps))
    assert_close(be.read(t["dx"]), nhwc(x.grad))
    assert_close(be.read(t["dgamma"]).ravel(), gamma.grad.numpy())
    assert_close(be.read(t["dbeta"]).ravel(), beta.grad.numpy())


def test_bn_backward_in_place_over_x():
    shape = (4, 3, 3, 5)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "y", "dy")}
    t.update({name: a.add(name, (5,)) for name in VEC})
    be = a.allocate()
    rng = np.random.default_rng(3)
    be.write(t["x"], rng.standard_normal(shape))
    be.write(t["dy"], rng.standard_normal(shape))
    be.write(t["gamma"], rng.uniform(0.5, 1.5, 5))
    be.write(t["var_in"], np.ones(5))
    x0 = be.read(t["x"])
    run(be, op("bn_fwd", **{k: t[k] for k in ("x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out",
                                              "y", "saved_mean", "saved_inv_std")}),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
           saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["x"]))
    x = nchw(x0)
    gamma = torch.tensor(be.read(t["gamma"]).ravel(), dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.batch_norm(x, None, None, gamma, torch.zeros(5, dtype=torch.float64), training=True)
    y.backward(nchw(be.read(t["dy"])))
    assert_close(be.read(t["x"]), nhwc(x.grad))  # dx written over x
    assert_close(be.read(t["dgamma"]).ravel(), gamma.grad.numpy())


def test_bn_fp16_activations():
    shape = (4, 2, 3, 8)
    a, t = _setup(shape, "fp16")
    be = a.allocate()
    rng = np.random.default_rng(4)
    be.write(t["x"], rng.standard_normal(shape))
    be.write(t["dy"], rng.standard_normal(shape))
    be.write(t["gamma"], np.ones(8))
    be.write(t["var_in"], np.ones(8))
    run(be, op("bn_fwd", **{k: t[k] for k in ("x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out",
                                              "y", "saved_mean", "saved_inv_std")}),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
           saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"]))
    x = nchw(be.read(t["x"]).astype(np.float64))
    gamma = torch.ones(8, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.batch_norm(x, None, None, gamma, torch.zeros(8, dtype=torch.float64), training=True)
    y.backward(nchw(be.read(t["dy"]).astype(np.float64)))
    assert_close(be.read(t["y"]), nhwc(y), 3e-3)
    assert_close(be.read(t["dx"]), nhwc(x.grad), 3e-3)
    assert_close(be.read(t["dgamma"]).ravel(), gamma.grad.numpy(), 1e-5)


def test_bn_inference_and_folded_params():
    shape, c, eps = (3, 4, 4, 6), 6, 1e-3
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "y")}
    t.update({name: a.add(name, (c,)) for name in ("gamma", "beta", "mean", "var", "scale", "bias")})
    be = a.allocate()
    rng = np.random.default_rng(8)
    be.write(t["x"], rng.standard_normal(shape))
    for name in ("gamma", "beta", "mean"):
        be.write(t[name], rng.standard_normal(c))
    be.write(t["var"], rng.uniform(0.1, 3.0, c))
    run(be, op("bn_update_eq", gamma=t["gamma"], beta=t["beta"], mean=t["mean"], var=t["var"], scale=t["scale"],
               bias=t["bias"], eps=eps),
        op("bn_inf", x=t["x"], scale=t["scale"], bias=t["bias"], y=t["y"]))

    def vec(name):
        return torch.tensor(be.read(t[name]).ravel(), dtype=torch.float64)

    ref = torch.nn.functional.batch_norm(nchw(be.read(t["x"])), vec("mean"), vec("var"), vec("gamma"), vec("beta"),
                                         training=False, eps=eps)
    assert_close(be.read(t["y"]), nhwc(ref))
    g, v = vec("gamma").numpy(), vec("var").numpy()
    assert_close(be.read(t["scale"]).ravel(), g / np.sqrt(v + eps))


def _fused_setup(shape, dtype):
    c = shape[-1]
    a = SimpleArena()
    t = {name: a.add(name, shape, dtype) for name in ("x", "z", "y", "dy", "dx", "dz", "y2", "y3", "dx2")}
    t.update({name: a.add(name, (c,)) for name in VEC + ("mean_out2", "var_out2", "saved_mean2", "saved_inv_std2",
                                                         "dgamma2", "dbeta2")})
    be = a.allocate()
    rng = np.random.default_rng(c)
    be.write(t["x"], 1.0 + 2.0 * rng.standard_normal(shape))
    be.write(t["z"], rng.standard_normal(shape))
    be.write(t["dy"], rng.standard_normal(shape))
    be.write(t["gamma"], rng.uniform(0.5, 1.5, c))
    be.write(t["beta"], rng.standard_normal(c))
    be.write(t["var_in"], np.ones(c))
    return be, t


def _fwd(t, y="y", suffix="", **kw):
    names = ("mean_out", "var_out", "saved_mean", "saved_inv_std")
    return op("bn_fwd", x=t["x"], gamma=t["gamma"], beta=t["beta"], mean_in=t["mean_in"], var_in=t["var_in"],
              y=t[y], **{n: t[n + suffix] for n in names}, **kw)


def _fused_against_torch(be, t, act: str, torch_act, tol: float, residual: bool) -> None:
    """Run y = act(bn(x) + z) and its backward in one op each, and hold y and the gradients of x, gamma, beta
    (and z) to torch's float64 ones. With a residual the mask is read from y and dz is written; without, it
    is recomputed from x."""
    extra = {"z": t["z"]} if residual else {}
    bwd = ({"y": t["y"], "dz": t["dz"]} if residual else {"beta": t["beta"]})
    run(be, _fwd(t, activation=act, **extra),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
           saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"], activation=act,
           **bwd))
    x = nchw(be.read(t["x"]).astype(np.float64))
    z = nchw(be.read(t["z"]).astype(np.float64))
    gamma = torch.tensor(be.read(t["gamma"]).ravel(), dtype=torch.float64, requires_grad=True)
    beta = torch.tensor(be.read(t["beta"]).ravel(), dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True)
    y = torch_act(y + z if residual else y)
    y.backward(nchw(be.read(t["dy"]).astype(np.float64)))
    assert_close(be.read(t["y"]), nhwc(y), tol)
    assert_close(be.read(t["dx"]), nhwc(x.grad), tol)
    assert_close(be.read(t["dgamma"]).ravel(), gamma.grad.numpy(), 1e-4)
    assert_close(be.read(t["dbeta"]).ravel(), beta.grad.numpy(), 1e-4)
    if residual:
        assert_close(be.read(t["dz"]), nhwc(z.grad), tol)


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("fp16", 3e-3)])
@pytest.mark.parametrize("residual", [False, True])
def test_bn_relu_and_residual_fused_against_torch(dtype, tol, residual):
    """y = relu(bn(x) + z) and its gradients for x, gamma, beta and z, in one forward and one backward op."""
    be, t = _fused_setup((4, 3, 5, 16), dtype)
    _fused_against_torch(be, t, "relu", torch.relu, tol, residual)


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("fp16", 3e-3)])
@pytest.mark.parametrize("residual", [False, True])
def test_bn_relu6_fused_against_torch(dtype, tol, residual):
    """y = relu6(bn(x) + z) (MobileNet's CBR) and its gradients, the mask from x or (with a residual) from y;
    gamma is large enough that a good share of the pre-activations lies above 6."""
    shape = (4, 3, 5, 16)
    be, t = _fused_setup(shape, dtype)
    be.write(t["gamma"], np.random.default_rng(5).uniform(3.0, 6.0, shape[-1]))
    _fused_against_torch(be, t, "relu6", torch.nn.functional.relu6, tol, residual)
    y_tr = be.read(t["y"]).astype(np.float32)
    assert (y_tr == 6).mean() > 0.05 and (y_tr == 0).mean() > 0.05 and ((y_tr > 0) & (y_tr < 6)).mean() > 0.2


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("fp16", 3e-3)])
def test_bn_silu_fused_against_torch(dtype, tol):
    """y = silu(bn(x)) (EfficientNet's CBR) and its gradients; the slope is recomputed from x."""
    be, t = _fused_setup((4, 3, 5, 16), dtype)
    _fused_against_torch(be, t, "silu", torch.nn.functional.silu, tol, residual=False)
    with pytest.raises(BackendError, match="silu's slope is recomputed from x alone"):
        run(be, op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
                   saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"],
                   activation="silu", y=t["y"]))


@pytest.mark.parametrize("act", ["relu", "relu6"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_fused_relu_equals_bn_then_act_bit_for_bit(dtype, act):
    """The mask recomputed from x is exactly the one the unfused act_bwd reads from y (rounding included)."""
    shape = (2, 4, 4, 8)
    be, t = _fused_setup(shape, dtype)
    x = be.read(t["x"]).astype(np.float32)
    x[0, 0, 0, :] = 0.0  # pre-activations at the kink and far below it
    be.write(t["x"], x)
    if act == "relu6":  # and at the upper kink: gamma spreads the pre-activations past 6
        be.write(t["gamma"], np.random.default_rng(2).uniform(3.0, 6.0, shape[-1]))
    run(be, _fwd(t, activation=act),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
           saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"], activation=act,
           beta=t["beta"]),
        _fwd(t, y="y2", suffix="2"),
        op("act_fwd", x=t["y2"], y=t["y3"], kind=act),
        op("act_bwd", x=t["y3"], dy=t["dy"], dx=t["dz"], kind=act),
        op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dz"], saved_mean=t["saved_mean2"],
           saved_inv_std=t["saved_inv_std2"], dgamma=t["dgamma2"], dbeta=t["dbeta2"], dx=t["dx2"]))
    for a, b in (("y", "y3"), ("dx", "dx2"), ("dgamma", "dgamma2"), ("dbeta", "dbeta2")):
        assert be.read(t[a]).tobytes() == be.read(t[b]).tobytes(), a


def test_bn_inference_fused_relu_residual():
    shape, c = (2, 3, 3, 6), 6
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "z", "y")}
    t.update({name: a.add(name, (c,)) for name in ("scale", "bias")})
    be = a.allocate()
    rng = np.random.default_rng(9)
    for name in ("x", "z"):
        be.write(t[name], rng.standard_normal(shape))
    be.write(t["scale"], rng.uniform(0.5, 2, c))
    be.write(t["bias"], rng.standard_normal(c))
    run(be, op("bn_inf", x=t["x"], scale=t["scale"], bias=t["bias"], z=t["z"], y=t["y"], activation="relu"))
    pre = be.read(t["x"]) * be.read(t["scale"]).ravel() + be.read(t["bias"]).ravel() + be.read(t["z"])
    assert_close(be.read(t["y"]), np.maximum(pre, 0), 1e-6)
    run(be, op("bn_inf", x=t["x"], scale=t["scale"], bias=t["bias"], z=t["z"], y=t["y"], activation="relu6"))
    assert_close(be.read(t["y"]), np.clip(pre, 0, 6), 1e-6)


def test_bn_rules_name_the_problem():
    shape = (2, 2, 2, 4)
    a = SimpleArena()
    t = {name: a.add(name, shape) for name in ("x", "y", "dy", "dx")}
    t["z16"] = a.add("z16", shape, "fp16")
    t.update({name: a.add(name, (4,)) for name in VEC})
    t["short"] = a.add("short", (3,))
    be = a.allocate()
    with pytest.raises(BackendError, match="activation 'relu' needs the forward's output y or beta"):
        run(be, op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
                   saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"],
                   activation="relu"))
    with pytest.raises(DTypeError, match="z is FP16 but x is FP32"):
        run(be, _fwd(t, z=t["z16"]))
    with pytest.raises(ShapeError, match=r"scale has 3 elements, expected 4 \(one per channel\)"):
        run(be, op("bn_inf", x=t["x"], scale=t["short"], bias=t["beta"], y=t["y"]))
    with pytest.raises(BackendError, match=r"activation must be one of \(None, 'relu', 'relu6', 'silu'\), got 'tanh'"):
        run(be, _fwd(t, activation="tanh"))
    with pytest.raises(BackendError, match="a residual joins before relu or relu6 only"):
        run(be, _fwd(t, activation="silu", z=t["x"]))
    with pytest.raises(BackendError, match="with a residual, activation 'relu'.s mask must be read from y"):
        run(be, op("bn_bwd", x=t["x"], gamma=t["gamma"], dy=t["dy"], saved_mean=t["saved_mean"],
                   saved_inv_std=t["saved_inv_std"], dgamma=t["dgamma"], dbeta=t["dbeta"], dx=t["dx"],
                   activation="relu", beta=t["beta"], dz=t["y"]))


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_residual_in_place_over_z(dtype):
    """y over z (the catalogue's in-place pair; the planner takes it for a projection shortcut): z is read
    before y is written, in training and in inference."""
    shape = (4, 3, 5, 16)
    be, t = _fused_setup(shape, dtype)
    z0 = be.read(t["z"])
    run(be, _fwd(t, y="y", activation="relu", z=t["z"]))
    want = be.read(t["y"])
    be.write(t["z"], z0)
    run(be, _fwd(t, y="z", activation="relu", z=t["z"]))
    assert be.read(t["z"]).tobytes() == want.tobytes()
    be.write(t["z"], z0)
    run(be, op("bn_inf", x=t["x"], scale=t["gamma"], bias=t["beta"], z=t["z"], y=t["y"], activation="relu"))
    want = be.read(t["y"])
    be.write(t["z"], z0)
    run(be, op("bn_inf", x=t["x"], scale=t["gamma"], bias=t["beta"], z=t["z"], y=t["z"], activation="relu"))
    assert be.read(t["z"]).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_second_gradient_equals_accumulate_then_bwd(dtype):
    """bn_bwd(dy, dy2) gives the bytes of accumulate(dy2 into dy) then bn_bwd(dy): a branch point's sum."""
    shape = (4, 3, 5, 16)
    be, t = _fused_setup(shape, dtype)
    be.write(t["dz"], np.random.default_rng(3).standard_normal(shape))  # the second contribution
    run(be, _fwd(t, activation="relu", z=t["z"]))
    common = dict(x=t["x"], gamma=t["gamma"], saved_mean=t["saved_mean"], saved_inv_std=t["saved_inv_std"],
                  dbeta=t["dbeta"], activation="relu", y=t["y"])
    run(be, op("bn_bwd", dy=t["dy"], dy2=t["dz"], dgamma=t["dgamma"], dx=t["dx"], **common))
    dx1, dg1 = be.read(t["dx"]).tobytes(), be.read(t["dgamma"]).tobytes()
    run(be, op("accumulate", x=t["dz"], y=t["dy"]),
        op("bn_bwd", dy=t["dy"], dgamma=t["dgamma"], dx=t["dx2"], **common))
    assert be.read(t["dx2"]).tobytes() == dx1 and be.read(t["dgamma"]).tobytes() == dg1
