"""Trained models out of tr and into it: PyTorch state_dicts <-> a compiled task's arena.

The mapping is by order with shape checks: the torch side is a *template* (an ``nn.Module`` or its
``state_dict()``: torchvision's ``vgg16_bn``/``resnet50``/``VisionTransformer`` (``vit_b_16``), an
``nn.Sequential`` of Linear/ReLU), whose keys are grouped into modules (``<prefix>.weight`` ...) in registration
order; tr's side is its weight-bearing layers in layer order (a cbr is its conv, then its BN). Two rules reorder
torch's side: a block's ``downsample`` (torchvision ResNets register it last) comes first, as tr's residual
blocks hold the projection first; a ViT's ``class_token`` and ``pos_embedding`` (3-d) are one module, tr's
tokens layer, put at its place in tr's order (torchvision registers the class token first, before ``conv_proj``).

Conversions: conv KRSC -> OIHW; BN (1,1,1,C) -> (C,) with running_mean/var from role RUNNING; fc [out,1,1,in]
-> [out,in] with the columns of an NHWC-flattened (H,W,C) input put in NCHW flatten order. ViT: a 1x1 conv on
tr's tokens [N,1,T,C] is a per-token Linear, [out,1,1,in] <-> a Linear's [out,in] or a MultiheadAttention's
packed q,k,v ``in_proj_weight``/``in_proj_bias`` (its ``out_proj`` is a Linear); LayerNorm (1,1,1,C) <-> (C,);
class token (1,1,1,C) <-> (1,1,C), position embedding (1,1,T,C) <-> (1,T,C), T counting the class token.
Where torch's Linear reads C*s*s features after an AdaptiveAvgPool2d((s, s)) (torchvision's VGG below 224x224; tr's
flatten reads the small map itself), the pool's linear map is folded in, exactly both ways while H, W <= s
(a template nn.Module must have that pool; a bare state_dict cannot say, and is read as pooled).
A conv declared with ``bias=True`` maps its bias both ways. tr's other convs have none: their exported biases
are zeros, and an imported conv bias is folded into the following BN's running mean (exact: bn(x + b) with
mean m is bn(x) with mean m - b, and in training the batch mean absorbs b). num_batches_tracked is exported as
the applied training steps (step - skipped) and ignored on import (tr keeps no per-BN counter).

Beyond shapes: given an ``nn.Module``, its layers are compared with tr's, in the order its forward runs them
(tr.task.torch_layers: module types, activation kinds included, and the conv, pool, BN, LayerNorm and attention
hyper-parameters; a ViT's depth, its count of MultiheadAttention modules, before the shapes); the first difference
is a ConfigError naming the torch module, tr's layer and both values. A bare state_dict has
no layers: only its names and shapes are checked. Non-finite values are refused both ways (DataError naming the
tensor): a NaN/Inf or a negative BN running variance in the torch tensors on import, a NaN/Inf in tr's tensors on
export. A value that is not a tensor (or ndarray) of real numbers is a DTypeError naming it; bfloat16 loads
through float32. Every check runs before the first byte is written.

torch is optional (``pip install 'tr-task[torch]'``): imported only when a function here needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.core.memory import Region, Role
from tr.graph.layers.groups import BN_B, BN_W, DEEP_CONV, FC_B, FC_W, FIRST_CONV, MEAN, VAR
from tr.graph.layers.layernorm import LN_B, LN_W
from tr.graph.layers.tokens import TOKENS
from tr.task.base import require_compiled
from tr.tensor.dtensor import DTensor

_CONV_REGIONS = (Region(Role.PARAM, FIRST_CONV), Region(Role.PARAM, DEEP_CONV))
_FC_WEIGHT, _BIAS = Region(Role.PARAM, FC_W), Region(Role.PARAM, FC_B)
_BN_ROLES = {Region(Role.PARAM, BN_W): "weight", Region(Role.PARAM, BN_B): "bias",
             Region(Role.RUNNING, MEAN): "running_mean", Region(Role.RUNNING, VAR): "running_var",
             Region(Role.RUNNING_NEXT, MEAN): "next_mean", Region(Role.RUNNING_NEXT, VAR): "next_var"}
_LN_ROLES = {Region(Role.PARAM, LN_W): "weight", Region(Role.PARAM, LN_B): "bias"}
_TOKENS = Region(Role.PARAM, TOKENS)
_TOKEN_NAMES = {"cls": "class_token", "pos": "pos_embedding"}  # tr's tensor -> torchvision's parameter name
_MHA = {"in_proj_weight": "weight", "in_proj_bias": "bias"}  # nn.MultiheadAttention's packed projection


def require_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("tr.task.torch_io needs PyTorch: pip install 'tr-task[torch]' (or torch)") from e
    return torch


@dataclass
class _TrModule:
    kind: str  # "conv" | "bn" | "fc" | "layernorm" | "tokens"
    layer: int
    tensors: dict[str, DTensor] = field(default_factory=dict)
    fc_input: tuple[int, int, int] | None = None  # (H, W, C) an fc reads, NHWC-flattened

    def name(self) -> str:
        return f"layer L{self.layer} ({self.kind})"


@dataclass
class _TorchModule:
    prefix: str  # the tokens': their keys, joined by ", "
    kind: str  # "conv" | "bn" | "fc" | "layernorm" | "tokens"
    shapes: dict[str, tuple[int, ...]]  # by tr's suffix (weight, bias, ..., class_token, pos_embedding)
    pool: int | None = None  # s: an AdaptiveAvgPool2d((s, s)) sits between tr's feature map and this Linear
    keys: dict[str, str] = field(default_factory=dict)  # suffix -> state_dict key, where not prefix.suffix

    def key(self, suffix: str) -> str:
        return self.keys.get(suffix) or _join(self.prefix, suffix)


def _join(prefix: str, suffix: str) -> str:
    return f"{prefix}.{suffix}" if prefix else suffix


def _fc_inputs(program) -> dict[int, tuple[int, int, int]]:
    """The (H, W, C) each fc layer reads, from its fc_fwd calls (by layer: under AMP they read the FP16
    working copy, not the master weight the InitSpec names)."""
    out: dict[int, tuple[int, int, int]] = {}
    for step in program.steps.values():
        for c in step.calls:
            if c.op == "fc_fwd":
                out.setdefault(c.layer, tuple(c.args["x"].shape.dims[1:]))
    return out


def tr_modules(program) -> list[_TrModule]:
    """tr's weight-bearing modules in layer order, each with its DTensors by torch's parameter suffix."""
    fc_in = _fc_inputs(program)
    mods: dict[tuple[int, int], _TrModule] = {}
    biases: dict[int, DTensor] = {}  # group FC_B holds every bias: an fc's or a conv's, by its layer
    for i in program.inits:
        t, region = i.tensor, i.tensor.region
        if region in _BN_ROLES:
            mods.setdefault((i.layer, 1), _TrModule("bn", i.layer)).tensors[_BN_ROLES[region]] = t
        elif region in _CONV_REGIONS and i.kind == "weight":
            mods.setdefault((i.layer, 0), _TrModule("conv", i.layer)).tensors["weight"] = t
        elif region == _FC_WEIGHT:
            m = mods.setdefault((i.layer, 0), _TrModule("fc", i.layer))
            m.tensors["weight"] = t
            m.fc_input = fc_in.get(i.layer, (1, 1, t.shape.dims[3]))
        elif region == _BIAS:
            biases[i.layer] = t
        elif region in _LN_ROLES:
            mods.setdefault((i.layer, 0), _TrModule("layernorm", i.layer)).tensors[_LN_ROLES[region]] = t
        elif region == _TOKENS and t.name.rpartition(".")[2] in _TOKEN_NAMES:
            mods.setdefault((i.layer, 0), _TrModule("tokens", i.layer)).tensors[
                _TOKEN_NAMES[t.name.rpartition(".")[2]]] = t
        elif region.role is Role.PARAM:  # a trained tensor torch would not receive: refuse, never drop it
            raise ConfigError(f"layer {i.layer}: parameter {t.name} (region {region.name}) has no torch counterpart "
                              "here: tr.task.torch_io maps the parameters of fc, conv, batch-norm, layer-norm and "
                              "tokens layers only")
    for layer, t in biases.items():
        mods[(layer, 0)].tensors["bias"] = t
    return [mods[k] for k in sorted(mods)]


def _shape(key: str, v: Any) -> tuple[int, ...]:
    """The shape of state_dict value ``v``: a tensor or an ndarray of real numbers (DTypeError otherwise)."""
    if hasattr(v, "detach") and hasattr(v, "is_complex"):  # a torch tensor
        if v.is_complex() or str(v.dtype) == "torch.bool":
            raise DTypeError(f"torch parameter {key!r} is a {v.dtype} tensor; expected real numbers")
        return tuple(int(d) for d in v.shape)
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in "fiu":
            raise DTypeError(f"torch parameter {key!r} is a {v.dtype} array; expected real numbers")
        return v.shape
    raise DTypeError(f"torch parameter {key!r} is a {type(v).__name__}, not a tensor")


def _numpy(v: Any) -> np.ndarray:
    """State_dict value ``v`` as an ndarray (bfloat16, which numpy lacks, through float32); ``v`` is one that
    torch_modules() took (a tensor or an ndarray of real numbers: :func:`_shape` refused any other)."""
    if hasattr(v, "detach"):
        v = v.detach().cpu()
        v = v.float() if v.is_floating_point() and str(v.dtype) == "torch.bfloat16" else v
        return v.numpy()
    return v


def torch_modules(state: Mapping[str, Any], tokens_at: int | None = None) -> list[_TorchModule]:
    """The template's modules in tr's order (see the module docstring), with each key's shape. ``tokens_at``: the
    place of tr's tokens layer among its modules, given to the class token and position embedding (None: tr has
    none, and they go where the later of them is registered)."""
    groups: dict[str, dict[str, tuple[int, ...]]] = {}  # (in registration order: a group's first key's)
    tokens: dict[str, tuple[str, tuple[int, ...]]] = {}  # class_token / pos_embedding -> (key, shape)
    registered = 0  # the groups registered before the later of them
    for key, v in state.items():
        prefix, _, suffix = key.rpartition(".")
        shape = _shape(key, v)
        if suffix in _TOKEN_NAMES.values() and len(shape) == 3:
            if suffix in tokens:
                raise ConfigError(f"torch parameters {tokens[suffix][0]!r} and {key!r} are both a {suffix}: tr's "
                                  "model has one tokens layer")
            tokens[suffix], registered = (key, shape), len(groups)
            continue
        groups.setdefault(prefix, {})[suffix] = shape
    mods: list[_TorchModule] = []
    for prefix, shapes in groups.items():
        keys: dict[str, str] = {}
        if _MHA.keys() & shapes.keys() or "q_proj_weight" in shapes:  # a MultiheadAttention: its in_proj
            odd = sorted(set(shapes) - _MHA.keys())
            if odd:
                raise ConfigError(f"torch parameters {[_join(prefix, s) for s in odd]} of a MultiheadAttention have "
                                  "no counterpart in tr, whose attention reads one packed q, k, v projection "
                                  "(in_proj_weight, in_proj_bias: kdim = vdim = embed_dim, no add_bias_kv)")
            keys = {_MHA[s]: _join(prefix, s) for s in shapes}
            shapes = {_MHA[s]: v for s, v in shapes.items()}
        if "running_mean" in shapes:
            kind = "bn"
        elif len(shapes.get("weight", ())) == 4:
            kind = "conv"
        elif len(shapes.get("weight", ())) == 2:
            kind = "fc"
        elif len(shapes.get("weight", ())) == 1:
            kind = "layernorm"  # (a BatchNorm2d without running statistics too: the pairing tells them apart)
        else:
            raise ConfigError(f"torch parameter {prefix!r} ({sorted(shapes)}) is neither a Conv2d, a BatchNorm2d, "
                              "a Linear nor a LayerNorm: tr cannot map it")
        mods.append(_TorchModule(prefix, kind, shapes, keys=keys))

    def order(i: int) -> tuple[int, int, int]:
        block, ds, _ = mods[i].prefix.partition(".downsample.")
        if not ds:
            return (i, 1, i)
        return (next(j for j, m in enumerate(mods) if m.prefix.startswith(block + ".")), 0, i)

    out = [mods[i] for i in sorted(range(len(mods)), key=order)]
    if tokens:
        names = [s for s in _TOKEN_NAMES.values() if s in tokens]
        out.insert(registered if tokens_at is None else min(tokens_at, len(out)),
                   _TorchModule(", ".join(tokens[s][0] for s in names), "tokens", {s: tokens[s][1] for s in names},
                                keys={s: tokens[s][0] for s in names}))
    return out


def _torch_shapes(m: _TrModule, program_shapes: dict[str, tuple[int, ...]], torch_kind: str
                  ) -> dict[str, tuple[int, ...]]:
    """The shapes a torch module of ``torch_kind`` must have to hold tr module m."""
    if m.kind == "conv":
        o, k1, k2, i = program_shapes["weight"]
        w = (o, i) if torch_kind == "fc" and k1 == k2 == 1 else (o, i, k1, k2)  # a 1x1 conv is a per-token Linear
        return {"weight": w, **({"bias": (o,)} if "bias" in program_shapes else {})}
    if m.kind == "layernorm":
        c = program_shapes["weight"][3]
        return {"weight": (c,), "bias": (c,)}
    if m.kind == "tokens":
        return {s: (1, d[2], d[3]) for s, d in program_shapes.items()}
    if m.kind == "fc":
        o, i = program_shapes["weight"][0], program_shapes["weight"][3]
        out = {"weight": (o, i)}
        if "bias" in program_shapes:
            out["bias"] = (o,)
        return out
    c = program_shapes["weight"][3]
    return {"weight": (c,), "bias": (c,), "running_mean": (c,), "running_var": (c,)}


def pair(program, state: Mapping[str, Any], pools: set[int] | None = None) -> list[tuple[_TrModule, _TorchModule]]:
    """tr's modules zipped with the template's; raises naming the first torch parameter that differs.
    ``pools``: the AdaptiveAvgPool2d sizes of the torch model (None for a bare state_dict: not checked)."""
    trs = tr_modules(program)
    tms = torch_modules(state, next((k for k, m in enumerate(trs) if m.kind == "tokens"), None))
    for k, (a, b) in enumerate(zip(trs, tms)):
        want = _torch_shapes(a, {s: t.shape.dims for s, t in a.tensors.items()}, b.kind)
        if a.kind != b.kind and not (a.kind == "conv" and b.kind == "fc" and len(want["weight"]) == 2):
            raise ShapeError(f"torch module {b.prefix!r} is a {b.kind}, but module {k} of tr is a {a.kind} "
                             f"({a.name()}): the state_dict is of another architecture")
        if a.kind == "fc":
            b.pool = _adaptive_pool(a.fc_input, want["weight"], b.shapes.get("weight"))
            if pools is not None and b.pool not in pools:
                b.pool = None  # the model has no such pool: its Linear really reads other features
            if b.pool is not None:
                want["weight"] = b.shapes["weight"]
        for suffix, shape in want.items():
            got = b.shapes.get(suffix)
            if got is None:
                raise ShapeError(f"torch parameter {b.key(suffix)!r} is missing: tr's {a.name()} needs it "
                                 f"with shape {shape}")
            if got != shape:
                raise ShapeError(f"torch parameter {b.key(suffix)!r} has shape {got}, tr's {a.name()} "
                                 f"needs {shape}: the state_dict is of another architecture or size")
        folded = b.shapes.get("bias") if a.kind == "conv" and "bias" not in want else None
        if folded is not None and folded != want["weight"][:1]:  # a bias tr folds into the next BN: one per channel
            raise ShapeError(f"torch parameter {b.key('bias')!r} has shape {folded}, tr's {a.name()} folds a conv "
                             f"bias of shape {want['weight'][:1]} into the batch norm after it")
        extra = set(b.shapes) - set(want) - {"num_batches_tracked"} - ({"bias"} if a.kind == "conv" else set())
        if a.kind == "fc" and "bias" not in want and "bias" in b.shapes:
            extra.add("bias")
        if extra:
            raise ShapeError(f"torch parameters {sorted(b.key(s) for s in extra)} have no counterpart "
                             f"in tr's {a.name()}")
    if len(trs) != len(tms):
        k = min(len(trs), len(tms))
        what = (f"torch module {tms[k].prefix!r} has no tr counterpart" if len(tms) > k
                else f"tr's {trs[k].name()} has no torch counterpart")
        raise ShapeError(f"tr has {len(trs)} weight-bearing modules, the torch template {len(tms)}: {what}")
    return list(zip(trs, tms))


def _adaptive_pool(hwc: tuple[int, int, int], want: tuple[int, ...], got: tuple[int, ...] | None) -> int | None:
    """s when torch's Linear reads C*s*s features where tr's fc reads H*W*C: torchvision's VGG pools any
    feature map to 7x7 (AdaptiveAvgPool2d) before its classifier, tr's flatten reads the map itself."""
    h, w, c = hwc
    if got is None or len(got) != 2 or got == want or got[0] != want[0] or got[1] % c:
        return None
    s = round((got[1] // c) ** 0.5)
    return s if s * s * c == got[1] and h <= s and w <= s else None


def _pool_matrix(h: int, w: int, s: int) -> np.ndarray:
    """AdaptiveAvgPool2d((s, s)) of an h x w map as a [s*s, h*w] matrix (torch's bins: floor/ceil bounds)."""
    def bins(n: int) -> np.ndarray:
        m = np.zeros((s, n))
        for i in range(s):
            lo, hi = (i * n) // s, -(-(i + 1) * n // s)
            m[i, lo:hi] = 1.0 / (hi - lo)
        return m
    return np.kron(bins(h), bins(w))


def _fc_to_torch(w: np.ndarray, hwc: tuple[int, int, int], pool: int | None) -> np.ndarray:
    o, (h, wd, c) = w.shape[0], hwc
    w = w.reshape(o, h, wd, c).transpose(0, 3, 1, 2).reshape(o, c, h * wd)
    if pool is not None:  # W' with W' P = W (P has full column rank: h, w <= s), so Linear(pool(x)) = fc(x)
        w = (w.astype(np.float64) @ np.linalg.pinv(_pool_matrix(h, wd, pool))).astype(np.float32)
    return w.reshape(o, -1)


def _fc_from_torch(w: np.ndarray, hwc: tuple[int, int, int], pool: int | None) -> np.ndarray:
    o, (h, wd, c) = w.shape[0], hwc
    if pool is not None:  # Linear(pool(x)) = (W' P) x, exactly
        w = (w.reshape(o, c, pool * pool).astype(np.float64) @ _pool_matrix(h, wd, pool)).astype(np.float32)
    return w.reshape(o, c, h, wd).transpose(0, 2, 3, 1).reshape(o, 1, 1, -1)


def _template(target: Any) -> Mapping[str, Any]:
    return target.state_dict() if hasattr(target, "state_dict") else target


def _is_module(x: Any) -> bool:
    """An nn.Module (whose layers can be compared), not a bare state_dict."""
    return hasattr(x, "state_dict") and hasattr(x, "named_modules")


def _paired(task, target: Any, state: Mapping[str, Any]) -> list[tuple[_TrModule, _TorchModule]]:
    """pair()'s weight pairing, then, for an nn.Module, the layer comparison (tr.task.torch_layers)."""
    if _is_module(target):
        from tr.task.torch_layers import check_depth, check_layers

        check_depth(task, target)  # (a ViT of another depth would fail the shapes far from the cause)
        pairs = pair(task.program, state, _pools(target))
        check_layers(task, target, pairs)
        return pairs
    return pair(task.program, state, _pools(target))


def _check_finite(v: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(v)
    if bad.any():
        i = tuple(int(k) for k in np.unravel_index(int(np.argmax(bad)), v.shape))
        raise DataError(f"{what} holds {int(bad.sum())} non-finite value(s) (the first, {v[i]}, at index {i}): "
                        "refused, a NaN or Inf weight or statistic makes every prediction NaN")


def _pools(target: Any) -> set[int] | None:
    """The square output sizes of the model's AdaptiveAvgPool2d modules; None for a state_dict."""
    if not hasattr(target, "modules"):
        return None
    out: set[int] = set()
    for m in target.modules():
        if type(m).__name__ == "AdaptiveAvgPool2d":
            size = m.output_size if isinstance(m.output_size, tuple) else (m.output_size, m.output_size)
            if size[0] == size[1] and size[0] is not None:
                out.add(int(size[0]))
    return out


def to_torch_state_dict(task, target: Any) -> dict[str, Any]:
    """A state_dict for ``target`` (an nn.Module or a state_dict giving names, order and shapes) holding the
    task's trained weights and BN running statistics; ``target.load_state_dict(result)`` then loads it."""
    require_compiled(task, "to_torch_state_dict()")
    torch = require_torch()
    state = _template(target)
    be, prog = task.backend, task.program
    steps = 0
    if "step" in prog.named:
        steps = int(be.read(prog.named["step"]).reshape(-1)[0])
        if "skipped" in prog.named:
            steps -= int(be.read(prog.named["skipped"]).reshape(-1)[0])
    staged: list[tuple[str, np.ndarray]] = []
    for a, b in _paired(task, target, state):
        arrays = {s: be.read(t).astype(np.float32) for s, t in a.tensors.items()}
        if a.kind == "conv":  # (to a Linear's [out, in] when torch's is one: pair() checked the shape)
            vals = {"weight": arrays["weight"].transpose(0, 3, 1, 2).reshape(b.shapes["weight"])}
            if "bias" in arrays:
                vals["bias"] = arrays["bias"].reshape(-1)
            elif "bias" in b.shapes:  # this conv has none (a BN follows): zeros keep torch's model the same
                vals["bias"] = np.zeros(b.shapes["bias"], np.float32)
        elif a.kind == "fc":
            vals = {"weight": _fc_to_torch(arrays["weight"], a.fc_input, b.pool)}
            if "bias" in arrays:
                vals["bias"] = arrays["bias"].reshape(-1)
        elif a.kind in ("layernorm", "tokens"):
            vals = {s: v.reshape(b.shapes[s]) for s, v in arrays.items()}
        else:
            vals = {s: arrays[s].reshape(-1) for s in ("weight", "bias", "running_mean", "running_var")}
        for s, v in vals.items():
            source = f"tr's {a.name()} tensor {a.tensors[s].name!r}" if s in a.tensors else "a zero bias"
            _check_finite(v, f"{source} (for torch's {b.key(s)!r})")
            staged.append((b.key(s), np.ascontiguousarray(v, dtype=np.float32)))
        if "num_batches_tracked" in b.shapes:
            staged.append((b.key("num_batches_tracked"), np.array(steps, np.int64)))
    return {k: torch.from_numpy(v) for k, v in staged}


def save_torch(task, target: Any, path: str) -> None:
    """Write to_torch_state_dict(task, target) with torch.save (loads with torch.load + load_state_dict)."""
    require_torch().save(to_torch_state_dict(task, target), path)


def load_torch(task, source: Any) -> None:
    """Load a torch model's weights (an nn.Module or its state_dict) into the compiled task: parameters and
    BN running statistics (see the module docstring for the conversions). Every shape is checked before the
    first byte is written: a state_dict of another architecture raises and leaves the task unchanged."""
    require_compiled(task, "load_torch()")
    state = _template(source)
    pairs = _paired(task, source, state)
    writes: list[tuple[DTensor, np.ndarray]] = []
    pending_bias: np.ndarray | None = None  # a conv's bias, folded into the BN after it
    for k, (a, b) in enumerate(pairs):
        with np.errstate(over="ignore"):  # a float64 value past float32's range is an Inf: refused just below
            get = {s: _numpy(state[b.key(s)]).astype(np.float32) for s in b.shapes if s != "num_batches_tracked"}
        for s, v in get.items():
            _check_finite(v, f"torch tensor {b.key(s)!r}")
        if "running_var" in get and (get["running_var"] < 0).any():
            raise DataError(f"torch tensor {b.key('running_var')!r} holds a negative variance "
                            f"({float(get['running_var'].min()):g}): refused, the BN would compute NaN")
        if a.kind == "conv":
            w = get["weight"]
            w = w.reshape(*w.shape, 1, 1) if w.ndim == 2 else w  # a Linear's [out, in]: a 1x1 conv's
            writes.append((a.tensors["weight"], w.transpose(0, 2, 3, 1)))
            if "bias" in a.tensors:  # (pair() checked torch has it)
                writes.append((a.tensors["bias"], get["bias"]))
                continue
            pending_bias = get.get("bias")
            if pending_bias is not None and np.any(pending_bias) and (
                    k + 1 == len(pairs) or pairs[k + 1][0].kind != "bn"):
                raise ConfigError(f"torch parameter {b.key('bias')!r} is non-zero and no batch norm follows the "
                                  "conv in tr to absorb it (this conv of tr's has no bias)")
            continue
        if a.kind == "fc":
            writes.append((a.tensors["weight"], _fc_from_torch(get["weight"], a.fc_input, b.pool)))
            if "bias" in a.tensors:
                writes.append((a.tensors["bias"], get["bias"]))
        elif a.kind in ("layernorm", "tokens"):
            writes.extend((t, get[s]) for s, t in a.tensors.items())
        else:
            mean = get["running_mean"] - (pending_bias if pending_bias is not None else 0.0)
            vals = {"weight": get["weight"], "bias": get["bias"], "running_mean": mean,
                    "running_var": get["running_var"], "next_mean": mean, "next_var": get["running_var"]}
            writes.extend((t, vals[s]) for s, t in a.tensors.items())
        pending_bias = None
    be = task.backend
    for t, v in writes:
        be.write(t, np.ascontiguousarray(v.reshape(t.shape.dims)).astype(t.dtype.np_dtype))
    refresh_derived(task)


def refresh_derived(task) -> None:
    """Recompute what the plan derives from the master weights: FP16 working copies (AMP) and the
    inference scale/bias folded from the BN statistics."""
    st = task._steps
    task.backend.launch(st.epoch_begin)
    task.backend.launch(st.epoch_end)
    task.backend.synchronize()
