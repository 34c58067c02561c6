"""BluePrint DSL: immutable layer values that describe a model, with a repr that reads like the code.

Factories only record what they are given (and reject values that are not layers or numbers at all);
sizes, strides and probabilities are checked when the model compiles, where the error can name the
expanded layer index (tr.core.errors.CompileError).

    seq(cbr(64, 7, s=2, p=3), maxpool(3, 2, 1), repeat(block("basic", 64), 2), gap(), fc(10))
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tr.core.errors import CompileError, ConfigError

ACT_KINDS = ("relu", "tanh", "silu", "sigmoid", "relu6", "leaky_relu", "hardswish", "elu", "gelu")
BLOCK_KINDS = ("basic", "bottleneck")


@dataclass(frozen=True, repr=False)
class Layer:
    """Base of every DSL value. Subclasses list their fields; repr shows non-default ones as keywords."""

    def _call(self) -> str:
        return type(self).__name__.lower()

    def _positional(self) -> tuple[str, ...]:
        return ()

    def __repr__(self) -> str:
        parts: list[str] = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in self._positional():
                parts.append(repr(v))
            elif v != f.default:
                parts.append(f"{f.name}={v!r}")
        return f"{self._call()}({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class FC(Layer):
    out: int
    bias: bool = True

    def _call(self) -> str:
        return "fc"

    def _positional(self) -> tuple[str, ...]:
        return ("out",)


@dataclass(frozen=True, repr=False)
class Conv(Layer):
    out: int
    k: int
    s: int = 1
    p: int = 0
    groups: int = 1
    bias: bool = False

    def _positional(self) -> tuple[str, ...]:
        return ("out", "k")


@dataclass(frozen=True, repr=False)
class BN(Layer):
    momentum: float = 0.1
    eps: float = 1e-5


@dataclass(frozen=True, repr=False)
class LayerNorm(Layer):
    eps: float = 1e-5


@dataclass(frozen=True, repr=False)
class Tokens(Layer):
    cls: bool = True
    pos: bool = True


@dataclass(frozen=True, repr=False)
class ClassToken(Layer):
    pass


@dataclass(frozen=True, repr=False)
class Attention(Layer):
    heads: int = 1
    dropout: float = 0.0


@dataclass(frozen=True, repr=False)
class Act(Layer):
    kind: str = "relu"

    def __repr__(self) -> str:
        return f"{self.kind}()"


@dataclass(frozen=True, repr=False)
class MaxPool(Layer):
    k: int
    s: int
    p: int = 0

    def _positional(self) -> tuple[str, ...]:
        return ("k", "s")


@dataclass(frozen=True, repr=False)
class AvgPool(Layer):
    k: int
    s: int
    p: int = 0

    def _positional(self) -> tuple[str, ...]:
        return ("k", "s")


@dataclass(frozen=True, repr=False)
class GAP(Layer):
    pass


@dataclass(frozen=True, repr=False)
class Flatten(Layer):
    pass


@dataclass(frozen=True, repr=False)
class ChannelPadding(Layer):
    multiple: int = 8  # C becomes the next multiple (the seed's C -> ceil8: FP16 tensor cores take C % 8 == 0)


@dataclass(frozen=True, repr=False)
class Dropout(Layer):
    p: float = 0.5

    def _positional(self) -> tuple[str, ...]:
        return ("p",)


@dataclass(frozen=True, repr=False)
class DropPath(Layer):
    p: float

    def _call(self) -> str:
        return "drop_path"

    def _positional(self) -> tuple[str, ...]:
        return ("p",)


@dataclass(frozen=True, repr=False)
class Identity(Layer):
    pass


@dataclass(frozen=True, repr=False)
class SE(Layer):
    """Squeeze-excitation (torchvision's SqueezeExcitation): y = x * sigmoid(fc2(act(fc1(gap(x))))), fc1 to
    ``squeeze`` channels and fc2 back to x's, both with bias; one factor per sample and channel."""

    squeeze: int
    act: str = "silu"

    def _positional(self) -> tuple[str, ...]:
        return ("squeeze",)


@dataclass(frozen=True, repr=False)
class SoftmaxCE(Layer):
    """The loss. Optional in a BluePrint: compile appends it (the loss is always softmax cross-entropy)."""

    def _call(self) -> str:
        return "softmax_ce"


@dataclass(frozen=True, repr=False)
class Seq(Layer):
    layers: tuple[Layer, ...]

    def __repr__(self) -> str:
        return f"seq({', '.join(repr(x) for x in self.layers)})"


@dataclass(frozen=True, repr=False)
class Add2(Layer):
    """Residual join: y = shortcut(x) + stem(x)."""

    shortcut: Layer
    stem: Layer

    def _positional(self) -> tuple[str, ...]:
        return ("shortcut", "stem")


@dataclass(frozen=True, repr=False)
class Repeat(Layer):
    body: Layer
    times: int

    def _positional(self) -> tuple[str, ...]:
        return ("body", "times")


@dataclass(frozen=True, repr=False)
class CBR(Layer):
    """conv -> batch norm -> relu."""

    out: int
    k: int
    s: int = 1
    p: int = 0
    momentum: float = 0.1
    eps: float = 1e-5

    def _positional(self) -> tuple[str, ...]:
        return ("out", "k")


@dataclass(frozen=True, repr=False)
class Block(Layer):
    """ResNet block. basic: 3x3(out, stride) - 3x3(out); bottleneck: 1x1(mid) - 3x3(mid, stride) - 1x1(out).

    The shortcut is the identity when stride == 1 and the input already has ``out`` channels, else a
    1x1 projection conv (with the block's stride) followed by batch norm; a relu follows the join.
    ``drop_path`` > 0 ends the residual branch (after its last BN, before the join) with drop_path(p), timm's
    stochastic depth.
    """

    kind: str
    out: int
    mid: int | None = None
    stride: int = 1
    momentum: float = 0.1
    eps: float = 1e-5
    drop_path: float = 0.0

    def _positional(self) -> tuple[str, ...]:
        return ("kind", "out")


@dataclass(frozen=True, repr=False)
class MBConv(Layer):
    """The seed's ``mbconv``: MobileNetV2's inverted residual and EfficientNet's MBConv. A 1x1 expansion to
    ``expand`` x the input's channels (none when expand is 1), a kxk depthwise convolution with the stride, each
    with BN and the activation; then squeeze-excitation through max(1, floor(se x input channels)) channels (se 0:
    none) and a 1x1 linear projection to ``out`` with BN; the identity skip where the block keeps the shape.
    ``drop_path`` > 0 (only where there is the skip) ends the branch, before the join, with drop_path(p):
    torchvision's StochasticDepth "row" of its MBConv."""

    expand: int
    out: int
    stride: int = 1
    k: int = 3
    se: float = 0.0
    act: str = "relu6"
    momentum: float = 0.1
    eps: float = 1e-5
    drop_path: float = 0.0

    def _positional(self) -> tuple[str, ...]:
        return ("expand", "out")


@dataclass(frozen=True)
class BluePrint:
    """A named model: the root layer plus optional defaults for tools (input shape per sample, classes)."""

    root: Layer
    name: str = ""
    input_shape: tuple[int, int, int] | None = None  # (H, W, C) of one sample
    num_classes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.root, Layer):
            raise CompileError(f"BluePrint root must be a layer (e.g. seq(...)), got {type(self.root).__name__}")

    def __repr__(self) -> str:
        extra = ""
        if self.name:
            extra += f", name={self.name!r}"
        if self.input_shape is not None:
            extra += f", input_shape={self.input_shape!r}"
        if self.num_classes is not None:
            extra += f", num_classes={self.num_classes!r}"
        return f"BluePrint({self.root!r}{extra})"

    def pretty(self) -> str:
        return pretty(self.root)


