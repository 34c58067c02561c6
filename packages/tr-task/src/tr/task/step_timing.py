"""Benchmark helpers of a compiled task's captured steps: the host's cost of queueing a step, and a step's time.

Both train more steps on the batches already in the device buffers: call them after run(), never between compile()
and run() of a measured training.
"""

from __future__ import annotations

import time

from tr.task.executor import CapturedSteps, StepLauncher


def host_us_per_step(backend, steps: CapturedSteps, n: int = 200) -> float:
    """Host time to queue one training step (transfer + step launches and their event bookkeeping), in
    microseconds, not counting the wait for the copy: what the loop costs besides waiting for data and the
    device. Trains n more steps on the batches in the device buffers."""
    launch = StepLauncher(backend)
    backend.synchronize()
    total = 0.0
    for k in range(n):
        t0 = time.perf_counter()
        launch(steps.transfer[k % 2], steps.train[k % 2], k % 2, wait=False)
        total += time.perf_counter() - t0
        launch.wait(k % 2)
    backend.synchronize()
    return total / n * 1e6


def time_train_step(backend, steps: CapturedSteps, n: int = 100, warmup: int = 10) -> float:
    """Seconds per launch of the captured full-batch training step on buffer A (data already on the device),
    after ``warmup`` untimed launches."""
    g = steps.train[0]
    for _ in range(warmup):
        backend.launch(g)
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        backend.launch(g)
    backend.synchronize()
    return (time.perf_counter() - t0) / n
