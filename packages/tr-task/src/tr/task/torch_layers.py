"""What shapes cannot show: a torch model's layers compared with a compiled task's, for tr.task.torch_io.

torch_io matches weights by shape, so a torch model with a Sigmoid where tr has a ReLU, a conv of another stride
or padding, a pool of another window or a BN of another eps would load and then compute something else. Given
an ``nn.Module`` (a bare state_dict has no layers: only its shapes are checked), ``check_layers`` compares, in
order, every layer that computes: convolutions (padding mode, kernel, stride, dilation, padding, groups), batch
norms (affine, running statistics, eps, momentum), Linears, activations (kind, LeakyReLU's slope, ELU's alpha,
GELU's approximation; an extra or a missing one), max pools (window, stride, padding, dilation, ceil_mode),
average pools (also count_include_pad, divisor_override) and global average pooling; and a ViT's parts: the class
token (prepended) and the position embedding, LayerNorms (normalized_shape, eps, affine, bias), attention (heads,
embed_dim, the tokens it attends over: a MultiheadAttention with batch_first=False given [N, T, D] attends over
the batch; its biases, bias_k/v, zero attention, masks) and class-token pooling (x[:, 0]). A tr 1x1 conv on
tokens is a per-token Linear (a MultiheadAttention's in_proj and out_proj are two). The first difference is a
ConfigError naming the torch module, tr's layer and both values. ``check_depth`` runs before torch_io's shapes,
which would meet a ViT of another depth far from the cause: it counts tr's attention layers and the torch model's
MultiheadAttention modules. Not compared: dropout (its p changes neither the weights nor inference), flattening,
identities, residual additions, channel padding, and bias presence (torch_io's shapes: a torch conv bias that tr's
conv lacks is folded into the BN after it).

How: the model runs once, in eval mode without gradients (its training flags restored after), on a zero batch
of the plan's input, [1, C, H, W] (a model of Linears on flat rows: [1, C*H*W]), under a TorchFunctionMode that
records the outermost call of each function computing a layer: F.conv2d, F.batch_norm, F.linear, activations as
functions or Tensor methods, pools, a mean over H and W; for a ViT F.layer_norm, F.multi_head_attention_forward
(nn.MultiheadAttention's, as the mode keeps it off the fused fast path), the cat of a parameter (the class
token, followed through its expand) and the add of a 3-d one (the position embedding), x[:, 0]. So nn.ReLU and
F.relu in a forward count alike, and a module that runs three times (torchvision ResNet's one ReLU per block)
counts three times, which registration order cannot show. Forward hooks name the module each call runs in; a
conv's, BN's, LayerNorm's or Linear's name is that of the module holding its weights (its state_dict prefix; the
tokens': their parameters' keys). tr's side is the BluePrint expanded and wired as the
compiler does, before fusion. As in torch_io, a block's ``downsample`` comes first (tr holds the shortcut
first); an AdaptiveAvgPool2d is the identity on a map of its output size, tr's gap at (1, 1), and before a
Linear the pool torch_io folds into it; an average pool over the whole map is a gap on either side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tr.core.errors import ConfigError
from tr.graph.blueprint import ACT_KINDS

_WEIGHTED = ("conv", "bn", "fc", "layernorm", "tokens")


@dataclass
class Op:
    """One computing layer: ``kind`` (conv, bn, fc, act, maxpool, avgpool, gap, adaptive_pool, other), the
    values compared (``attrs``, in the order they are reported) and how to name it."""

    kind: str
    where: str  # torch: the module path (tokens: the parameters' keys); tr: the layer's description and origin
    attrs: dict[str, Any] = field(default_factory=dict)
    what: str = ""  # torch: the module's class, or the function a forward called
    input_ndim: int = 0  # torch's Linear: its input's (a 1x1 conv is a Linear on tokens, not on an NCHW map)
    notes: dict[str, str] = field(default_factory=dict)  # attr -> what a mismatch of it may mean

    def show(self) -> str:
        if self.kind == "act":
            return str(self.attrs["kind"])
        if self.kind == "adaptive_pool":
            return f"an adaptive average pool to {self.attrs['output']}"
        if self.kind == "other":
            return str(self.attrs["function"])
        return {"conv": "a convolution", "bn": "a batch norm", "fc": "a Linear (fc)", "gap": "a global average pool",
                "maxpool": "a max pool", "avgpool": "an average pool", "layernorm": "a LayerNorm",
                "tokens": "a class token and position embedding", "attention": "multi-head attention",
                "class_token": "class-token pooling"}[self.kind]


# --- tr's side ------------------------------------------------------------------------------------------------

def _tr_act(kind: str) -> dict[str, Any]:
    extra = {"leaky_relu": {"negative_slope": 0.01}, "elu": {"alpha": 1.0}, "gelu": {"approximate": "none"}}
    return {"kind": kind, **extra.get(kind, {})}


def tr_ops(task: Any) -> list[Op]:
    """tr's computing layers in its order, from the BluePrint before fusion (cbr = conv, bn, relu)."""
    from tr.core.shape import Shape
    from tr.graph import passes

    spec = task.spec
    h, w, c = spec.input_shape
    layers = passes.unfused(task.config.task.model, c)
    shapes = passes.infer_shapes(layers, Shape(1, h, w, c))
    by_uid = {L.uid: L for L in layers}
    ops: list[Op] = []
    for L in layers:
        p, where = L.params, f"'{L.describe()}' at {L.origin}"
        if L.kind == "conv":
            ops.append(Op("conv", where, {"padding_mode": "zeros", "kernel": (p["k"],) * 2, "stride": (p["s"],) * 2,
                                          "dilation": (1, 1), "padding": (p["p"],) * 2, "groups": p["g"]}))
        elif L.kind in ("bn2d", "bn1d"):
            ops.append(Op("bn", where, {
                "affine": True, "track_running_stats": True,
                "eps": spec.bn_eps if spec.bn_eps is not None else p["eps"],
                "momentum": spec.bn_momentum if spec.bn_momentum is not None else p["momentum"]}))
        elif L.kind == "fc":
            ops.append(Op("fc", where))
        elif L.kind == "act":
            ops.append(Op("act", where, _tr_act(p["kind"])))
        elif L.kind == "maxpool":
            ops.append(Op("maxpool", where, {"kernel": (p["k"],) * 2, "stride": (p["s"],) * 2,
                                             "padding": (p["p"],) * 2, "dilation": (1, 1), "ceil_mode": False}))
        elif L.kind == "avgpool":
            x = shapes[L.inputs[0]]
            if p["p"] == 0 and p["k"] == x.h == x.w:
                ops.append(Op("gap", where))
            else:  # tr's average excludes the padding (count_include_pad=False)
                ops.append(Op("avgpool", where, {"kernel": (p["k"],) * 2, "stride": (p["s"],) * 2,
                                                 "padding": (p["p"],) * 2, "ceil_mode": False,
                                                 "count_include_pad": False, "divisor_override": None}))
        elif L.kind == "gap":
            ops.append(Op("gap", where))
        elif L.kind == "layernorm":
            ops.append(Op("layernorm", where, {"normalized_shape": (shapes[L.inputs[0]].c,), "eps": p["eps"],
                                               "elementwise_affine": True, "bias": True}))
        elif L.kind == "tokens":
            ops.append(Op("tokens", where, {"class_token": "prepended" if p["cls"] else None,
                                            "position_embedding": p["pos"]}))
        elif L.kind == "attention":
            proj = by_uid.get(L.inputs[0])  # the fused q, k, v projection: a 1x1 conv
            ops.append(Op("attention", where, {
                "num_heads": p["heads"], "embed_dim": p["dim"], "tokens": shapes[L.inputs[0]].w,
                "bias": bool(proj is not None and proj.kind == "conv" and proj.params.get("bias")),
                "add_bias_kv": False, "add_zero_attn": False, "mask": None, "self_attention": True}))
        elif L.kind == "class_token":
            ops.append(Op("class_token", where))
        # flatten, dropout, add, scale, channel_pad: nothing compared (see the module docstring)
    return ops


