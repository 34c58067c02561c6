"""Test-time augmentation (``task.tta()``): validation and predict() see each sample under several views and
average the views' softmax probabilities.

The views, in this order: the image; with ``shift_px = s > 0`` the image translated by s pixels right, left, down
and up, the s columns (rows) it uncovers filled by repeating the nearest edge column (row) of the image; with
``flip`` the horizontal mirror of each of these. So flip alone gives 2 views, shift alone 5, both 10. The seed
declares ``TTA {DISABLED, LR, SHIFT_1PX}`` without implementing it; its names are accepted: ``"lr"`` is
flip=True, ``"shift_1px"`` shift_px=1, ``"disabled"`` off.

The probabilities are averaged (timm's choice, not torchvision's mean of logits): p = mean over views of
softmax(logits). Validation's loss is the label-smoothed cross entropy of p (the loss's smoothing), its top-1/top-5
rank p with the validation step's tie rule; predict() gives p ("probs"), log p ("logits": the log-probabilities,
whose softmax is p) and argmax p ("argmax"). Only a softmax cross-entropy plan has these probabilities (checked
at compile).

How it runs: the op vocabulary has no flip or shift of the input, so the views are made on the host. Each
validation batch goes through the captured transfer and the validation step's forward (the first view, on the
step's own batch variant), then the step's input and labels are read back and every other view is written to the
inference graph's input and run through it (predict()'s graph). The per-batch sums go into the plan's metric
accumulator before the step val_end, which averages them over the ranks as it does without TTA. Training is not
touched: TTA only adds host work around the validation forward.
"""

from __future__ import annotations

import numbers
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from tr.core.bf16 import bf16_values
from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.metrics import top1_top5
from tr.graph.steps import Part

ALIASES = {"disabled": (False, 0), "lr": (True, 0), "shift_1px": (False, 1)}  # the seed's TTA enum
MAX_SHIFT = 8  # a view shifted by more is another image, not the same one seen again


@dataclass(frozen=True)
class TtaConfig:
    flip: bool
    shift_px: int

    @property
    def views(self) -> int:
        return (1 + 4 * (self.shift_px > 0)) * (2 if self.flip else 1)

    def __repr__(self) -> str:
        return f"tta(flip={self.flip}, shift_px={self.shift_px})"


def parse(flip: Any, shift_px: Any) -> TtaConfig | None:
    """The setter's arguments checked (ConfigError naming the value); None: TTA off."""
    if isinstance(flip, str):
        if flip.lower() not in ALIASES:
            raise ConfigError(f"tta({flip!r}): expected flip=True/False or one of the seed's names {tuple(ALIASES)}")
        if shift_px != 0:
            raise ConfigError(f"tta({flip!r}, shift_px={shift_px!r}): the seed's name already says the views; "
                              "give flip= and shift_px= instead")
        flip, shift_px = ALIASES[flip.lower()]
    if not isinstance(flip, (bool, np.bool_)):
        raise ConfigError(f"tta(flip={flip!r}): expected True or False")
    if isinstance(shift_px, bool) or not isinstance(shift_px, numbers.Integral) or not 0 <= shift_px <= MAX_SHIFT:
        raise ConfigError(f"tta(shift_px={shift_px!r}): expected an integer number of pixels in [0, {MAX_SHIFT}]")
    return TtaConfig(bool(flip), int(shift_px)) if flip or shift_px else None


def check(cfg: TtaConfig | None, loss_kind: str, input_shape: tuple[int, int, int]) -> None:
    """At compile: TTA averages softmax probabilities, and a shift must leave some of the image."""
    if cfg is None:
        return
    if loss_kind != "softmax_ce":
        raise ConfigError(f"{cfg!r} averages the views' softmax probabilities; the loss {loss_kind!r} has none "
                          "(use CrossEntropyLoss, or no TTA)")
    h, w, _ = input_shape
    if cfg.shift_px >= min(h, w):
        raise ConfigError(f"{cfg!r}: a shift of {cfg.shift_px} pixels leaves nothing of a {h}x{w} image")


def views(cfg: TtaConfig, x: np.ndarray):
    """The views of the NHWC batch ``x``, in the module docstring's order (the first is ``x`` itself)."""
    s = cfg.shift_px
    base = [x]
    if s:
        for axis, sign in ((2, 1), (2, -1), (1, 1), (1, -1)):
            base.append(_shift(x, axis, sign * s))
    for v in base:
        yield v
    if cfg.flip:
        for v in base:
            yield v[:, :, ::-1, :]


