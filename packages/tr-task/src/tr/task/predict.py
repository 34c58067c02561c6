"""Inference on the compiled plan: the validation forward (INF_MAIN_A) on a user's batch.

It runs the same ops as validation (BN with the running statistics folded into scale/bias, no dropout)
in the same arena: the batch is written into input buffer A, which the next training or validation step's
transfer overwrites anyway, so predict() may be called between run()s.
"""

from __future__ import annotations

import weakref

import numpy as np

from tr.core.errors import ConfigError, DTypeError, PhaseError, ShapeError
from tr.core.graph_id import GraphId
from tr.core.phase import Phase

OUTPUTS = ("logits", "probs", "argmax")
_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # task -> (graph, input, logits, loss kind)


def _plan(task):
    if task not in _graphs:
        prog = task.program
        if "val" not in prog.variants:
            raise ConfigError("predict() runs the inference graph, which is compiled only with validation data: "
                              "give the feeder a validation set")
        calls = prog.calls("val", GraphId.INF_MAIN_A)
        # a resident-input plan (tr.graph.resident) gathers its batch from the data set first: predict()
        # writes the user's normalised batch where that gather would put it, and skips it
        name = "aug_x" if any(c.op == "augment_affine" for c in calls) else "data_a"
        calls = [c for c in calls if c.op != "augment_affine"]
        data = next(a for c in calls for a in c.args.values() if getattr(a, "name", None) == name)
        loss = next(c for c in calls if c.op in ("softmax_ce_inf", "onehot_loss_inf"))
        kind = loss.attrs.get("loss", "softmax_ce")
        _graphs[task] = (task.backend.capture("predict", list(calls)), data, loss.args["logits"], kind)
    return _graphs[task]


def predict(task, batch: np.ndarray, output: str = "logits") -> np.ndarray:
    """The model's output for ``batch`` (NHWC, [n, H, W, C] of the compiled input, 1 <= n <= the compiled
    validation batch; float32, or the plan's input dtype): ``"logits"`` [n, classes] float32 (default),
    ``"probs"`` (the loss's probabilities: the softmax of the logits, or each class's sigmoid under
    BCEWithLogitsLoss; an MSELoss plan has none) or ``"argmax"`` [n] int64."""
    if task.phase is not Phase.COMPILED:
        raise PhaseError(f"predict() needs a compiled task; the task is in {task.phase.name} (call compile())")
    if output not in OUTPUTS:
        raise ConfigError(f"predict(output={output!r}): expected one of {OUTPUTS}")
    graph, data, logits, kind = _plan(task)
    if output == "probs" and kind == "mse":
        raise ConfigError("predict(output='probs'): a plan trained with MSELoss gives scores, not probabilities; "
                          "ask for 'logits' or 'argmax'")
    full = data.shape.dims
    if not isinstance(batch, np.ndarray):
        raise DTypeError(f"predict() takes a numpy array, got {type(batch).__name__}")
    if batch.ndim != 4 or tuple(batch.shape[1:]) != tuple(full[1:]) or not 1 <= batch.shape[0] <= full[0]:
        raise ShapeError(f"predict(): batch of shape {tuple(batch.shape)}; the plan takes [n, {full[1]}, {full[2]}, "
                         f"{full[3]}] (NHWC) with 1 <= n <= {full[0]}")
    allowed = {np.dtype(np.float32), np.dtype(data.dtype.np_dtype)}
    if batch.dtype not in allowed:
        raise DTypeError(f"predict(): batch dtype {batch.dtype}; expected {' or '.join(sorted(map(str, allowed)))}")
    n = batch.shape[0]
    x = np.zeros(full, data.dtype.np_dtype)  # padding rows: each sample is inferred alone (BN uses running stats)
    x[:n] = batch
    be = task.backend
    be.launch(task._steps.epoch_begin)  # FP16 working weights (AMP) and folded BN scale/bias are current
    be.launch(task._steps.epoch_end)
    be.write(data, x)
    be.launch(graph)
    be.synchronize()
    out = be.read(logits).reshape(full[0], -1)[:n].astype(np.float32)
    if output == "argmax":
        return out.argmax(axis=1)
    if output == "probs" and kind == "bce_logits":
        return (0.5 * (1.0 + np.tanh(0.5 * out))).astype(np.float32)
    if output == "probs":
        e = np.exp(out - out.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out