# --- torch's side ---------------------------------------------------------------------------------------------

_REQ = object()
_SIGS: dict[str, tuple[Any, ...]] = {  # torch's parameter names and defaults, to read a call's arguments
    "conv2d": ("input", "weight", ("bias", None), ("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1)),
    "batch_norm": ("input", "running_mean", "running_var", ("weight", None), ("bias", None), ("training", False),
                   ("momentum", 0.1), ("eps", 1e-5)),
    "linear": ("input", "weight", ("bias", None)),
    "max_pool2d": ("input", "kernel_size", ("stride", None), ("padding", 0), ("dilation", 1), ("ceil_mode", False)),
    "avg_pool2d": ("input", "kernel_size", ("stride", None), ("padding", 0), ("ceil_mode", False),
                   ("count_include_pad", True), ("divisor_override", None)),
    "adaptive_avg_pool2d": ("input", "output_size"),
    "adaptive_max_pool2d": ("input", "output_size"),
    "leaky_relu": ("input", ("negative_slope", 0.01)),
    "elu": ("input", ("alpha", 1.0)),
    "gelu": ("input", ("approximate", "none")),
    "hardtanh": ("input", ("min_val", -1.0), ("max_val", 1.0)),
    "clamp": ("input", ("min", None), ("max", None)),
    "mean": ("input", ("dim", None), ("keepdim", False)),
    "layer_norm": ("input", "normalized_shape", ("weight", None), ("bias", None), ("eps", 1e-5)),
    "multi_head_attention_forward": (
        "query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias", "bias_k",
        "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", ("training", True),
        ("key_padding_mask", None), ("need_weights", True), ("attn_mask", None), ("use_separate_proj_weight", False),
        ("q_proj_weight", None), ("k_proj_weight", None), ("v_proj_weight", None), ("static_k", None),
        ("static_v", None), ("average_attn_weights", True), ("is_causal", False)),
    "cat": ("tensors", ("dim", 0)),
    "add": ("input", "other"),
    "getitem": ("input", "index"),
}
_OTHER_ACTS = ("hardsigmoid", "selu", "celu", "mish", "softplus", "softsign", "softmax", "log_softmax", "logsigmoid",
               "prelu", "rrelu", "glu", "tanhshrink", "softshrink", "hardshrink", "threshold", "hardtanh")


def _functions(torch: Any) -> dict[Any, str]:
    """The functions whose outermost calls are layers, by object: F.x, torch.x, Tensor.x and their in-place forms."""
    F = torch.nn.functional
    table: dict[Any, str] = {}
    for name in (*ACT_KINDS, *_OTHER_ACTS, "conv2d", "batch_norm", "linear", "max_pool2d", "avg_pool2d",
                 "adaptive_avg_pool2d", "adaptive_max_pool2d", "mean", "clamp", "clamp_min"):
        # (torch.batch_norm takes its arguments in another order than F.batch_norm, which calls it)
        owners = (F,) if name == "batch_norm" else (F, torch, torch.Tensor, torch._C.TensorBase)
        for owner in owners:
            for attr in (name, name + "_"):
                fn = getattr(owner, attr, None)
                if fn is not None and callable(fn):
                    table[fn] = "clamp" if name == "clamp_min" else name
    table[F.max_pool2d_with_indices] = "max_pool2d"  # (max_pool2d(return_indices=True))
    for fn in (torch.layer_norm, F.layer_norm):
        table[fn] = "layer_norm"
    table[F.multi_head_attention_forward] = "multi_head_attention_forward"
    for fn in (torch.cat, torch.concat, torch.concatenate):
        table[fn] = "cat"
    for owner in (torch, torch.Tensor, torch._C.TensorBase):
        for attr in ("add", "add_", "__add__", "__radd__", "__iadd__"):
            fn = getattr(owner, attr, None)
            if fn is not None:
                table[fn] = "add"
    for owner in (torch.Tensor, torch._C.TensorBase):
        table[owner.__getitem__] = "getitem"
    return table


# what a class token goes through before its cat: the batch's copies (followed by tensor identity)
_VIEWS = ("expand", "expand_as", "repeat", "to", "type_as", "contiguous", "reshape", "view")


def _bind(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, item in enumerate(_SIGS[name]):
        key, default = (item, _REQ) if isinstance(item, str) else item
        out[key] = args[i] if i < len(args) else kwargs.get(key, default)
    return out


def _pair(v: Any) -> tuple[Any, ...]:
    if isinstance(v, (list, tuple)):
        v = tuple(int(x) if isinstance(x, int) else x for x in v)
        return v * 2 if len(v) == 1 else v
    return (v, v)


def _padding(padding: Any, kernel: tuple[int, ...], dilation: tuple[int, ...]) -> Any:
    if padding == "valid":
        return (0, 0)
    if padding == "same" and all(d * (k - 1) % 2 == 0 for k, d in zip(kernel, dilation)):
        return tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation))
    return padding if isinstance(padding, str) else _pair(padding)


def _op(name: str, args: Sequence[Any], kwargs: dict[str, Any], here: tuple[str, Any], owners: dict[int, Any],
        batchnorm: type, sources: dict[int, str]) -> Op | list[Op] | None:
    """The Op(s) of one call of function ``name`` made inside module ``here`` (path, module); None: not a layer.
    ``sources``: the parameters' state_dict keys (and their expanded copies') by tensor id."""
    path, module = here
    what = type(module).__name__
    a = _bind(name, args, kwargs) if name in _SIGS else {}
    if name in ("cat", "add", "getitem", "multi_head_attention_forward"):
        return _vit_op(name, a, here, owners, sources)
    if name in ("conv2d", "batch_norm", "linear"):
        key = a["weight"] if a["weight"] is not None else a.get("running_mean")
        path, module = owners.get(id(key), here)  # the module holding the weights: the state_dict prefix
        what = type(module).__name__
    if name == "conv2d":
        kernel, dil = tuple(int(k) for k in a["weight"].shape[2:]), _pair(a["dilation"])
        return Op("conv", path, {"padding_mode": getattr(module, "padding_mode", "zeros"), "kernel": kernel,
                                 "stride": _pair(a["stride"]), "dilation": dil,
                                 "padding": _padding(a["padding"], kernel, dil), "groups": int(a["groups"])}, what)
    if name == "batch_norm":
        if isinstance(module, batchnorm):  # momentum=None reaches F.batch_norm as 0.0 in eval mode: ask the module
            attrs = {"affine": module.affine, "track_running_stats": module.track_running_stats, "eps": module.eps,
                     "momentum": module.momentum}
        else:
            attrs = {"affine": a["weight"] is not None, "track_running_stats": a["running_mean"] is not None,
                     "eps": a["eps"], "momentum": a["momentum"]}
        return Op("bn", path, attrs, what)
    if name == "linear":
        return Op("fc", path, {}, what, input_ndim=getattr(a["input"], "ndim", 0))
    if name == "layer_norm":
        if a["weight"] is not None:
            path, module = owners.get(id(a["weight"]), here)
            what = type(module).__name__
        shape = a["normalized_shape"]
        shape = tuple(int(d) for d in shape) if isinstance(shape, (list, tuple)) else (int(shape),)
        return Op("layernorm", path, {"normalized_shape": shape, "eps": float(a["eps"]),
                                      "elementwise_affine": a["weight"] is not None, "bias": a["bias"] is not None},
                  what)
    x = args[0] if args else kwargs.get("input")
    if name == "mean":  # x.mean((2, 3)): a global average pool; tokens' x.mean(1): mean pooling, tr's gap
        dims = a["dim"] if isinstance(a["dim"], (list, tuple)) else (a["dim"],)
        if getattr(x, "ndim", 0) == 4 and None not in dims and sorted(int(d) % 4 for d in dims) == [2, 3]:
            return Op("gap", path, {}, f"{what}: mean over H, W")
        if getattr(x, "ndim", 0) == 3 and None not in dims and [int(d) % 3 for d in dims] == [1]:
            return Op("gap", path, {}, f"{what}: mean over the tokens")
        return None
    hw = tuple(int(v) for v in x.shape[-2:]) if name in ("avg_pool2d", "adaptive_avg_pool2d") else ()
    if name == "max_pool2d":
        k = _pair(a["kernel_size"])
        return Op("maxpool", path, {"kernel": k, "stride": _pair(a["stride"] or k), "padding": _pair(a["padding"]),
                                    "dilation": _pair(a["dilation"]), "ceil_mode": bool(a["ceil_mode"])}, what)
    if name == "avg_pool2d":
        k, pad = _pair(a["kernel_size"]), _pair(a["padding"])
        if k == hw and pad == (0, 0) and a["divisor_override"] is None:
            return Op("gap", path, {}, what)
        return Op("avgpool", path, {"kernel": k, "stride": _pair(a["stride"] or k), "padding": pad,
                                    "ceil_mode": bool(a["ceil_mode"]),
                                    # without padding the count is the window either way
                                    "count_include_pad": bool(a["count_include_pad"]) and pad != (0, 0),
                                    "divisor_override": a["divisor_override"]}, what)
    if name == "adaptive_avg_pool2d":
        out = tuple(hw[i] if v is None else int(v) for i, v in enumerate(_pair(a["output_size"])))
        if out == (1, 1):
            return Op("gap", path, {}, what)
        return None if out == hw else Op("adaptive_pool", path, {"output": out}, what)
    if name == "adaptive_max_pool2d":
        return Op("other", path, {"function": name}, what)
    if name in ("hardtanh", "clamp"):  # nn.ReLU6 is a Hardtanh(0, 6); x.clamp(min=0) a relu
        lo, hi = (a["min_val"], a["max_val"]) if name == "hardtanh" else (a["min"], a["max"])
        bounds = (None if lo is None else float(lo), None if hi is None else float(hi))
        kind = {(0.0, 6.0): "relu6", (0.0, None): "relu"}.get(bounds)
        if kind is None and name == "clamp":
            return None  # a clamp of other bounds: arithmetic, not a layer tr has or lacks
        return Op("act", path, {"kind": kind or f"hardtanh({bounds[0]:g}, {bounds[1]:g})"}, what)
    attrs = {"kind": name}
    if name in ("leaky_relu", "elu", "gelu"):
        attrs.update({k: v for k, v in a.items() if k != "input"})
    return Op("act", path, attrs, what)


def _vit_op(name: str, a: dict[str, Any], here: tuple[str, Any], owners: dict[int, Any],
            sources: dict[int, str]) -> Op | list[Op] | None:
    """A ViT's part: the class token's cat, the position embedding's add, x[:, 0], nn.MultiheadAttention."""
    path, module = here
    what = type(module).__name__
    if name == "cat":  # [cls; x]: a parameter's copies joined to the tokens
        ts = a["tensors"]
        hit = [k for k, t in enumerate(ts) if id(t) in sources and getattr(t, "ndim", 0) == 3] \
            if isinstance(ts, (list, tuple)) and len(ts) > 1 else []
        if not hit or not isinstance(a["dim"], int) or a["dim"] % 3 != 1:  # (joined along the tokens)
            return None
        key = sources[id(ts[hit[0]])]
        return Op("tokens", key, {"class_token": "prepended" if hit[0] == 0 else f"at {hit[0]} of {len(ts)}",
                                  "position_embedding": False}, f"class token {key!r}")
    if name == "add":  # x + pos: a 3-d parameter added to the tokens
        for emb, other in ((a["other"], a["input"]), (a["input"], a["other"])):
            if id(emb) in sources and getattr(emb, "ndim", 0) == 3 and getattr(other, "ndim", 0) == 3:
                key = sources[id(emb)]
                return Op("tokens", key, {"class_token": None, "position_embedding": True},
                          f"position embedding {key!r}")
        return None
    if name == "getitem":  # x[:, 0] of tokens [N, T, D]: class-token pooling
        x, idx = a["input"], a["index"]
        every = slice(None)
        if (getattr(x, "ndim", 0) == 3 and isinstance(idx, tuple) and len(idx) >= 2 and isinstance(idx[0], slice)
                and idx[0] == every and type(idx[1]) is int and idx[1] == 0
                and all(i is Ellipsis or (isinstance(i, slice) and i == every) for i in idx[2:])):
            return Op("class_token", path, {}, f"{what}: x[:, 0]")
        return None
    # F.multi_head_attention_forward (query [T, N, D]): in_proj (a Linear), attention, out_proj (a Linear)
    q = a["query"]
    if a["in_proj_weight"] is None or a["use_separate_proj_weight"]:
        return Op("other", path, {"function": "attention with separate q, k and v projections"}, what)
    masks = [m for m in ("attn_mask", "key_padding_mask") if a[m] is not None] + ["is_causal"] * bool(a["is_causal"])
    attrs = {"num_heads": int(a["num_heads"]), "embed_dim": int(a["embed_dim_to_check"]), "tokens": int(q.shape[0]),
             "bias": a["in_proj_bias"] is not None, "add_bias_kv": a["bias_k"] is not None,
             "add_zero_attn": bool(a["add_zero_attn"]), "mask": ", ".join(masks) or None,
             "self_attention": q is a["key"] and q is a["value"]}
    notes = {}
    if getattr(module, "batch_first", None) is False:
        notes["tokens"] = " (its batch_first=False reads the tokens as [T, N, D])"
    (in_path, in_mod), (out_path, out_mod) = (owners.get(id(a[k]), here) for k in ("in_proj_weight", "out_proj_weight"))
    return [Op("fc", in_path, {}, f"{type(in_mod).__name__} in_proj", input_ndim=3),
            Op("attention", path, attrs, what, notes=notes),
            Op("fc", out_path, {}, type(out_mod).__name__, input_ndim=3)]


def torch_ops(model: Any, hwc: tuple[int, int, int], flat_first: bool) -> list[Op]:
    """The model's computing layers in the order its forward runs them (a downsample moved first)."""
    from tr.task.torch_io import require_torch

    torch = require_torch()
    from torch.overrides import TorchFunctionMode

    table = _functions(torch)
    views = {getattr(o, n) for o in (torch.Tensor, torch._C.TensorBase) for n in _VIEWS if hasattr(o, n)}
    owners: dict[int, tuple[str, Any]] = {}
    for path, m in model.named_modules():
        for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)):
            owners.setdefault(id(t), (path, m))
    sources = {id(t): key for key, t in model.named_parameters()}
    kept: list[Any] = []  # the copies sources names stay alive: their ids are not reused
    stack: list[tuple[str, Any]] = []
    ops: list[Op] = []
    batchnorm = torch.nn.modules.batchnorm._BatchNorm

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                name, view = table.get(func), func in views
            except TypeError:  # an unhashable callable: no layer of ours
                name, view = None, False
            if name is not None:
                op = _op(name, args, kwargs, stack[-1] if stack else ("", model), owners, batchnorm, sources)
                ops.extend(op if isinstance(op, list) else [] if op is None else [op])
            out = func(*args, **kwargs)  # (the mode is off inside: a layer's own calls are not recorded)
            if view and args and id(args[0]) in sources:  # a parameter's expanded copy: still its tensor
                sources[id(out)] = sources[id(args[0])]
                kept.append(out)
            return out

    def leave(_mod: Any, _args: Any, _out: Any) -> None:  # (a hook's non-None return would replace the output)
        stack.pop()

    hooks: list[Any] = []
    training = {m: m.training for m in model.modules()}
    param = next(iter(model.parameters()), None)
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    device = param.device if param is not None else torch.device("cpu")
    h, w, c = hwc
    failures: list[str] = []
    try:
        try:
            for path, m in model.named_modules():
                hooks.append(m.register_forward_pre_hook(lambda mod, _args, p=path: stack.append((p, mod)) and None))
                hooks.append(m.register_forward_hook(leave))
        except Exception as e:  # noqa: BLE001 - e.g. a ScriptModule
            raise ConfigError(f"the torch model ({type(model).__name__}) takes no forward hooks ({e}), which name the "
                              "modules its layers run in; pass its state_dict() to match the weights by shape "
                              "alone") from None
        model.eval()
        for shape in [(1, c, h, w)] + ([(1, c * h * w)] if flat_first else []):
            ops.clear()
            stack.clear()
            try:
                with torch.no_grad(), Recorder():
                    model(torch.zeros(shape, dtype=dtype, device=device))
                break
            except Exception as e:  # noqa: BLE001 - reported below with the shape it was run on
                failures.append(f"on {list(shape)}: {type(e).__name__}: {e}")
        else:
            raise ConfigError(f"the torch model ({type(model).__name__}) could not run on a zero batch of tr's input "
                              f"to compare its layers with tr's ({'; '.join(failures)}); pass its state_dict() to "
                              "match the weights by shape alone")
    finally:
        for hook in hooks:
            hook.remove()
        for m, flag in training.items():
            m.training = flag
    return _downsample_first(_merge_tokens(ops))