def _shift(x: np.ndarray, axis: int, by: int) -> np.ndarray:
    """``x`` translated by ``by`` pixels along ``axis`` (positive: towards higher indices), edge-replicated."""
    n = x.shape[axis]
    src = np.clip(np.arange(n) - by, 0, n - 1)
    return np.take(x, src, axis=axis)


def softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


def metric_sums(p: np.ndarray, labels: np.ndarray, smoothing: float) -> tuple[float, float, float]:
    """(loss, top-1, top-5) summed over the rows of the averaged probabilities ``p`` [n, K]."""
    n, k = p.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(p)
        loss = -(1.0 - smoothing) * logp[np.arange(n), labels]
        if smoothing:
            loss -= (smoothing / k) * logp.sum(axis=1)
    top1, top5 = top1_top5(p, labels, np.arange(n), np.arange(k)[None])
    return float(loss.sum()), top1 * n, top5 * n


def _read(be, t, n: int, flat: bool = False) -> np.ndarray:
    """The first n rows of tensor ``t`` as values (BF16 read back as its bit patterns); ``flat``: as [n, -1]."""
    full = tuple(t.shape.dims)
    y = be.read(t).reshape((full[0], -1) if flat else full)[:n]
    return bf16_values(np.ascontiguousarray(y)) if t.dtype is DType.BF16 else np.array(y)


def write_view(be, t, v: np.ndarray) -> None:
    """Write the view ``v`` (n <= batch rows) into the plan tensor ``t``, the rest zeros (padding rows)."""
    x = np.zeros(tuple(t.shape.dims), np.float32 if t.dtype is DType.BF16 else t.dtype.np_dtype)
    x[:len(v)] = v
    be.write(t, x)


_preps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # task -> {(ema, last, ab): (graph, x, labels, z)}


def _prep(task, ema: bool, last: bool, ab: str):
    """The forward of validation step val[_ema][_last]_{ab} without its metric accumulation, with the tensors it
    reads (input, labels) and writes (logits)."""
    cache = _preps.setdefault(task, {})
    key = (ema, last, ab)
    if key not in cache:
        name = f"val{'_ema' if ema else ''}{'_last' if last else ''}_{ab}"
        part = Part(f"infer{'_ema' if ema else ''}_{ab}")
        calls = task.program.step(name).calls_of(part.value)
        x = "aug_x" if any(c.op == "augment_affine" for c in calls) else f"data_{ab}"
        data = next(a for c in calls for a in c.args.values() if getattr(a, "name", None) == x)
        loss = next(c for c in calls if c.op == "softmax_ce_inf")
        cache[key] = (task.backend.capture(f"tta_{name}", list(calls)), data, loss.args["labels"],
                      loss.args["logits"])
    return cache[key]


def validate(task, cfg: TtaConfig, epoch: int, ema: bool, bar) -> None:
    """Adds the views' metric sums of every validation batch to the plan's accumulator (the caller launched
    clear_metrics before and launches val_end after)."""
    from contextlib import closing

    from tr.task.predict import inference_graph

    feeder, be, st, launch = task._feeder, task.backend, task._steps, task._launch
    graph, gx, gz, _ = inference_graph(task, ema)
    smoothing = float(task.config.task.loss.smoothing)
    steps = feeder.steps(False)
    sums = np.zeros(3, np.float64)
    with closing(feeder.epoch(epoch, False)) as batches:
        for k, buf, n in batches:
            prep, x_t, y_t, z_t = _prep(task, ema, k == steps - 1, "ab"[buf])
            launch(st.val_transfer[buf], prep, buf)
            feeder.release(k)
            launch.synchronize()
            x, labels = _read(be, x_t, n), _read(be, y_t, n, True)[:, 0].astype(np.int64)
            p = softmax(_read(be, z_t, n, True))
            for v in list(views(cfg, x))[1:]:
                write_view(be, gx, v)
                be.launch(graph)
                be.synchronize()
                p += softmax(_read(be, gz, n, True))
            sums += metric_sums(p / cfg.views, labels, smoothing)
            bar.update(k + 1)
    acc_t = task.program.tensor("accum")
    acc = be.read(acc_t).reshape(-1).astype(np.float64)
    acc[:3] += sums
    be.write(acc_t, acc.astype(acc_t.dtype.np_dtype).reshape(tuple(acc_t.shape.dims)))
