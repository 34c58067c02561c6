"""Where two backends' forwards of one plan decide differently: relu masks, max-pool argmaxes, dropout (and drop path)
masks.

A whole-network comparison (tests-integration/test_gpu_cnn_training.py) parts by far more than rounding when a
pre-activation within rounding of zero takes its relu the other way on one side, or two window values within
rounding of each other tie the other way: the backward then routes a whole gradient element differently, and a
batch norm over few values spreads it over its layer and every layer below. VGG16-BN at 32x32, batch 4, FP32 has
a relu pre-activation 1.1e-6 of its layer's rms from zero in layer 8 (bn_fwd, [0, 2, 2, 123]); taken the other
way it moves every gradient from layer 8 down by 2.2 % (tests-integration/test_forward_flips.py), the size and
shape of the H200's disagreement of 2026-12-04, with every op right.

Both tasks run the step's forward (AMP: the cast of the FP16 working weights first, then the calls before the
first backward op) op by op from the reference's inputs, each on its own results. Every decision the two
forwards take differently is reported with the reference's margin: its distance from the decision's threshold
relative to the rms of the values decided on (a relu: |pre-activation|; an argmax: how far the test's pick lies
below the reference's maximum; a dropout mask: inf, it has no rounding to blame). Rounding flips decisions at
tiny margins only (FP32 VGG16-BN: ~1e-6); a wrong kernel flips them at any margin, and op_diff.py then names
the op.

    python tools/testkit/forward_flips.py --model vgg16_bn --resolution 32 --batch 4 [--amp]

Only numpy and tr: tests import it (tests-integration's conftest puts tools/testkit on sys.path).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from op_diff import (
    _args,
    _values,
    amp_of,
    arguments,
    check_same_plan,
    epoch_calls,
    example,
    first_backward,
    task_pair,
)

from tr.backend.binding import CallBinder, window_geometry
from tr.backend.cpu.ops._window import Window
from tr.core.memory import Span
from tr.core.ops import OpCall, op_def

# The margin above which a flipped FP32 decision of VGG16-BN (32x32, batch 4) is not rounding's doing. Measured on
# the CPU: forwards computed in float64 or in another FP32 summation order part from the CPU's by 2e-6 of layer
# 8's norm and flip decisions at margins up to 1.1e-6; noise of 1e-5 on every convolution's output (about 30 times
# those orders' own differences) flips them at up to 3e-4. Deeper nets with batch norms over fewer values carry
# rounding further (at 1e-6 / 1e-5 noise: ResNet-50 64x64 batch 8 8e-4 / 1.6e-2, MobileNetV2 2e-4 / 2.8e-3), so
# their bounds would be their own. Under AMP, FP16 rounding compounds into decisions far from their thresholds:
# there the flips are reported, not bounded.
ROUNDING_MARGIN = 1e-3


@dataclass(frozen=True)
class Flip:
    index: int  # the call's place in the step
    op: str
    layer: int
    tensor: str  # the output whose decision differs
    kind: str  # "relu", "relu6", "argmax", "dropout" or "drop_path"
    position: tuple[int, ...]  # in that output
    margin: float  # the reference's distance from the threshold / the rms of the values decided on

    def __str__(self) -> str:
        return (f"#{self.index} {self.op} (layer {self.layer}) {self.tensor}{list(self.position)}: {self.kind} "
                f"taken the other way, margin {self.margin:.2e}")


def forward_calls(program, step: str = "train_last_a") -> list[OpCall]:
    """The forward as the training loop runs it: the cast of the FP16 working weights (AMP: each epoch begins
    with it; without it they are still zero) and the step's calls before its first backward op (the loss's)."""
    calls = epoch_calls(program, step)
    return calls[:first_backward(calls)]


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _windows(x: np.ndarray, index: int, call: OpCall) -> np.ndarray:
    """x (the pool's input x [N, H, W, C], or values of its shape) as [N, P, Q, C, kh*kw] windows in the CPU
    kernels' tap order (Window.tap_views: the order the mask's codes count), padding -inf."""
    g = Window.of(window_geometry(CallBinder(None, "forward", index, call, op_def(call.op)), "x", "y"))
    xp = np.pad(x.reshape(g.n, g.h, g.w, g.c), ((0, 0), (g.ph, g.ph), (g.pw, g.pw), (0, 0)),
                constant_values=-np.inf)
    return np.stack(g.tap_views(xp), axis=-1)


def _rms(a: np.ndarray) -> float:
    finite = a[np.isfinite(a)]
    return max(float(np.sqrt(np.mean(finite.astype(np.float64) ** 2))) if finite.size else 0.0, 1e-30)


class _Call:
    """One call's reference inputs (read before it ran) and both sides' outputs (read after)."""

    def __init__(self, index: int, call: OpCall, ref_in: dict, ref_out: dict, test_out: dict) -> None:
        self.index, self.call = index, call
        self.ref_in, self.ref_out, self.test_out = ref_in, ref_out, test_out

    def flips(self, tensor: str, kind: str, ref_dec: np.ndarray, test_dec: np.ndarray,
              margin: np.ndarray | float) -> list[Flip]:
        differ = np.argwhere(ref_dec != test_dec)
        m = np.broadcast_to(np.asarray(margin, dtype=np.float64), ref_dec.shape)
        name = self.call.args[tensor].name
        return [Flip(self.index, self.call.op, self.call.layer, name, kind, tuple(int(i) for i in pos),
                     float(m[tuple(pos)])) for pos in differ]


def _relu_flips(c: _Call, tensor: str, kind: str, pre: np.ndarray) -> list[Flip]:
    """y's relu (relu6: also its cap at 6) decisions against the reference's pre-activation ``pre``."""
    ry, ty = _f32(c.ref_out[tensor]).reshape(pre.shape), _f32(c.test_out[tensor]).reshape(pre.shape)
    rms = _rms(pre)
    out = c.flips(tensor, kind, ry > 0, ty > 0, np.abs(pre) / rms)
    if kind == "relu6":
        out += c.flips(tensor, kind, ry < 6, ty < 6, np.abs(pre - 6) / rms)
    return out


def _bn_pre(c: _Call) -> np.ndarray:
    x = _f32(c.ref_in["x"])
    cn = x.shape[-1]
    vec = lambda a: _f32(a).reshape(-1)[:cn]  # noqa: E731
    mean, inv = vec(c.ref_out["saved_mean"]), vec(c.ref_out["saved_inv_std"])
    pre = (x - mean) * (vec(c.ref_in["gamma"]) * inv) + vec(c.ref_in["beta"])
    if "z" in c.ref_in:
        pre = pre + _f32(c.ref_in["z"]).reshape(pre.shape)
    return pre


def _bn_fwd(c: _Call) -> list[Flip]:
    act = c.call.attrs.get("activation")
    return _relu_flips(c, "y", act, _bn_pre(c)) if act in ("relu", "relu6") else []


def _argmax_flips(c: _Call, values: np.ndarray, consider: np.ndarray) -> list[Flip]:
    """The mask's window positions where they differ (only where ``consider``), the margin being how far below
    the reference's maximum the test's pick lies."""
    win = _windows(values, c.index, c.call)
    rcode = np.asarray(c.ref_out["mask"]).reshape(win.shape[:-1]).astype(np.int64)
    tcode = np.asarray(c.test_out["mask"]).reshape(win.shape[:-1]).astype(np.int64)
    pick = np.clip(tcode, 0, win.shape[-1] - 1)[..., None]
    below = win.max(axis=-1) - np.take_along_axis(win, pick, axis=-1)[..., 0]
    margin = np.where(np.isfinite(below), below / _rms(values), np.inf)
    return c.flips("mask", "argmax", np.where(consider, rcode, 0), np.where(consider, tcode, 0), margin)


def _bn_maxpool_fwd(c: _Call) -> list[Flip]:
    pre = _bn_pre(c)
    win_pre = _windows(pre, c.index, c.call).max(axis=-1)  # the pooled pre-activation: the relu decides on it
    out = _relu_flips(c, "y", "relu", win_pre)
    ry, ty = _f32(c.ref_out["y"]).reshape(win_pre.shape), _f32(c.test_out["y"]).reshape(win_pre.shape)
    # where the pooled value is 0 on both sides the argmax routes nothing (the relu blocks every position)
    return out + _argmax_flips(c, np.maximum(pre, 0), (ry > 0) | (ty > 0))


def _maxpool_fwd(c: _Call) -> list[Flip]:
    x = _f32(c.ref_in["x"])
    return _argmax_flips(c, x, np.ones(_windows(x, c.index, c.call).shape[:-1], bool))


def _fc_fwd(c: _Call) -> list[Flip]:
    if c.call.attrs.get("activation") != "relu":
        return []
    y = c.ref_out["y"]
    n = y.shape[0]
    x = c.ref_in["x"].reshape(n, -1).astype(np.float64)
    w = c.ref_in["w"].reshape(-1, x.shape[1]).astype(np.float64)
    pre = x @ w.T
    if "b" in c.ref_in:
        pre = pre + c.ref_in["b"].reshape(-1).astype(np.float64)
    return _relu_flips(c, "y", "relu", pre.reshape(y.shape))


def _act_fwd(c: _Call) -> list[Flip]:
    kind = c.call.attrs.get("kind")
    return _relu_flips(c, "y", kind, _f32(c.ref_in["x"])) if kind in ("relu", "relu6") else []


def _add_fwd(c: _Call) -> list[Flip]:
    if c.call.attrs.get("activation") != "relu":
        return []
    return _relu_flips(c, "y", "relu", _f32(c.ref_in["a"]) + _f32(c.ref_in["b"]))


def _drawn(kind: str) -> Callable[[_Call], list[Flip]]:
    """A mask drawn from the dropout stream (dropout's, drop path's): no rounding to blame, so an infinite margin."""
    def flips(c: _Call) -> list[Flip]:
        return c.flips("mask", kind, np.asarray(c.ref_out["mask"]) != 0, np.asarray(c.test_out["mask"]) != 0,
                       math.inf)

    return flips


DECISIONS: dict[str, Callable[[_Call], list[Flip]]] = {
    "bn_fwd": _bn_fwd, "bn_maxpool_fwd": _bn_maxpool_fwd, "maxpool_fwd": _maxpool_fwd, "fc_fwd": _fc_fwd,
    "act_fwd": _act_fwd, "add_fwd": _add_fwd, "dropout_fwd": _drawn("dropout"),
    "drop_path_fwd": _drawn("drop_path"),
}


def _read(backend, program, call: OpCall, roles: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The call's tensor arguments of ``roles`` by argument name (spans left out: no decision reads one)."""
    return {name: _values(backend, t) for name, t in _args(program, call, roles, expand=False)
            if not isinstance(call.args[name], Span)}