def _merge_tokens(ops: list[Op]) -> list[Op]:
    """A class token's cat then a position embedding's add: one tokens layer, as tr's."""
    out: list[Op] = []
    for op in ops:
        prev = out[-1] if out else None
        if (op.kind == "tokens" and op.attrs["position_embedding"] and prev is not None and prev.kind == "tokens"
                and not prev.attrs["position_embedding"]):
            out[-1] = Op("tokens", f"{prev.where}, {op.where}", {**prev.attrs, "position_embedding": True},
                         f"{prev.what} and {op.what}")
        else:
            out.append(op)
    return out


def _downsample_first(ops: list[Op]) -> list[Op]:
    """torch_io's order: a block's downsample before the block's first layer (tr holds the shortcut first)."""
    def key(i: int) -> tuple[int, int, int]:
        m = re.match(r"(.*)\.downsample(\.|$)", ops[i].where)
        if not m:
            return (i, 1, i)
        block = m.group(1)
        return (next(j for j, op in enumerate(ops) if op.where == block or op.where.startswith(block + ".")), 0, i)

    return [ops[i] for i in sorted(range(len(ops)), key=key)]


# --- the comparison -------------------------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, float(b), rel_tol=1e-6)
    return a == b


def _torch_name(op: Op) -> str:
    if op.kind == "tokens":
        return f"the torch model's {op.what}"
    return f"torch module {op.where!r} ({op.what})" if op.where else f"the torch model's forward ({op.what})"


