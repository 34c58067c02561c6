"""A small residual CNN trained for three steps on the CPU backend, against the same model in PyTorch.

conv3x3 -> BN -> relu (mask) -> conv3x3 -> BN -> add(skip) + relu -> maxpool 2x2 -> GAP -> FC -> softmax-CE,
with the whole backward (masks, accumulate at the branch point, first-layer conv without dgrad) and one
momentum range_optimizer over all master parameters (role PARAM). Every op of the chain is
checked where it matters: loss per step, BN running statistics, and all weights after three steps, within
1e-5 of their scale (float64 reference).
"""

import numpy as np
import torch
import torch.nn.functional as F
from backend_testkit import (
    A_DATA,
    A_LABEL,
    ACTIVATION_FP32,
    BN_B,
    BN_W,
    DEEP_CONV,
    FC_B,
    FC_W,
    FIRST_CONV,
    MASK,
    MEAN,
    RESULT,
    SCALAR_FP32,
    SCALAR_INT32,
    VAR,
    SimpleArena,
    assert_close,
    nchw,
    op,
)

from tr.core.memory import Region, Role, Span

N, H, C0, C, K = 4, 8, 3, 6, 5
PARAMS = [("beta1", (C,), BN_B), ("beta2", (C,), BN_B), ("gamma1", (C,), BN_W), ("gamma2", (C,), BN_W),
          ("fcb", (K,), FC_B), ("fcw", (K, 1, 1, C), FC_W), ("w1", (C, 3, 3, C0), FIRST_CONV),
          ("w2", (C, 3, 3, C), DEEP_CONV)]


def _build():
    a = SimpleArena()
    t = {}
    for prefix, role in (("r", Role.RUNNING), ("n", Role.RUNNING_NEXT)):  # statistics read, then written
        for stat, group in (("m", MEAN), ("v", VAR)):
            for i in (1, 2):
                t[f"{prefix}{stat}{i}"] = a.add(f"{prefix}{stat}{i}", (C,), region=Region(role, group))
    # layout order: master parameters, gradients, the step result, momenta
    for prefix, role in (("W", Role.PARAM), ("G", Role.GRAD), ("R", Role.RESULT), ("M", Role.MOMENT1)):
        if role is Role.RESULT:
            t["result"] = a.add("result", (3,), region=RESULT)
            continue
        for name, shape, group in PARAMS:
            t[prefix + name] = a.add(prefix + name, shape, region=Region(role, group))
    t["labels"] = a.add("labels", (N,), "int32", Region(Role.INPUT, A_LABEL))
    t["x"] = a.add("x", (N, H, H, C0), region=Region(Role.INPUT, A_DATA))
    feat = {"c1": (N, H, H, C), "b1": (N, H, H, C), "r1": (N, H, H, C), "c2": (N, H, H, C), "b2": (N, H, H, C),
            "s": (N, H, H, C), "p": (N, H // 2, H // 2, C), "g": (N, 1, 1, C), "z": (N, 1, 1, K),
            "probs": (N, 1, 1, K)}
    for name, shape in feat.items():
        t[name] = a.add(name, shape, region=ACTIVATION_FP32)
    for name, shape in feat.items():
        if name != "probs":
            t["d" + name] = a.add("d" + name, shape, region=ACTIVATION_FP32)
    for name in ("sm1", "si1", "sm2", "si2"):
        t[name] = a.add(name, (C,), region=SCALAR_FP32)
    t["lr"] = a.add("lr", (1,), region=SCALAR_FP32)
    t["one"] = a.add("one", (1,), region=SCALAR_FP32)
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    t["mask1"] = a.add("mask1", (N, H, H, C), "int8", MASK)
    t["pmask"] = a.add("pmask", (N, H // 2, H // 2, C), "int8", MASK)
    be = a.allocate()

    def bn(i, x, y):
        return op("bn_fwd", layer=i, x=t[x], gamma=t[f"Wgamma{i}"], beta=t[f"Wbeta{i}"], mean_in=t[f"rm{i}"],
                  var_in=t[f"rv{i}"], mean_out=t[f"nm{i}"], var_out=t[f"nv{i}"], y=t[y], saved_mean=t[f"sm{i}"],
                  saved_inv_std=t[f"si{i}"], momentum=0.1, eps=1e-5)

    def bn_bwd(i, x, dy, dx):
        return op("bn_bwd", layer=i, x=t[x], gamma=t[f"Wgamma{i}"], dy=t[dy], saved_mean=t[f"sm{i}"],
                  saved_inv_std=t[f"si{i}"], dgamma=t[f"Ggamma{i}"], dbeta=t[f"Gbeta{i}"], dx=t[dx])

    calls = [
        op("conv_fwd", layer=0, x=t["x"], w=t["Ww1"], y=t["c1"], stride=1, padding=1), bn(1, "c1", "b1"),
        op("act_fwd", x=t["b1"], y=t["r1"], mask=t["mask1"], kind="relu"),
        op("conv_fwd", layer=2, x=t["r1"], w=t["Ww2"], y=t["c2"], padding=1), bn(2, "c2", "b2"),
        op("add_fwd", a=t["b2"], b=t["r1"], y=t["s"], activation="relu"),
        op("maxpool_fwd", x=t["s"], y=t["p"], mask=t["pmask"], kernel=2, stride=2),
        op("gap_fwd", x=t["p"], y=t["g"]), op("fc_fwd", x=t["g"], w=t["Wfcw"], b=t["Wfcb"], y=t["z"]),
        op("softmax_ce_fwd", logits=t["z"], labels=t["labels"], probs=t["probs"], result=t["result"]),
        op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["one"], dlogits=t["dz"]),
        op("fc_bwd", x=t["g"], w=t["Wfcw"], dy=t["dz"], dw=t["Gfcw"], db=t["Gfcb"], dx=t["dg"]),
        op("gap_bwd", dy=t["dg"], dx=t["dp"]),
        op("maxpool_bwd", dy=t["dp"], mask=t["pmask"], dx=t["ds"], kernel=2, stride=2),
        op("act_bwd", x=t["s"], dy=t["ds"], dx=t["ds"], kind="relu"),
        bn_bwd(2, "c2", "ds", "dc2"),
        op("conv_bwd", layer=2, x=t["r1"], w=t["Ww2"], dy=t["dc2"], dw=t["Gw2"], dx=t["dr1"], padding=1),
        op("accumulate", x=t["ds"], y=t["dr1"]),  # the skip branch
        op("act_bwd", x=t["b1"], dy=t["dr1"], dx=t["db1"], mask=t["mask1"], kind="relu"),
        bn_bwd(1, "c1", "db1", "dc1"),
        op("conv_bwd", layer=0, x=t["x"], w=t["Ww1"], dy=t["dc1"], dw=t["Gw1"], padding=1),
        op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD), m=Span.of(Role.MOMENT1), lr=t["lr"],
           flag=t["flag"], grad_scale=t["one"], rule="momentum", beta1=0.9),
        op("range_copy", src=Span.of(Role.RUNNING_NEXT), dst=Span.of(Role.RUNNING)),
    ]
    return be, t, be.capture("step", calls)


