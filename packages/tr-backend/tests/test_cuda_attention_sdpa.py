"""Attention through cuDNN's SDPA graphs (csrc/ops/attention_sdpa.cpp; the choice: tr.backend.cuda.
attention_engines) against the CPU backend, and the fallbacks to tr's kernels. GPU-only.

FP16 and BF16 calls run cuDNN's flash attention: y, stats and dqkv within sdpa_bounds.py's per-element bounds of
the CPU backend (the 16-bit roundings flash attention makes inside, float32 rounding in other orders, one unit in
the last place of the output; test_attention_sdpa_bounds.py holds a float32 model of those roundings to the same
bounds on the CPU). stats are held to float32 accuracy: cuDNN's log-sum-exp is tr's, so the engines are
interchangeable between forward and backward. The backward is compared from the same y and stats on both sides (the
CPU's). The deterministic backward (the default) gives the same bytes on every launch and every capture; the
engine records say which engine ran and why. FP32, a head size cuDNN does not take and one token run tr's kernels
(test_cuda_attention.py's bounds); a call neither can run is refused at capture naming both reasons.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op, ulp, values
from cuda_testkit import Twin
from sdpa_bounds import backward_bounds, forward_bounds, within

from tr.backend.cuda import attention_engines as ae
from tr.backend.rules.attention import AttentionCall
from tr.core.dtype import DType
from tr.core.errors import ConfigError

pytestmark = pytest.mark.gpu

# (N, T, heads, dh): odd token counts (ViT-B/16's 197), T not a multiple of 8, head sizes 64 and 128
CASES = [(2, 17, 4, 64), (2, 197, 12, 64), (2, 17, 2, 128), (1, 197, 6, 128), (3, 50, 3, 64)]
IDS = ["t17-dh64", "vit-b-t197", "t17-dh128", "t197-dh128", "t50"]
DTYPES = ["fp16", "bf16"]
KERNEL_Y_FLOOR, KERNEL_DQKV_FLOOR, KERNEL_TOL = 8.0, 16.0, 4e-6  # test_cuda_attention.py's, for tr's kernels


def _twin(n: int, t: int, nheads: int, dh: int, dtype: str, seed: int = 0, **options) -> Twin:
    d = nheads * dh
    tw = Twin(**options)
    for name in ("qkv", "dqkv"):
        tw.add(name, (n, 1, t, 3 * d), dtype)
    for name in ("y", "y_inf", "dy"):
        tw.add(name, (n, 1, t, d), dtype)
    tw.add("stats", (n, 1, nheads, t))
    tw.allocate()
    rng = np.random.default_rng(seed + n + t + nheads + dh)
    tw.write("qkv", 1.5 * rng.standard_normal((n, 1, t, 3 * d)))
    tw.write("dy", rng.standard_normal((n, 1, t, d)))
    return tw


def _fwd(tw: Twin, nheads: int, scale: float, stats: bool = True, y: str = "y"):
    return op("attention_fwd", qkv=tw["qkv"], y=tw[y], stats=tw["stats"] if stats else None, heads=nheads,
              scale=scale)


def _bwd(tw: Twin, nheads: int, scale: float):
    return op("attention_bwd", qkv=tw["qkv"], y=tw["y"], dy=tw["dy"], stats=tw["stats"], dqkv=tw["dqkv"],
              heads=nheads, scale=scale)


def _engines(tw: Twin) -> dict[str, ae.AttentionEngine]:
    """The backend's attention records by op (one key each in these tests)."""
    out: dict[str, ae.AttentionEngine] = {}
    for e in tw.gpu.attention_engines():
        assert e.op not in out, f"two plans for {e.op}: {e.key} and {out[e.op].key}"
        out[e.op] = e
    return out


def _key(backward: bool, dtype: str, n: int, t: int, nheads: int, dh: int, stats: bool = True,
         det: bool = True) -> str:
    return ae.plan_key(backward, DType.parse(dtype), AttentionCall(n, t, nheads * dh, nheads, dh ** -0.5, stats), det)


def _same_y_and_stats(tw: Twin) -> None:
    """The CPU's y and stats on the device: the backward is compared from the same inputs on both sides."""
    for name in ("y", "stats"):
        tw.write(name, tw.cpu.read(tw[name]))


