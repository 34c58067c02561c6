"""benchmarks/step_profile.py on the CPU: its documented smoke run profiles every op of a training step (timed by
the wall clock: the CPU backend has no events), and a range op's bytes are those of the spans it names."""

import json
import sys
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import step_profile  # noqa: E402

from tr.core.memory import Span  # noqa: E402
from tr.core.ops import CATALOGUE  # noqa: E402

ARGS = ["--device", "cpu", "--model", "mlp_mnist", "--batch", "4", "--no-amp", "--reps", "1", "--top", "0"]


def test_the_cpu_smoke_run_profiles_every_op(tmp_path):
    out = tmp_path / "profile.json"
    step_profile.main([*ARGS, "--json", str(out)])
    got = json.loads(out.read_text())
    ops = {r["op"] for r in got["ops"]}
    assert {"fc_fwd", "fc_bwd", "range_optimizer", "range_clear"} <= ops
    assert got["step_ms"] > 0 and all(r["ms"] > 0 for r in got["ops"])
    assert all(r["bytes"] > 0 for r in got["ops"] if r["op"].startswith("range_"))


def test_range_op_bytes_are_their_spans_bytes():
    a = Namespace(model="mlp_mnist", device="cpu", batch=4, resolution=28, classes=10, amp=False)
    task = step_profile.build(a)
    layout = task.program.layout
    seen = 0
    for call in task.program.step("train_a").calls:
        spans = {k: v for k, v in call.args.items() if isinstance(v, Span)}
        if not spans:
            continue
        roles = {arg.name: arg.role for arg in CATALOGUE[call.op].args}
        size = {k: layout.span(s)[1] - layout.span(s)[0] for k, s in spans.items()}
        read, written = step_profile.call_bytes(call, layout)
        tensors = {k: step_profile.tensor_bytes(v) for k, v in call.args.items() if v is not None and k not in spans}
        both = {**size, **tensors}
        assert read == sum(n for k, n in both.items() if roles[k] in ("in", "inout")), call
        assert written == sum(n for k, n in both.items() if roles[k] in ("out", "inout")), call
        seen += sum(1 for n in size.values() if n > 0)
    assert seen >= 4  # the gradient clear, the finite check, the optimizer's weights, gradients and moments