def test_residual_cnn_trains_like_torch():
    be, t, step = _build()
    rng = np.random.default_rng(0)
    for name, shape, _ in PARAMS:
        v = rng.uniform(0.5, 1.5, shape) if name.startswith("gamma") else 0.3 * rng.standard_normal(shape)
        be.write(t["W" + name], v)
    for i in (1, 2):
        be.write(t[f"rv{i}"], np.ones(C))
    be.write(t["lr"], [0.1])
    be.write(t["one"], [1.0])
    x = rng.standard_normal((N, H, H, C0))
    labels = rng.integers(0, K, N)
    be.write(t["x"], x)
    be.write(t["labels"], labels)

    p = {name: torch.tensor(be.read(t["W" + name]).astype(np.float64), requires_grad=True) for name, *_ in PARAMS}
    running = {k: torch.tensor(be.read(t[k]).ravel().astype(np.float64)) for k in ("rm1", "rm2", "rv1", "rv2")}
    opt = torch.optim.SGD(p.values(), lr=0.1, momentum=0.9)
    xt, yt = nchw(be.read(t["x"])).detach(), torch.tensor(labels)

    def torch_step():
        def bn(h, i):
            g, b = p[f"gamma{i}"].reshape(-1), p[f"beta{i}"].reshape(-1)
            return F.batch_norm(h, running[f"rm{i}"], running[f"rv{i}"], g, b, training=True, momentum=0.1, eps=1e-5)

        r1 = torch.relu(bn(F.conv2d(xt, p["w1"].permute(0, 3, 1, 2), padding=1), 1))
        s = torch.relu(bn(F.conv2d(r1, p["w2"].permute(0, 3, 1, 2), padding=1), 2) + r1)
        g = F.max_pool2d(s, 2).mean(dim=(2, 3))
        z = F.linear(g, p["fcw"].reshape(K, C), p["fcb"].reshape(-1))
        loss = F.cross_entropy(z, yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        be.launch(step)
        loss = torch_step()
        assert abs(float(be.read(t["result"]).ravel()[0]) - loss) <= 1e-5 * max(1.0, loss)
    for name, *_ in PARAMS:
        assert_close(be.read(t["W" + name]), p[name].detach().numpy())
    for k in ("rm1", "rm2", "rv1", "rv2"):
        assert_close(be.read(t[k]).ravel(), running[k].numpy())