def _check_cudnn(tw: Twin, nheads: int, scale: float, dtype: str) -> None:
    """y, stats (after a forward) within the flash attention bounds of the CPU's; then dqkv from the CPU's y."""
    cpu = {name: tw.cpu.read(tw[name]) for name in ("qkv", "y", "stats", "dy")}
    y_bound, stats_bound = forward_bounds(cpu["qkv"], dtype, nheads, scale)
    within(tw.gpu.read(tw["y"]), cpu["y"], y_bound, dtype, "y")
    err = np.abs(values(tw.gpu.read(tw["stats"])) - values(cpu["stats"]))
    assert np.all(err <= stats_bound), f"stats: worst {float((err / stats_bound).max()):.2f} times the bound"
    _same_y_and_stats(tw)
    tw.run(_bwd(tw, nheads, scale), poison=("dqkv",))
    bound = backward_bounds(cpu["qkv"], cpu["y"], cpu["dy"], cpu["stats"], dtype, nheads, scale)
    within(tw.gpu.read(tw["dqkv"]), tw.cpu.read(tw["dqkv"]), bound, dtype, "dqkv")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cudnn_forward_and_backward_match_the_cpu(case, dtype):
    n, t, nheads, dh = case
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale), poison=("y", "stats", "dqkv"))
    _check_cudnn(tw, nheads, scale, dtype)
    rec = _engines(tw)
    assert set(rec) == {"attention_fwd", "attention_bwd"}
    for name, e in rec.items():
        assert e.source == "cudnn" and e.engine != "kernel" and e.note == "", (name, e)
        assert e.key == _key(name == "attention_bwd", dtype, n, t, nheads, dh)
    assert rec["attention_bwd"].deterministic and ":det=1:" in rec["attention_bwd"].key
    _, gg = tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale))
    infos = [o.info for o in gg.ops]
    assert infos[0].startswith("cudnn sdpa fprop ") and infos[1].startswith("cudnn sdpa bprop "), infos
    assert ", deterministic," in infos[1], infos


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_inference_forward_writes_no_stats_and_matches_the_cpu(dtype):
    n, t, nheads, dh = 2, 197, 12, 64
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    tw.run(_fwd(tw, nheads, scale, stats=False, y="y_inf"), poison=("y_inf", "stats"))
    y_bound, _ = forward_bounds(tw.cpu.read(tw["qkv"]), dtype, nheads, scale)
    within(tw.gpu.read(tw["y_inf"]), tw.cpu.read(tw["y_inf"]), y_bound, dtype, "y_inf")
    assert np.isnan(tw.gpu.read(tw["stats"])).all(), "the inference forward wrote stats"
    (e,) = tw.gpu.attention_engines()
    assert e.source == "cudnn" and e.key == _key(False, dtype, n, t, nheads, dh, stats=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_deterministic_backward_gives_the_same_bytes_every_launch(dtype):
    n, t, nheads, dh = 2, 197, 12, 64
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    names = ("y", "stats", "dqkv")
    runs = []
    for _ in range(2):  # two captures: new ops on the cached plans
        graph = tw.gpu.capture("step", [_fwd(tw, nheads, scale), _bwd(tw, nheads, scale)])
        for _ in range(3):
            tw.poison(*names)
            tw.gpu.launch(graph)
            tw.gpu.synchronize()
            runs.append([tw.gpu.read(tw[name]).tobytes() for name in names])
    assert all(r == runs[0] for r in runs[1:])
    rec = _engines(tw)
    assert rec["attention_bwd"].source == "cudnn" and rec["attention_bwd"].deterministic


def test_the_non_deterministic_backward_is_an_opt_in_recorded_in_the_key():
    n, t, nheads, dh, dtype = 2, 197, 12, 64, "fp16"
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    tw.gpu.configure(attention_deterministic=False)
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale), poison=("y", "stats", "dqkv"))
    _check_cudnn(tw, nheads, scale, dtype)
    e = _engines(tw)["attention_bwd"]
    assert e.source == "cudnn" and not e.deterministic and e.key == _key(True, dtype, n, t, nheads, dh, det=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_captures_of_a_key_record_one_plan_a_direction(dtype):
    """Two captures of one shape leave one record a direction: the second capture's ops found the first's plans."""
    n, t, nheads, dh = 2, 17, 4, 64
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale))
    first = tw.gpu.attention_engines()
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale))
    assert tw.gpu.attention_engines() == first and len(first) == 2


