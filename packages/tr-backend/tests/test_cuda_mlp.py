"""The MNIST MLP training step (784-1024-512-256-10, relu, softmax-CE, SGD) captured as ONE CUDA graph.

The plan is test_cpu_mlp.py's: h2d_copy from pinned buffer A, fc_fwd with the fused bias+relu epilogue,
softmax-CE forward/backward, fc_bwd (+ bias gradient) and act_bwd, one range_optimizer over all FC
parameters. Three steps on both backends give the same losses (1e-5 relative) and weights (1e-5 of their
scale); the same three steps replayed from the same state give byte-identical arenas; and the step time of
the graph is printed next to PyTorch's on the same GPU (eager, for reference).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from backend_testkit import A_DATA, A_LABEL, ACTIVATION_FP32, FC_B, FC_W, RESULT, SCALAR_FP32, SCALAR_INT32, op
from cuda_testkit import Twin, close

from tr.core.memory import Region, Role, Span

pytestmark = pytest.mark.gpu

SIZES = (784, 1024, 512, 256, 10)
BATCH = 128
LAYERS = len(SIZES) - 1


def _build(tf32: bool = False) -> tuple[Twin, list]:
    tw = Twin(use_tf32=tf32)
    pairs = list(zip(SIZES, SIZES[1:]))
    for i, (_, fout) in enumerate(pairs):
        tw.add(f"b{i}", (fout,), "fp32", Region(Role.PARAM, FC_B))
    for i, (fin, fout) in enumerate(pairs):
        tw.add(f"w{i}", (fout, 1, 1, fin), "fp32", Region(Role.PARAM, FC_W))
    for i, (_, fout) in enumerate(pairs):
        tw.add(f"db{i}", (fout,), "fp32", Region(Role.GRAD, FC_B))
    for i, (fin, fout) in enumerate(pairs):
        tw.add(f"dw{i}", (fout, 1, 1, fin), "fp32", Region(Role.GRAD, FC_W))
    tw.add("result", (3,), "fp32", RESULT)
    tw.add("labels", (BATCH, 1, 1, 1), "int32", Region(Role.INPUT, A_LABEL))
    tw.add("x", (BATCH, 28, 28, 1), "fp32", Region(Role.INPUT, A_DATA))
    for i, f in enumerate(SIZES[1:]):
        tw.add(f"h{i}", (BATCH, 1, 1, f), "fp32", ACTIVATION_FP32)
    tw.add("probs", (BATCH, 1, 1, 10), "fp32", ACTIVATION_FP32)
    for i, f in enumerate(SIZES[1:]):
        tw.add(f"dh{i}", (BATCH, 1, 1, f), "fp32", ACTIVATION_FP32)
    tw.add("lr", (1,), "fp32", SCALAR_FP32)
    tw.add("scale", (1,), "fp32", SCALAR_FP32)
    tw.add("flag", (1,), "int32", SCALAR_INT32)
    tw.allocate()
    t = tw.arena.tensors
    calls = [op("h2d_copy", labels=t["labels"], data=t["x"], buffer=0)]
    src = t["x"]
    for i in range(LAYERS):
        calls.append(op("fc_fwd", layer=i, x=src, w=t[f"w{i}"], b=t[f"b{i}"], y=t[f"h{i}"],
                        activation="relu" if i < LAYERS - 1 else None))
        src = t[f"h{i}"]
    calls += [op("softmax_ce_fwd", logits=src, labels=t["labels"], probs=t["probs"], result=t["result"]),
              op("softmax_ce_bwd", probs=t["probs"], labels=t["labels"], scale=t["scale"],
                 dlogits=t[f"dh{LAYERS - 1}"])]
    for i in reversed(range(LAYERS)):
        x = t[f"h{i - 1}"] if i else t["x"]
        calls.append(op("fc_bwd", layer=i, x=x, w=t[f"w{i}"], dy=t[f"dh{i}"], dw=t[f"dw{i}"], db=t[f"db{i}"],
                        dx=t[f"dh{i - 1}"] if i else None))
        if i:
            calls.append(op("act_bwd", layer=i - 1, x=t[f"h{i - 1}"], dy=t[f"dh{i - 1}"], dx=t[f"dh{i - 1}"],
                            kind="relu"))
    calls.append(op("range_optimizer", w=Span.of(Role.PARAM), g=Span.of(Role.GRAD),
                    lr=t["lr"], flag=t["flag"], grad_scale=t["scale"], rule="sgd"))
    return tw, calls


def _init(tw: Twin, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i, (fin, fout) in enumerate(zip(SIZES, SIZES[1:])):
        bound = 1 / np.sqrt(fin)
        tw.write(f"w{i}", rng.uniform(-bound, bound, (fout, 1, 1, fin)))
        tw.write(f"b{i}", rng.uniform(-bound, bound, fout))
    tw.write("lr", [0.05])
    tw.write("scale", [1.0])


def _data(seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 10, BATCH).astype(np.int32), rng.random((BATCH, 28, 28, 1), np.float32))
            for _ in range(2)]


def _bind(tw: Twin, data: list) -> None:
    tw.cpu.bind_host_buffers(data)
    pinned = tw.gpu.host_buffers(BATCH, (28, 28, 1), "fp32")
    for (lab, dat), (plab, pdat) in zip(data, pinned):
        plab[:] = lab
        pdat[:] = dat
    tw.gpu.bind_host_buffers(pinned)


def test_mlp_step_matches_cpu_backend():
    tw, calls = _build()
    _init(tw)
    _bind(tw, _data())
    gc, gg = tw.cpu.capture("step", calls), tw.gpu.capture("step", calls)
    plans = "; ".join(f"{c.op}: {o.info}" for c, o in zip(calls, gg.ops) if c.op.startswith("fc"))
    print(f"\nMLP step graph: {gg.num_ops} ops -> {gg.num_nodes} CUDA graph nodes, one launch; {plans}")
    for step in range(3):
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
        lc, lg = (a.ravel() for a in tw.both("result"))
        assert abs(float(lg[0]) - float(lc[0])) <= 1e-5 * abs(float(lc[0])), (step, lg, lc)
        assert lg[1] == lc[1] and lg[2] == lc[2]
    for i in range(LAYERS):
        for name in (f"w{i}", f"b{i}", f"dw{i}", f"db{i}"):
            c, g = tw.both(name)
            close(g, c, 1e-5, name)


def test_mlp_step_replays_give_identical_bytes():
    tw, calls = _build()
    _bind(tw, _data())
    g = tw.gpu.capture("step", calls)
    total = tw.gpu.layout.total_bytes
    snapshots = []
    for _ in range(2):
        _init(tw)
        tw.gpu.write_bytes(tw["flag"].offset, np.zeros(1, np.int32))
        for _ in range(3):
            tw.gpu.launch(g)
        snapshots.append(tw.gpu.read_bytes(0, total))
    assert np.array_equal(snapshots[0], snapshots[1])


def test_mlp_step_tf32_tracks_fp32():
    tw, calls = _build(tf32=True)
    _init(tw)
    _bind(tw, _data())
    gc, gg = tw.cpu.capture("step", calls), tw.gpu.capture("step", calls)
    for _ in range(3):
        tw.cpu.launch(gc)
        tw.gpu.launch(gg)
    lc, lg = (a.ravel() for a in tw.both("result"))
    assert abs(float(lg[0]) - float(lc[0])) <= 2e-3 * abs(float(lc[0]))
    c, g = tw.both("w0")
    close(g, c, 1e-3, "w0")


def test_mlp_step_time_against_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    tw, calls = _build()
    _init(tw)
    _bind(tw, _data())
    be = tw.gpu
    g = be.capture("step", calls)
    ev0, ev1 = be.event(), be.event()
    for _ in range(20):
        be.launch(g)
    be.synchronize()
    iters = 200
    t0 = time.perf_counter()
    ev0.record(1)
    for _ in range(iters):
        be.launch(g)
    ev1.record(1)
    ev1.synchronize()
    ours_ms = ev1.elapsed_ms(ev0) / iters
    host_us = (time.perf_counter() - t0) / iters * 1e6

    dev = torch.device("cuda")
    model = torch.nn.Sequential(*[m for a, b in zip(SIZES, SIZES[1:]) for m in (torch.nn.Linear(a, b),
                                                                                torch.nn.ReLU())][:-1]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xh = torch.from_numpy(_data()[0][1].reshape(BATCH, -1)).pin_memory()
    yh = torch.from_numpy(_data()[0][0]).long().pin_memory()

    def torch_step() -> None:
        x, y = xh.to(dev, non_blocking=True), yh.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(20):
        torch_step()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        torch_step()
    e.record()
    e.synchronize()
    theirs_ms = s.elapsed_time(e) / iters
    print(f"\nMLP step on {torch.cuda.get_device_name()}: tr cuda graph {ours_ms * 1e3:.1f} us/step "
          f"(host {host_us:.1f} us/launch, {g.num_nodes} nodes), torch eager {theirs_ms * 1e3:.1f} us/step, "
          f"ratio {ours_ms / theirs_ms:.2f}")
    assert ours_ms > 0
