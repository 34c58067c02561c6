"""Gradient accumulation (task.accumulate) on the CUDA backend: the MLP of test_accumulate.py with k micro-batches
on CUDA against the CPU's k micro-batches (the same regrouped sums: ulp-level, as test_gpu_training.py holds CUDA to
the CPU) and against CUDA's one batch (FP32 rounding of the regrouping), AMP included; two CUDA runs byte-identical.
GPU-only."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_accumulate import ATOL, RTOL, _params, _run, _task  # noqa: E402

pytestmark = pytest.mark.gpu


def _on(device, k, amp=False):
    t = _task(k, amp=amp)
    t.device(device)
    return t


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_cuda_accumulation_follows_the_cpus_and_one_batch(amp):
    cpu, gpu, one = _on("cpu", 4, amp), _on("cuda", 4, amp), _on("cuda", 1, amp)
    _, sc = _run(cpu)
    _, sg = _run(gpu)
    _, s1 = _run(one)
    assert gpu.backend.name == "cuda" and len(sg) == len(sc) == len(s1) == 12
    rtol = 2e-2 if amp else 1e-4  # (AMP: FP16 gradients, rounded on each backend by its own GEMM order)
    np.testing.assert_allclose([v for _, v in sg], [v for _, v in sc], rtol=rtol)
    for name, w in _params(cpu).items():
        np.testing.assert_allclose(_params(gpu)[name], w, rtol=rtol, atol=10 * ATOL if not amp else 2e-3,
                                   err_msg=name)
        if not amp:
            np.testing.assert_allclose(_params(gpu)[name], _params(one)[name], rtol=10 * RTOL, atol=10 * ATOL,
                                       err_msg=name)


def test_two_cuda_runs_with_accumulation_are_byte_identical():
    a, b = _on("cuda", 2, True), _on("cuda", 2, True)
    _run(a)
    _run(b)
    wa, wb = a.weights(), b.weights()
    assert all(wa[k].tobytes() == wb[k].tobytes() for k in wa)