def forward_flips(ref_task, test_task, calls: Sequence[OpCall] | None = None) -> list[Flip]:
    """Run ``calls`` (default: the step's forward) op by op on both tasks' backends from the reference's current
    inputs, and return every decision the two take differently, largest margin first."""
    check_same_plan(ref_task.program, test_task.program)
    prog, rb, tb = ref_task.program, ref_task.backend, test_task.backend
    calls = forward_calls(prog) if calls is None else list(calls)
    written: set[str] = set()
    for call in calls:  # what the forward reads before writing it (weights, data, statistics, the dropout seed)
        for _, t in _args(prog, call, ("in", "inout"), expand=False):
            if t.name not in written:
                tb.write(t, rb.read(t))
        written.update(t.name for _, t in _args(prog, call, ("out", "inout"), expand=False))
    flips: list[Flip] = []
    for i, call in enumerate(calls):
        decide = DECISIONS.get(call.op)
        ref_in = _read(rb, prog, call, ("in", "inout")) if decide else {}
        for backend, side in ((rb, "ref"), (tb, "test")):
            g = backend.capture(f"forward_flips_{i}_{side}", [call])
            backend.launch(g)
            backend.synchronize()
        if decide:
            c = _Call(i, call, ref_in, _read(rb, prog, call, ("out", "inout")), _read(tb, prog, call, ("out", "inout")))
            flips += decide(c)
    return sorted(flips, key=lambda f: -f.margin)


