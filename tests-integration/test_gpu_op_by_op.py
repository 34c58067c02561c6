"""Every op of the example networks' training step on CUDA, fed the CPU backend's inputs, gives the CPU op's outputs
to rounding (tools/testkit/op_diff.py). GPU-only.

test_gpu_cnn_training.py compares whole networks, where rounding and relu/pool-tie flips compound over dozens of
layers; there a wrong kernel and honest rounding look alike (VGG16-BN's first-step gradients 2.5 % from the CPU's
on the H200, 2026-12-04, every tensor alike). Here each op sees identical inputs, so an op's error is its own: the
norm-relative error of every output is held to op_diff.BOUND (FP32 1e-4, FP16 5e-3, BF16 4e-2), and the printed
table names the first op that parts and where.
"""

from __future__ import annotations

import pytest
from op_diff import example, first_over, run, table

pytestmark = pytest.mark.gpu

CASES = [("vgg16_bn", False), ("resnet50", False), ("mobilenet_v2", False), ("efficientnet_b0", False),
         ("vgg16_bn", True), ("resnet50", True), ("vgg16_bn", "bf16"), ("resnet50", "bf16"),
         ("mobilenet_v2", "bf16"), ("efficientnet_b0", "bf16")]
NAMES = {False: "fp32", True: "amp", "bf16": "bf16"}


@pytest.mark.parametrize("model,amp", CASES, ids=[f"{m}-{NAMES[a]}" for m, a in CASES])
def test_every_op_of_the_step_matches_the_cpu_op(model, amp):
    diffs = run(example(model), 32, 4, amp)
    print(f"{model} {NAMES[amp]} 32px, batch 4: op by op, CUDA against the CPU\n{table(diffs)}")
    bad = first_over(diffs)
    assert bad is None, (f"op #{bad.index} {bad.op} (layer {bad.layer}, {bad.label!r}) parts from the CPU: "
                         + "; ".join(f"{o.tensor} rel {o.rel:.3e}, max |d| {o.max_abs:.3e}, {o.mismatched} elements"
                                     f" off, the first at {o.first_bad}" for o in bad.over()))
