"""Inference on the compiled plan: the validation forward (step val_a's inference part) on a user's samples.

It runs the same ops as validation (BN with the running statistics folded into scale/bias, no dropout)
in the same arena: each chunk of the compiled validation batch is written into input buffer A, which the next
training or validation step's transfer overwrites anyway, so predict() may be called between run()s. Each
sample is inferred alone (BN reads running statistics; the last chunk's padding rows are zeros), so n samples
give exactly what chunk-by-chunk calls give, whatever n (a sample at another row of a chunk may differ in the
last bits: the GEMMs' blocking).

What it takes (``input=``) is tr.task.predict_input's: normalised float samples (the default) or raw uint8
images that predict normalises exactly as validation does.

Non-finite samples (``nonfinite=``): a sample whose input, or whose logits, hold NaN or Inf gets no class
silently (argmax over NaN is class 0). ``"raise"`` (default): DataError naming the samples, for inputs before
anything runs. ``"flag"``: the other samples' results as usual, that sample's row NaN in "logits" and "probs"
and its class -1 in "argmax" (its input is fed as zeros, so it cannot reach the others).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from tr.core.bf16 import bf16_values
from tr.core.dtype import DType
from tr.core.errors import ConfigError, DataError
from tr.graph.steps import Part
from tr.task import tta
from tr.task.base import require_compiled
from tr.task.predict_input import INPUTS, normalize_raw, samples, which
from tr.task.tta import TtaConfig

__all__ = ["INPUTS", "NONFINITE", "OUTPUTS", "input_tensor", "normalize_raw", "predict"]

OUTPUTS = ("logits", "probs", "argmax")
NONFINITE = ("raise", "flag")
_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # task -> {ema: (graph, input, logits, loss kind)}


def inference_graph(task, ema: bool = False):
    """(graph, input, logits, loss kind): the validation forward of step val_a (of the EMA weights: val_ema_a)
    captured alone, its input where predict() writes a batch."""
    graphs = _graphs.setdefault(task, {})
    if ema not in graphs:
        prog = task.program
        if "val" not in prog.variants:
            raise ConfigError("predict() runs the inference graph, which is compiled only with validation data: "
                              "give the feeder a validation set")
        step, part = ("val_ema_a", Part.INFER_EMA_A) if ema else ("val_a", Part.INFER_A)
        calls = prog.step(step).calls_of(part.value)
        # a resident-input plan (tr.graph.resident) gathers its batch from the data set first: predict()
        # writes the user's normalised batch where that gather would put it, and skips it
        name = "aug_x" if any(c.op == "augment_affine" for c in calls) else "data_a"
        calls = [c for c in calls if c.op != "augment_affine"]
        data = next(a for c in calls for a in c.args.values() if getattr(a, "name", None) == name)
        loss = next(c for c in calls if c.op in ("softmax_ce_inf", "onehot_loss_inf"))
        kind = loss.attrs.get("loss", "softmax_ce")
        graphs[ema] = (task.backend.capture(f"predict{'_ema' if ema else ''}", list(calls)), data,
                       loss.args["logits"], kind)
    return graphs[ema]


def _plan(task):
    return inference_graph(task, False)


def input_tensor(task):
    """The plan tensor predict() writes: [B, H, W, C] of the compiled validation batch and sample shape."""
    require_compiled(task, "predict()")
    return _plan(task)[1]


def predict(task, batch: Any, output: str = "logits", *, input: str = "normalized",
            nonfinite: str = "raise") -> np.ndarray:
    """The model's output for ``batch``: the validation forward, any number n >= 1 of samples (split into
    chunks of the compiled validation batch).

    ``input="normalized"`` (default): ``batch`` is NHWC [n, H, W, C] of the compiled sample shape, float32 (or
    the plan's input dtype: float16 under AMP), holding what the task's data pipeline feeds validation: the
    val transforms' output normalised as (x / 255 - mean) / std (then channel padding). uint8 is refused
    (DTypeError), and float values far outside what the normalisation gives pixels 0..255 too (DataError).
    ``input="raw"``: ``batch`` is uint8 images as the data set stores them, [n, h, w, c] or a sequence of
    [h, w, c] arrays; predict runs the task's validation chain on them (val transforms, FusedNormalization with
    the task's mean/std), so the result is what validation computes for those images. Needs a task fed from
    tr.data's preprocessor settings (ConfigError for an ArrayFeeder, which holds normalised arrays).

    ``output``: ``"logits"`` [n, classes] float32 (default), ``"probs"`` (the loss's probabilities: the softmax
    of the logits, or each class's sigmoid under BCEWithLogitsLoss; an MSELoss plan has none) or ``"argmax"``
    [n] int64. ``nonfinite``: ``"raise"`` (default) a DataError naming the samples whose input or logits hold
    NaN/Inf; ``"flag"`` gives those samples NaN rows ("logits", "probs") or class -1 ("argmax").

    With ``task.tta()`` every output comes from the mean p of the views' softmax probabilities (tr.task.tta):
    "probs" is p, "logits" log p (whose softmax is p), "argmax" argmax p; validation measures the same p."""
    require_compiled(task, "predict()")
    if output not in OUTPUTS:
        raise ConfigError(f"predict(output={output!r}): expected one of {OUTPUTS}")
    if nonfinite not in NONFINITE:
        raise ConfigError(f"predict(nonfinite={nonfinite!r}): expected one of {NONFINITE}")
    graph, data, logits, kind = _plan(task)
    if output == "probs" and kind == "mse":
        raise ConfigError("predict(output='probs'): a plan trained with MSELoss gives scores, not probabilities; "
                          "ask for 'logits' or 'argmax'")
    s = samples(task, batch, input, data)
    if len(s.nonfinite) and nonfinite == "raise":
        raise DataError(f"predict(): sample {which(s.nonfinite)} holds NaN or Inf, which has no class; fix the "
                        "input, or pass nonfinite='flag' to get NaN rows / class -1 for such samples")
    cfg = task.config.task.tta
    out = _forward(task, graph, data, logits, s, cfg)
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any() and nonfinite == "raise":
        raise DataError(f"predict(): the logits of sample {which(np.flatnonzero(bad))} are not finite, though the "
                        "input is: the weights or BN statistics hold NaN/Inf, or the forward overflowed (FP16)")
    bad[s.nonfinite] = True
    result = _output(out, output, kind) if cfg is None else tta_output(out, output)
    if bad.any():
        result[bad] = -1 if output == "argmax" else np.nan
    return result


def _forward(task, graph, data, logits, s, cfg: TtaConfig | None) -> np.ndarray:
    """The logits of every sample; with TTA (cfg) the mean of the views' softmax probabilities instead."""
    full = tuple(data.shape.dims)
    be = task.backend
    be.launch(task._steps.epoch_begin)  # FP16 working weights (AMP) and folded BN scale/bias are current
    be.launch(task._steps.epoch_end)
    # the plan's input type, but BF16 (numpy has none) staged as float32: the backend's write rounds it as tr.core.bf16
    x = np.empty(full, np.float32 if data.dtype is DType.BF16 else data.dtype.np_dtype)
    out: np.ndarray | None = None
    for start in range(0, s.n, full[0]):
        m = min(full[0], s.n - start)
        x[m:] = 0  # padding rows
        s.fill(x, start, m)
        y = None
        for v in [x] if cfg is None else tta.views(cfg, x[:m]):
            if cfg is None:
                be.write(data, x)
            else:
                tta.write_view(be, data, v)
            be.launch(graph)
            be.synchronize()
            z = be.read(logits).reshape(full[0], -1)[:m]
            if logits.dtype is DType.BF16:  # (read as its bit patterns)
                z = bf16_values(np.ascontiguousarray(z))
            y = z if cfg is None else tta.softmax(z) + (0.0 if y is None else y)
        assert y is not None
        if out is None:
            out = np.empty((s.n, y.shape[1]), np.float32 if cfg is None else np.float64)
        out[start:start + m] = y if cfg is None else y / cfg.views
    assert out is not None  # (n >= 1: checked with the input)
    return out


def tta_output(p: np.ndarray, output: str) -> np.ndarray:
    """What predict() gives for the views' mean probabilities ``p`` (float64): p, log p or argmax p."""
    if output == "argmax":
        return p.argmax(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (p if output == "probs" else np.log(p)).astype(np.float32)


def _output(out: np.ndarray, output: str, kind: str) -> np.ndarray:
    if output == "argmax":
        return out.argmax(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):  # (non-finite rows: flagged by the caller)
        if output == "probs" and kind == "bce_logits":
            return (0.5 * (1.0 + np.tanh(0.5 * out))).astype(np.float32)
        if output == "probs":
            e = np.exp(out - out.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out