_POINTWISE = {"kernel": (1, 1), "stride": (1, 1), "dilation": (1, 1), "padding": (0, 0), "groups": 1}


def _same_kind(o: Op, t: Op) -> bool:
    if o.kind == "conv" and t.kind == "fc":  # a 1x1 conv on tokens (or a flat row): a Linear, not on an NCHW map
        return t.input_ndim != 4 and all(o.attrs[k] == v for k, v in _POINTWISE.items())
    return o.kind == t.kind and (o.kind != "act" or o.attrs["kind"] == t.attrs["kind"])


def check_depth(task: Any, model: Any) -> None:
    """ConfigError when ``model`` holds another number of nn.MultiheadAttention modules than the task's model has
    attention layers (both some): a ViT of another depth, which torch_io's shapes would report at its head."""
    from tr.graph import passes
    from tr.task.torch_io import require_torch

    torch = require_torch()
    ours = [L for L in passes.unfused(task.config.task.model, task.spec.input_shape[2]) if L.kind == "attention"]
    theirs = [path for path, m in model.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
    if not ours or not theirs or len(ours) == len(theirs):
        return
    k = min(len(ours), len(theirs))
    if len(theirs) > k:
        first = f"torch module {theirs[k]!r} (MultiheadAttention) is attention layer {k + 1} of {len(theirs)}"
        rest = f"tr's model has {k} (the last, tr's layer '{ours[-1].describe()}' at {ours[-1].origin})"
    else:
        first = f"tr's layer '{ours[k].describe()}' at {ours[k].origin} is attention layer {k + 1} of {len(ours)}"
        rest = f"the torch model has {k} MultiheadAttention modules (the last, torch module {theirs[-1]!r})"
    raise ConfigError(f"{first}, where {rest}: another depth, num_layers={len(theirs)} in torch where tr has "
                      f"{len(ours)}")


def check_layers(task: Any, model: Any, pairs: Sequence[tuple[Any, Any]]) -> None:
    """ConfigError at the first layer where ``model`` (an nn.Module) computes otherwise than the task's model;
    ``pairs``: torch_io.pair's weight pairing (torch prefixes in order, the pools folded into Linears)."""
    ours = tr_ops(task)
    theirs = torch_ops(model, tuple(task.spec.input_shape), flat_first=bool(ours) and ours[0].kind == "fc")
    folded = {b.prefix: b.pool for _, b in pairs}
    kept: list[Op] = []
    for i, op in enumerate(theirs):
        if op.kind == "adaptive_pool":  # before a Linear torch_io folds it into: no layer of its own
            nxt = next((o for o in theirs[i + 1:] if o.kind in _WEIGHTED), None)
            s = op.attrs["output"]
            if nxt is not None and nxt.kind == "fc" and s[0] == s[1] and folded.get(nxt.where) == s[0]:
                continue
        kept.append(op)
    theirs = kept
    weights = [op.where for op in theirs if op.kind in _WEIGHTED]
    for got, (_, b) in zip(weights, pairs):
        if got != b.prefix:
            raise ConfigError(f"the torch model's forward runs {got!r} where its state_dict order, by which the "
                              f"weights are matched to tr's layers, has {b.prefix!r}: the pairing would be wrong")
    for k in range(max(len(ours), len(theirs))):
        if k == len(theirs):
            last = f"after {_torch_name(theirs[-1])}" if theirs else "at all"
            raise ConfigError(f"tr's layer {ours[k].where} ({ours[k].show()}) has no counterpart in the torch model, "
                              f"which computes nothing more {last}")
        t = theirs[k]
        if k == len(ours):
            raise ConfigError(f"{_torch_name(t)} computes {t.show()} after tr's last layer {ours[-1].where}: tr's "
                              "model has no such layer")
        o = ours[k]
        if not _same_kind(o, t):
            raise ConfigError(f"{_torch_name(t)} computes {t.show()} where tr's layer {o.where} computes {o.show()}: "
                              "the torch model is of another architecture (a bare state_dict is matched by shapes "
                              "alone)")
        if o.kind != t.kind:  # a 1x1 conv as a Linear: nothing more to compare
            continue
        for key, v in o.attrs.items():
            if not _same(v, t.attrs.get(key)):
                raise ConfigError(f"{_torch_name(t)} has {key}={t.attrs.get(key)!r} where tr's layer {o.where} has "
                                  f"{key}={v!r}{t.notes.get(key, '')}")
