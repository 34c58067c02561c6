"""tools/testkit/op_diff.py on the CPU: two CPU backends agree op by op, and a backend whose one op is wrong by 2 %
is named at that op and no earlier (the GPU test runs the same comparison against CUDA)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from op_diff import (
    _values,
    backward_from_test_forward,
    compare,
    epoch_calls,
    fill_batch,
    first_over,
    step_calls,
    table,
    task_pair,
)
from wrapped_backend import AfterEachCall

from tr.graph.blueprint import BluePrint, cbr, dropout, fc, flatten, maxpool, relu, seq

CLASSES = 10


def _net() -> BluePrint:
    """Every fused kind VGG16-BN has: cbr, cbr + 2x2 pool, fc + relu, dropout, fc."""
    return BluePrint(seq(cbr(8, 3, s=1, p=1), cbr(8, 3, s=1, p=1), maxpool(2, 2), cbr(16, 3, s=1, p=1),
                         maxpool(2, 2), flatten(), fc(32), relu(), dropout(0.5), fc(CLASSES)),
                     name="small_vgg", num_classes=CLASSES)


class _Wrong(AfterEachCall):
    """A backend that runs every op as the wrapped one does, but scales one output of the ``nth`` call of ``op``."""

    def __init__(self, inner, op: str, nth: int, out: str, factor: float) -> None:
        super().__init__(inner)
        self.op, self.nth, self.out, self.factor = op, nth, out, factor
        self.seen = 0

    def after(self, call) -> None:
        if call.op == self.op:
            if self.seen == self.nth:
                t = call.args[self.out]
                self.inner.write(t, _values(self.inner, t) * np.float32(self.factor))  # (write rounds to BF16)
            self.seen += 1


@pytest.fixture(scope="module")
def tasks():
    return task_pair(_net(), 16, 4, False, CLASSES, test="cpu")


def test_two_cpu_backends_agree_on_every_op(tasks):
    a, b = tasks
    calls = step_calls(a.program)
    diffs = compare(a, b, calls)
    assert len(diffs) == len(calls) and len(calls) > 20
    assert first_over(diffs) is None, table(diffs)
    assert all(o.rel == 0.0 for d in diffs for o in d.outputs)
    ops = {d.op for d in diffs}
    assert {"bn_maxpool_bwd", "bn_bwd", "conv_bwd", "fc_bwd", "dropout_bwd", "range_optimizer"} <= ops


def test_bf16_tensors_compare_as_numbers():
    """Under BF16 AMP the tool reads 16-bit tensors as values (not their bits): two CPU backends agree on every op,
    and a BF16 output made 10 % wrong (BF16's bound is 4 %) is named with a 10 % error."""
    a, b = task_pair(_net(), 16, 4, "bf16", CLASSES, test="cpu")
    calls = step_calls(a.program)
    assert first_over(compare(a, b, calls)) is None
    fill_batch(a, CLASSES)
    wrong = SimpleNamespace(program=b.program, backend=_Wrong(b.backend, "conv_fwd", 1, "y", 1.10))
    bad = first_over(compare(a, wrong, calls))
    assert bad is not None and bad.op == "conv_fwd" and [o.tensor for o in bad.over()] and \
        bad.worst.dtype == "bf16", bad
    assert bad.worst.rel == pytest.approx(0.10, rel=0.05)  # BF16 rounds the scaled values: 10 % to within its ulp


@pytest.mark.parametrize("op,nth,out", [("bn_maxpool_bwd", 1, "dgamma"), ("dropout_bwd", 0, "dx"),
                                        ("conv_fwd", 2, "y")])
def test_a_wrong_op_is_named_where_it_is_wrong(tasks, op, nth, out):
    a, b = tasks
    fill_batch(a, CLASSES)  # the reference's arena advanced through a step in the test before: start again
    wrong = SimpleNamespace(program=b.program, backend=_Wrong(b.backend, op, nth, out, 1.02))
    diffs = compare(a, wrong, step_calls(a.program))
    bad = first_over(diffs)
    assert bad is not None, table(diffs)
    assert bad.op == op and [o.arg for o in bad.over()] == [out], table(diffs)
    assert sum(1 for d in diffs if d.op == op and d.index < bad.index) == nth
    assert bad.worst.rel == pytest.approx(0.02, rel=1e-3)  # the op's own error, not one compounded by later ops


def test_under_amp_the_epoch_casts_the_working_weights_first():
    """Without the epoch's FP32 -> FP16 cast the working weights are zero and every convolution compares zeros."""
    a, b = task_pair(_net(), 16, 4, True, CLASSES, test="cpu")
    calls = epoch_calls(a.program)
    assert calls[0].op == "range_cast" and len(calls) == len(step_calls(a.program)) + 1
    diffs = compare(a, b, calls)
    assert first_over(diffs) is None, table(diffs)
    conv = next(d for d in diffs if d.op == "conv_fwd")
    assert conv.outputs[0].ref_norm > 0  # a real convolution, not zeros against zeros


def _arena(task) -> list[tuple]:
    """Every allocated tensor of ``task`` and its bytes now (to put them back with _restore)."""
    return [(t, task.backend.read(t)) for t in task.program.tensors if t.allocated]


def _restore(task, saved: list[tuple]) -> None:
    for t, value in saved:
        task.backend.write(t, value)


def test_backwards_from_one_forward_agree_where_the_forwards_decided_otherwise(tasks):
    """The test backend's forward differs (one convolution's output scaled, as a rounding difference would move
    it, only larger): both backwards, run from the test's forward, agree to the bit, so what they compare is the
    backward's own arithmetic. From the same arenas without the nudge the gradients are others: the backwards ran
    from the test's forward, not the reference's (a copy the other way would make the nudge invisible)."""
    a, b = tasks
    fill_batch(a, CLASSES)
    fill_batch(b, CLASSES)  # the test's forward reads its own batch: without one it scales zeros
    calls = step_calls(a.program)
    before = _arena(a), _arena(b)
    plain = backward_from_test_forward(a, b, calls)
    _restore(a, before[0])  # the step's optimizer moved both arenas' weights
    _restore(b, before[1])
    nudged = SimpleNamespace(program=b.program, backend=_Wrong(b.backend, "conv_fwd", 1, "y", 1.0 + 1e-3))
    grads = backward_from_test_forward(a, nudged, calls)
    assert grads and all(np.array_equal(r, t) for r, t in grads.values())
    assert any(float(np.abs(r).max()) > 0 for r, _ in grads.values())
    assert grads.keys() == plain.keys()
    assert any(not np.array_equal(grads[k][0], plain[k][0]) for k in grads), "the nudge reached no gradient"


def test_overflow_on_both_sides_is_no_difference_and_on_one_side_an_infinite_one():
    """A loss-scaled FP16 gradient that overflows on both backends (the step is skipped on both) is alike;
    an overflow on one side only is the op parting at that element."""
    from op_diff import _compare_outputs

    from tr.core.dtype import DType

    t = SimpleNamespace(name="g", dtype=DType.FP16)
    ref = np.array([1.0, np.inf, -np.inf, np.nan, 2.0], np.float16)
    same = _compare_outputs([("dw", t, ref, ref.copy())])[0]
    assert (same.rel, same.max_abs, same.mismatched) == (0.0, 0.0, 0)
    one_sided = ref.copy()
    one_sided[0] = np.inf
    parted = _compare_outputs([("dw", t, ref, one_sided)])[0]
    assert parted.rel == np.inf and parted.mismatched == 1 and parted.first_bad == [0]
    flipped = ref.copy()
    flipped[1] = -np.inf
    assert _compare_outputs([("dw", t, ref, flipped)])[0].first_bad == [1]