def test_fp32_runs_tr_s_kernels():
    n, t, nheads, dh = 2, 197, 12, 64
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, "fp32")
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale), poison=("y", "stats", "dqkv"))
    for name in ("y", "stats", "dqkv"):
        cpu, gpu = tw.both(name)
        scale_e = max(1.0, float(np.abs(cpu).max()))
        assert float(np.abs(gpu.astype(np.float64) - cpu).max()) <= KERNEL_TOL * scale_e, name
    for e in _engines(tw).values():
        assert (e.engine, e.source) == ("kernel", "kernel") and "FP32 attention" in e.note


def _kernel_within(tw: Twin, name: str, dtype: str, floor: float) -> None:
    cpu, gpu = (values(a) for a in tw.both(name))
    bound = ulp(cpu, dtype) + floor * 2.0 ** -24 * float(np.abs(cpu).max())
    assert np.all(np.abs(gpu - cpu) <= bound), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_head_size_cudnn_does_not_take_falls_back_to_tr_s_kernels(dtype):
    """dh = 12 is not a multiple of 8: the frontend refuses the graph when the op is made, and tr's kernels run it,
    the reason recorded."""
    n, t, nheads, dh = 2, 17, 4, 12
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    graph = tw.gpu.capture("g", [_fwd(tw, nheads, scale), _bwd(tw, nheads, scale)])
    tw.poison("y", "stats", "dqkv")
    tw.cpu.launch(tw.cpu.capture("g", [_fwd(tw, nheads, scale), _bwd(tw, nheads, scale)]))
    tw.gpu.launch(graph)
    tw.gpu.synchronize()
    _kernel_within(tw, "y", dtype, KERNEL_Y_FLOOR)
    for e in _engines(tw).values():
        assert e.source == "kernel" and e.engine == "kernel" and e.note, e  # the frontend's reason
    assert all(o.info.startswith("tr kernels (cuDNN: ") for o in graph.ops), [o.info for o in graph.ops]
    _same_y_and_stats(tw)
    tw.run(_bwd(tw, nheads, scale), poison=("dqkv",))
    _kernel_within(tw, "dqkv", dtype, KERNEL_DQKV_FLOOR)


def test_one_token_runs_the_backward_on_tr_s_kernels_from_cudnn_s_statistics():
    """cuDNN's backward refuses s_q = s_kv = 1; tr's kernels take it, from whatever forward made y and stats (one
    token: y = v, stats = the score, dq = dk = 0, dv = dy)."""
    n, t, nheads, dh, dtype = 3, 1, 2, 64, "fp16"
    scale = dh ** -0.5
    tw = _twin(n, t, nheads, dh, dtype)
    tw.run(_fwd(tw, nheads, scale), _bwd(tw, nheads, scale), poison=("y", "stats", "dqkv"))
    bwd = _engines(tw)["attention_bwd"]
    assert bwd.source == "kernel" and bwd.note, bwd
    for name in ("y", "dqkv"):
        _kernel_within(tw, name, dtype, KERNEL_DQKV_FLOOR)
    cpu, gpu = tw.both("stats")
    assert np.abs(gpu.astype(np.float64) - cpu).max() <= 1e-5 * max(1.0, float(np.abs(cpu).max()))


def test_a_call_neither_engine_can_run_is_refused_naming_both_reasons():
    """dh = 12 (cuDNN refuses) and T = 70000 (tr's kernels' scores do not fit shared memory): a ConfigError at
    capture, i.e. at compile, naming the op, both engines' reasons and T."""
    nheads, dh, t = 1, 12, 70000
    tw = Twin()
    tw.add("qkv", (1, 1, t, 3 * dh), "fp16")
    tw.add("y", (1, 1, t, dh), "fp16")
    tw.add("stats", (1, 1, nheads, t))
    tw.allocate()
    call = op("attention_fwd", qkv=tw["qkv"], y=tw["y"], stats=tw["stats"], heads=nheads, scale=0.5, layer=7,
              label="blocks.3.attn")
    with pytest.raises(ConfigError, match=r"(?s)attention_fwd \(layer 7, blocks.3.attn\).*neither engine can run "
                                          r"it: cuDNN's SDPA: .*tr's kernels: .*T=70000 tokens do not fit"):
        tw.gpu.capture("g", [call])