def run(blueprint, resolution: int, batch: int, amp: bool, classes: int = 10, ref: str = "cpu",
        test: str = "cuda") -> list[Flip]:
    """Compile ``blueprint`` on both devices, fill a batch, and compare the forwards' decisions."""
    return forward_flips(*task_pair(blueprint, resolution, batch, amp, classes, ref, test))


def report(flips: Sequence[Flip], limit: int = 40) -> str:
    if not flips:
        return "no decision differs"
    rows = [f"{len(flips)} decisions differ (largest margin first):"] + [f"  {f}" for f in flips[:limit]]
    if len(flips) > limit:
        rows.append(f"  ... {len(flips) - limit} more")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = arguments(__doc__.split("\n\n")[0])
    p.add_argument("--bound", type=float, default=ROUNDING_MARGIN, help="FP32: the largest margin rounding explains")
    a = p.parse_args(argv)
    flips = run(example(a.model), a.resolution, a.batch, amp_of(a), ref=a.ref, test=a.test)
    print(report(flips))
    if amp_of(a):
        return 0  # 16-bit rounding flips decisions at any margin: nothing to hold them to
    beyond = [f for f in flips if f.margin > a.bound]
    print(f"beyond rounding (margin > {a.bound:g}):", "none" if not beyond else "; ".join(map(str, beyond)))
    return 1 if beyond else 0


if __name__ == "__main__":
    sys.exit(main())