def as_layer(x: BluePrint | Layer) -> Layer:
    if isinstance(x, BluePrint):
        return x.root
    if isinstance(x, Layer):
        return x
    raise CompileError(f"expected a BluePrint or a layer, got {type(x).__name__}")


def pretty(layer: Layer, indent: int = 0) -> str:
    """Multi-line rendering: one leaf per line, composites indented."""
    pad = "  " * indent
    if isinstance(layer, Seq):
        inner = ",\n".join(pretty(x, indent + 1) for x in layer.layers)
        return f"{pad}seq(\n{inner})" if layer.layers else f"{pad}seq()"
    if isinstance(layer, Add2):
        return (f"{pad}add2(\n{pretty(layer.shortcut, indent + 1)},\n{pretty(layer.stem, indent + 1)})")
    if isinstance(layer, Repeat):
        return f"{pad}repeat(\n{pretty(layer.body, indent + 1)},\n{pad}  {layer.times!r})"
    return pad + repr(layer)


# --- factories -------------------------------------------------------------------------------------

def _number(what: str, v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CompileError(f"{what} must be a number, got {v!r}")
    return v


def _drop_rate(what: str, p: Any) -> float:
    p = _number(f"{what} drop_path", p)
    if not 0.0 <= p < 1.0:  # (a NaN fails too)
        raise CompileError(f"{what} drop_path must be in [0, 1), got {p}")
    return p


def _ints(what: str, **vals: Any) -> None:
    for name, v in vals.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise CompileError(f"{what}: {name} must be an integer, got {v!r}")


def _layer(what: str, v: Any) -> Layer:
    if isinstance(v, BluePrint):
        return v.root
    if not isinstance(v, Layer):
        raise CompileError(f"{what} must be a layer, got {v!r}")
    return v


def seq(*layers: Layer | list[Layer] | tuple[Layer, ...]) -> Seq:
    """A chain of layers; ``seq(a, b)`` or ``seq([a, b])``. Must not be empty (checked at compile)."""
    if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
        layers = tuple(layers[0])
    return Seq(tuple(_layer(f"seq item {i}", x) for i, x in enumerate(layers)))


def fc(out: int, bias: bool = True) -> FC:
    _ints("fc", out=out)
    if not isinstance(bias, bool):
        raise CompileError(f"fc: bias must be True or False, got {bias!r}")
    return FC(out, bias)


def conv(out: int, k: int, s: int = 1, p: int = 0, groups: int = 1, bias: bool = False) -> Conv:
    """Square-kernel convolution; weights KRSC [out, k, k, C / groups]. ``groups`` > 1: the channels split into
    that many groups, each convolved with its own out / groups filters (torch's ``groups``; groups = C = out is
    the depthwise convolution). ``bias``: add a trained bias per output channel (off by default: a batch norm
    usually follows, whose mean removes it; a conv with a bias is never fused into a cbr)."""
    _ints("conv", out=out, k=k, s=s, p=p, groups=groups)
    if groups < 1 or out % groups:
        raise CompileError(f"conv groups must be >= 1 and divide out={out}, got groups={groups}")
    if not isinstance(bias, bool):
        raise CompileError(f"conv: bias must be True or False, got {bias!r}")
    return Conv(out, k, s, p, groups, bias)


def bn(momentum: float = 0.1, eps: float = 1e-5) -> BN:
    return BN(_number("bn momentum", momentum), _number("bn eps", eps))


def layernorm(eps: float = 1e-5) -> LayerNorm:
    """Normalise each position's C values (ViT's LayerNorm over the embedding: tokens as positions), then a
    trained per-channel scale (ones) and shift (zeros); after a flatten, a sample's whole row."""
    return LayerNorm(_number("layernorm eps", eps))


def tokens(cls: bool = True, pos: bool = True) -> Tokens:
    """A Vision Transformer's token sequence from a patch embedding's [N, H, W, C] output: its H*W positions as
    tokens [N, 1, T, C] in row order, a learned class token first (``cls``; zeros at the start, as torchvision's),
    a learned position embedding added (``pos``; a normal of std Initializer.embedding_std cut at 2 sigma)."""
    if not isinstance(cls, bool) or not isinstance(pos, bool):
        raise ConfigError(f"tokens(cls, pos) take True or False, got {cls!r}, {pos!r}")
    return Tokens(cls, pos)


def attention(heads: int, dropout: float = 0.0) -> Attention:
    """Multi-head scaled dot-product self-attention on tokens: reads the fused projection's [N, 1, T, 3D] (q, k, v,
    torch.nn.MultiheadAttention's packed layout: a 1x1 conv of 3D channels with bias before it), writes the heads'
    outputs [N, 1, T, D] (the output projection is a 1x1 conv after it); scale 1 / sqrt(D / heads). ``dropout``
    (in [0, 1)) drops attention probabilities in training, the kept ones scaled by 1 / (1 - dropout), as
    torch.nn.MultiheadAttention's dropout (scaled_dot_product_attention's dropout_p); none at inference."""
    _ints("attention", heads=heads)
    return Attention(heads, _number("attention dropout", dropout))


def class_token() -> ClassToken:
    """Class-token pooling: token 0 of [N, 1, T, C] as [N, 1, 1, C] (torchvision's ViT head input)."""
    return ClassToken()


def cbr(out: int, k: int, s: int = 1, p: int = 0, momentum: float = 0.1, eps: float = 1e-5) -> CBR:
    _ints("cbr", out=out, k=k, s=s, p=p)
    return CBR(out, k, s, p, _number("cbr momentum", momentum), _number("cbr eps", eps))


def cbrp(out: int, ck: int, cs: int = 1, cp: int = 0, pk: int = 2, ps: int | None = None, pp: int = 0,
         momentum: float = 0.1, eps: float = 1e-5) -> Seq:
    """The seed's ``cbrp``: conv(ck, cs, cp) -> batch norm -> relu -> max pool(pk, ps, pp). The fusion pass
    makes it one cbr whose BN kernels pool as they normalise (tr.graph.passes.fuse_pool)."""
    return seq(cbr(out, ck, cs, cp, momentum, eps), maxpool(pk, ps, pp))


def relu() -> Act:
    return Act("relu")


def tanh() -> Act:
    return Act("tanh")


def silu() -> Act:
    return Act("silu")


def sigmoid() -> Act:
    return Act("sigmoid")


def relu6() -> Act:
    return Act("relu6")


def leaky_relu() -> Act:
    """Slope 0.01 (fixed, as the op catalogue's activation has no parameter)."""
    return Act("leaky_relu")


def hardswish() -> Act:
    return Act("hardswish")


def elu() -> Act:
    """alpha = 1."""
    return Act("elu")


def gelu() -> Act:
    return Act("gelu")


def activation(kind: str) -> Act:
    if kind not in ACT_KINDS:
        raise CompileError(f"unknown activation {kind!r}; expected one of {ACT_KINDS}")
    return Act(kind)


def maxpool(k: int, s: int | None = None, p: int = 0) -> MaxPool:
    """Max pooling; stride defaults to the kernel size."""
    s = k if s is None else s
    _ints("maxpool", k=k, s=s, p=p)
    return MaxPool(k, s, p)


def avgpool(k: int, s: int | None = None, p: int = 0) -> AvgPool:
    """Average pooling (padding excluded from the count); stride defaults to the kernel size."""
    s = k if s is None else s
    _ints("avgpool", k=k, s=s, p=p)
    return AvgPool(k, s, p)


def gap() -> GAP:
    return GAP()


def gap_fc(out: int, bias: bool = True) -> Seq:
    """The seed's ``gap_fc``: global average pooling then an fc. It runs as gap_fwd and the fc's GEMM, which
    reads the pooled [N, C] directly (the pair is a small fraction of MobileNetV2's step, benchmarks/RESULTS.md:
    a fused kernel would have almost nothing to take)."""
    return seq(gap(), fc(out, bias))


def flatten() -> Flatten:
    return Flatten()


def channel_padding(multiple: int = 8) -> ChannelPadding:
    """Zero channels appended up to the next multiple of ``multiple`` (the seed's ``channel_padding()``)."""
    _ints("channel_padding", multiple=multiple)
    return ChannelPadding(multiple)


def dropout(p: float = 0.5) -> Dropout:
    return Dropout(_number("dropout p", p))


def drop_path(p: float) -> DropPath:
    """Stochastic depth: in training each sample's value is zeroed with probability ``p`` (in [0, 1)) and kept ones
    are scaled by 1 / (1 - p); the identity at inference (timm's DropPath, torchvision's StochasticDepth(p, "row")).
    Placed at the end of a residual branch, it drops the branch per sample: add2(identity(), seq(..., drop_path(p)))."""
    return DropPath(_number("drop_path p", p))


def identity() -> Identity:
    return Identity()


def softmax_ce() -> SoftmaxCE:
    return SoftmaxCE()


def se(squeeze: int, act: str = "silu") -> SE:
    """Squeeze-excitation over the current channels, through ``squeeze`` channels (EfficientNet's MBConv)."""
    _ints("se", squeeze=squeeze)
    if squeeze < 1:
        raise CompileError(f"se: squeeze must be >= 1, got {squeeze}")
    if act not in ACT_KINDS:
        raise CompileError(f"se activation {act!r}: expected one of {ACT_KINDS}")
    return SE(squeeze, act)


def add2(shortcut: Layer, stem: Layer) -> Add2:
    """Residual: shortcut(x) + stem(x); ``identity()`` as the shortcut for an identity skip."""
    return Add2(_layer("add2 shortcut", shortcut), _layer("add2 stem", stem))


def repeat(body: Layer, times: int) -> Repeat:
    _ints("repeat", times=times)
    return Repeat(_layer("repeat body", body), times)


def block(kind: str, out: int, mid: int | None = None, stride: int = 1, momentum: float = 0.1,
          eps: float = 1e-5, drop_path: float = 0.0) -> Block:
    """ResNet block: ``block("basic", 64)``, ``block("bottleneck", 256, mid=64, stride=2)``.

    For a bottleneck ``mid`` defaults to out // 4. ``drop_path``: stochastic depth on the residual branch (Block).
    """
    if kind not in BLOCK_KINDS:
        raise CompileError(f"unknown block kind {kind!r}; expected one of {BLOCK_KINDS}")
    _ints("block", out=out, stride=stride)
    if mid is not None:
        _ints("block", mid=mid)
    if kind == "basic" and mid is not None:
        raise CompileError("block('basic', ...) takes no mid width (both convs have `out` channels)")
    return Block(kind, out, mid, stride, _number("block momentum", momentum), _number("block eps", eps),
                 _drop_rate("block", drop_path))


def mbconv(expand: int, out: int, stride: int = 1, k: int = 3, se: float = 0.0, act: str = "relu6",
           momentum: float = 0.1, eps: float = 1e-5, drop_path: float = 0.0) -> MBConv:
    """The seed's ``mbconv(expand, out, stride)`` (MobileNetV2's inverted residual: k 3, ReLU6), and EfficientNet's
    MBConv with ``k=5``, ``se=0.25``, ``act="silu"``; ``drop_path``: stochastic depth where it has the skip (see
    MBConv)."""
    _ints("mbconv", expand=expand, out=out, stride=stride, k=k)
    if expand < 1 or out < 1 or stride < 1 or k < 1 or k % 2 == 0:
        raise CompileError(f"mbconv needs expand, out and stride >= 1 and an odd kernel, got expand={expand}, "
                           f"out={out}, stride={stride}, k={k}")
    se = _number("mbconv se", se)
    if not 0.0 <= se <= 1.0:
        raise CompileError(f"mbconv se is a ratio of the input channels in [0, 1], got {se}")
    if act not in ACT_KINDS:
        raise CompileError(f"mbconv activation {act!r}: expected one of {ACT_KINDS}")
    return MBConv(expand, out, stride, k, se, act, _number("mbconv momentum", momentum), _number("mbconv eps", eps),
                  _drop_rate("mbconv", drop_path))


def basic_block(out: int, stride: int = 1) -> Block:
    return block("basic", out, stride=stride)


def bottleneck(mid: int, out: int, stride: int = 1) -> Block:
    return block("bottleneck", out, mid=mid, stride=stride)
