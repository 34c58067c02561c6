"""The MNIST MLP training step (batch 128, 784-1024-512-256-10, relu, SGD) on the CPU backend.

Built from catalogued ops as a compiled plan would be: h2d_copy, fc_fwd with the fused relu epilogue,
softmax-CE forward/backward, fc_bwd + act_bwd (relu recomputed from the layer output, dx written over dy),
one range_optimizer over the FC bias and weight regions (role PARAM). Checked against the same model in PyTorch over
three steps (loss within 1e-5 relative, weights within 1e-5 of their scale). Its speed against PyTorch
eager is a benchmark's (benchmarks/mlp_mnist_cpu.py): a timed verdict here failed on a loaded 2-core machine.
"""

import numpy as np
import torch
from backend_testkit import (
    A_DATA,
    A_LABEL,
    ACTIVATION_FP32,
    FC_B,
    FC_W,
    RESULT,
    SCALAR_FP32,
    SCALAR_INT32,
    SimpleArena,
    assert_close,
    op,
)

from tr.core.memory import Region, Role, Span

SIZES = (784, 1024, 512, 256, 10)
BATCH = 128


def _build():
    a = SimpleArena()
    t = {}
    pairs = list(zip(SIZES, SIZES[1:]))
    for prefix, role in (("", Role.PARAM), ("d", Role.GRAD)):  # biases, then weights, per role
        for i, (_, fout) in enumerate(pairs):
            t[f"{prefix}b{i}"] = a.add(f"{prefix}b{i}", (fout,), region=Region(role, FC_B))
        for i, (fin, fout) in enumerate(pairs):
            t[f"{prefix}w{i}"] = a.add(f"{prefix}w{i}", (fout, 1, 1, fin), region=Region(role, FC_W))
    t["result"] = a.add("result", (3,), region=RESULT)
    t["labels"] = a.add("labels", (BATCH, 1, 1, 1), "int32", Region(Role.INPUT, A_LABEL))
    t["x"] = a.add("x", (BATCH, 28, 28, 1), region=Region(Role.INPUT, A_DATA))
    for i, f in enumerate(SIZES[1:]):
        t[f"h{i}"] = a.add(f"h{i}", (BATCH, 1, 1, f), region=ACTIVATION_FP32)
    t["probs"] = a.add("probs", (BATCH, 1, 1, 10), region=ACTIVATION_FP32)
    for i, f in enumerate(SIZES[1:]):
        t[f"dh{i}"] = a.add(f"dh{i}", (BATCH, 1, 1, f), region=ACTIVATION_FP32)
    t["lr"] = a.add("lr", (1,), region=SCALAR_FP32)
    t["scale"] = a.add("scale", (1,), region=SCALAR_FP32)
    t["flag"] = a.add("flag", (1,), "int32", SCALAR_INT32)
    be = a.allocate()
    layers = len(SIZES) - 1
    calls = [op("h2d_copy", labels=t["labels"], data=t["x"], buffer=0)]
    src = t["x"]
    for i in range(layers):
        calls.append(op("fc_fwd", layer=i, x=src, w=t[f"w{i}"], b=t[f"b{i}"], y=t[f"h{i}"],
                        activation="relu" if i < layers - 1 else None))
        src = t[f"h{i}"]
    calls += [op("softmax_ce_fwd", logits=src, labels=t["labels"], probs=t["probs"], result=t["result"]),
              op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["scale"],
                 dlogits=t[f"dh{layers - 1}"])]
    for i in reversed(range(layers)):
        x = t[f"h{i - 1}"] if i else t["x"]
        calls.append(op("fc_bwd", layer=i, x=x, w=t[f"w{i}"], dy=t[f"dh{i}"], dw=t[f"dw{i}"], db=t[f"db{i}"],
                        dx=t[f"dh{i - 1}"] if i else None))
        if i:
            calls.append(op("act_bwd", layer=i - 1, x=t[f"h{i - 1}"], dy=t[f"dh{i - 1}"], dx=t[f"dh{i - 1}"],
                            kind="relu"))
    calls.append(op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD),
                    lr=t["lr"], flag=t["flag"], grad_scale=t["scale"], rule="sgd"))
    return be, t, be.capture("step", calls)


def _torch_model(be, t):
    layers = []
    for i, (fin, fout) in enumerate(zip(SIZES, SIZES[1:])):
        lin = torch.nn.Linear(fin, fout)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(be.read(t[f"w{i}"]).reshape(fout, fin)))
            lin.bias.copy_(torch.from_numpy(be.read(t[f"b{i}"]).ravel()))
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _setup():
    be, t, step = _build()
    rng = np.random.default_rng(0)
    for i, (fin, fout) in enumerate(zip(SIZES, SIZES[1:])):
        bound = 1 / np.sqrt(fin)
        be.write(t[f"w{i}"], rng.uniform(-bound, bound, (fout, 1, 1, fin)))
        be.write(t[f"b{i}"], rng.uniform(-bound, bound, fout))
    be.write(t["lr"], [0.05])
    be.write(t["scale"], [1.0])
    data = [(rng.integers(0, 10, BATCH).astype(np.int32), rng.random((BATCH, 28, 28, 1), np.float32))
            for _ in range(2)]
    be.bind_host_buffers(data)
    return be, t, step, data


def test_mlp_step_matches_torch():
    be, t, step, data = _setup()
    model = _torch_model(be, t)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.from_numpy(data[0][1].reshape(BATCH, -1)), torch.from_numpy(data[0][0]).long()
    for _ in range(3):
        be.launch(step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        assert abs(float(be.read(t["result"]).ravel()[0]) - loss.item()) <= 1e-5 * loss.item()
    for i, lin in enumerate(model[::2]):
        assert_close(be.read(t[f"w{i}"]).reshape(lin.weight.shape), lin.weight.detach().numpy())
        assert_close(be.read(t[f"b{i}"]).ravel(), lin.bias.detach().numpy())
