"""One validation pass of a compiled task: every validation batch through the captured validation steps, the
metrics accumulated on the device, read once at the end."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import numpy as np

from tr.task import tta
from tr.task.executor import scalar
from tr.task.progress import Progress


def validate(task: Any, epoch: int, val=None, val_last=None, label: str = "val",
             ema: bool = False) -> tuple[float, float, float]:
    """(loss, top1, top5) of the task's main model, or of the model whose step graphs ``val``/``val_last`` are
    (the EMA's: ``ema``). With task.tta() the views' averaged probabilities (tr.task.tta.validate)."""
    feeder, be, st = task._feeder, task.backend, task._steps
    val, val_last = val or st.val, val_last or st.val_last
    steps = feeder.steps(False)
    be.launch(st.clear_metrics)
    launch = task._launch
    launch.prepare(st.val_begin)  # (a resident data set: its first validation batch)
    main = task.group is None or task.group.is_main
    bar = Progress(steps, f"epoch {epoch + 1} {label}", enabled=main and not task._cfg.quiet)
    cfg = task.config.task.tta
    if cfg is not None:
        tta.validate(task, cfg, epoch, ema, bar)
    else:
        with closing(feeder.epoch(epoch, False)) as batches:
            for k, buf, _n in batches:
                launch(st.val_transfer[buf], (val_last if k == steps - 1 else val)[buf], buf)
                feeder.release(k)
                bar.update(k + 1)
    bar.close()
    be.launch(st.val_end)
    launch.synchronize()
    acc = scalar(be, task.program, "accum").astype(np.float64) / task._val_samples
    return float(acc[0]), float(acc[1]), float(acc[2])
