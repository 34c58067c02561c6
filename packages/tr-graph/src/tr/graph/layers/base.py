"""What every layer kind provides, and the small vocabulary kinds use to declare tensors and emit ops.

A kind (one module each) holds, for its ArchLayer kind(s):
- ``schema``: its parameters, typed and with their defaults (a frozen dataclass); an ArchLayer's params are
  completed from it when the layer is made, and a name it lacks is refused there;
- ``nodes`` / ``expand``: the BluePrint leaf values it is made from, and their parameters;
- its traits, which the ArchPlan passes ask instead of testing kind names (``first_ok``, ``spatial``,
  ``elementwise``, ``flat_output``, ``reads_rows``, ``epilogue_acts``, ``bn_stats``, ``loss``);
- ``describe``: the one-line description plans and error messages print;
- ``check``: parameter validation (sizes, probabilities);
- ``out_shape``: the shape rule, for one variant's input shapes (batch included);
- ``declare``: the tensors it owns beyond its input and output values (parameters and their gradient,
  moment and AMP twins, running statistics, saved statistics, masks, internal features), for one variant;
- ``forward`` / ``backward`` / ``inference``: op calls from the catalogue, by tensor key.

Kinds raise :class:`LayerProblem` with a plain message; the caller turns it into a CompileError that
names the layer index, the layer and the variant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from tr.core.dtype import DType
from tr.core.memory import Group, Region, Role, dtype_group
from tr.core.shape import Shape

if TYPE_CHECKING:
    from tr.graph.archplan import ArchLayer
    from tr.graph.spec import CompileSpec


class LayerProblem(Exception):
    """A layer cannot be built; the message says why (the caller adds which layer)."""


# Tensor classes. Pooled classes live only inside one step's compute chain (forward -> backward, or one
# inference pass) and share memory by liveness; the others keep their own slot for the whole run.
PARAM, STATE, FEATURE, GRAD, MASK, STAT, BASE = "param", "state", "feature", "grad", "mask", "stat", "base"
POOLED = frozenset([FEATURE, GRAD, MASK, STAT])

# Which timeline uses a tensor: its slot is the max over the variants of that timeline.
TRAIN, INF, ANY = "train", "inf", "any"


@dataclass(frozen=True, slots=True)
class Init:
    kind: str  # "weight" | "bias" | "ones" | "zeros" | "const"
    fan_in: int = 0
    fan_out: int = 0
    value: float = 0.0
    family: str = ""  # a weight's initializer family: "fc" or "conv" (tr.algo.init.Initializer.spec_for)


@dataclass(frozen=True, slots=True)
class Decl:
    local: str
    region: Region
    dtype: DType
    shape: Shape
    pad_c: int = 1
    cls: str = PARAM
    phase: str = ANY
    init: Init | None = None
    twin: str = ""  # a parameter's tensor: w (master), g, g16, a (AMP copy), gacc, m, v, n (trust ratio), e, e16


@dataclass(frozen=True, slots=True)
class DeclCtx:
    """What declarations depend on besides shapes: numerics and optimizer slots."""

    amp: bool
    momentum_slot: bool
    second_moment_slot: bool
    lars: bool
    ema: bool = False  # EMA twins of every master weight, and under AMP of every decayed 16-bit working copy
    low: DType = DType.FP16  # AMP's 16-bit type (FP16 or BF16): activations, their gradients, working copies
    accumulate: bool = False  # gradient accumulation: an FP32 window sum beside every gradient (tr.graph.accumulate)

    @property
    def feature_dtype(self) -> DType:
        return self.low if self.amp else DType.FP32

    @property
    def feature_region(self) -> Region:
        return Region(Role.ACTIVATION, dtype_group(self.feature_dtype))

    @property
    def feature_pad(self) -> int:
        return 8 if self.amp else 1

    # --- declaration helpers --------------------------------------------------------------------
    def param(self, local: str, group: Group, shape: Shape, init: Init) -> list[Decl]:
        """A trained tensor with its FP32 gradient, AMP twins (16-bit gradient and working copy, of type
        ``low``) and optimizer slots, as its group's traits ask."""
        def twin(suffix: str, role: Role, dtype: DType, name: str, s: Shape = shape) -> Decl:
            return Decl(local + suffix, Region(role, group), dtype, s, twin=name)

        out = [Decl(local, Region(Role.PARAM, group), DType.FP32, shape, init=init, twin="w"),
               twin(".grad", Role.GRAD, DType.FP32, "g")]
        if self.amp and group.fp16_grad:
            out.append(twin(".grad16", Role.GRAD_FP16, self.low, "g16"))
        if self.amp and group.amp_copy:
            out.append(twin(working_suffix(self.low), Role.AMP_COPY, self.low, "a"))
        if self.accumulate:
            out.append(twin(".gacc", Role.GRAD_ACCUM, DType.FP32, "gacc"))
        if self.momentum_slot:
            out.append(twin(".m", Role.MOMENT1, DType.FP32, "m"))
        if self.second_moment_slot:
            out.append(twin(".v", Role.MOMENT2, DType.FP32, "v"))
        if self.lars and group.decayed:
            out.append(twin(".ratio", Role.TRUST_RATIO, DType.FP32, "n", Shape(1, 1, 1, 1)))
        if self.ema:  # the EMA twin sits at its master's offset within the EMA role (tr.graph.ema)
            out.append(twin(".ema", Role.EMA, DType.FP32, "e"))
            if self.amp and group.amp_copy and group.decayed:  # (16-bit biases have no EMA twin: EMA inference
                out.append(twin(".ema16", Role.EMA_FP16, self.low, "e16"))  # reads the FP32 one)
        return out

    def state(self, local: str, region: Region, shape: Shape, init: Init) -> Decl:
        """Persistent non-trained tensor (running statistics, folded BN parameters)."""
        return Decl(local, region, DType.FP32, shape, cls=STATE, init=init)

    def feature(self, local: str, shape: Shape, phase: str) -> Decl:
        return Decl(local, self.feature_region, self.feature_dtype, shape, self.feature_pad, FEATURE, phase)

    def grad(self, local: str, shape: Shape) -> Decl:
        return Decl(local, self.feature_region, self.feature_dtype, shape, self.feature_pad, GRAD, TRAIN)

    def mask(self, local: str, shape: Shape) -> Decl:
        return Decl(local, Region(Role.MASK), DType.INT8, shape, 8, MASK, TRAIN)

    def stat(self, local: str, shape: Shape) -> Decl:
        return Decl(local, Region(Role.TEMP, dtype_group(DType.FP32)), DType.FP32, shape, 1, STAT, TRAIN)


def working_suffix(low: DType) -> str:
    """The key suffix of a weight's AMP working copy: ".fp16" or ".bf16" (its type in its name)."""
    return ".bf16" if low is DType.BF16 else ".fp16"


class IO:
    """Keys a kind reads and writes for one layer, and the op sink.

    ``x``: input value keys; ``y``: output value key; ``dy``: key of the output's gradient (backward);
    ``dy2``: a second part of it, to be added, for kinds whose ``takes_second_gradient`` says so (else "");
    ``dx``: keys where the input gradients go; ``need``: whether each input needs its gradient at all;
    ``dx2``: the contributions the first input's gradient already has, to be added into ``dx[0]``, for kinds whose
    ``adds_input_gradient`` says so (else ""); ``terms``: for kinds whose ``computes_input`` says so, the keys its
    input's producer reads (the sum's terms; else empty).
    """

    __slots__ = ("index", "layer", "x", "y", "dy", "dy2", "dx", "dx2", "terms", "need", "amp", "spec", "labels",
                 "_emit", "_has")

    def __init__(self, index: int, layer: ArchLayer, *, x: Sequence[str], y: str = "", dy: str = "", dy2: str = "",
                 dx: Sequence[str] = (), dx2: str = "", terms: Sequence[str] = (), need: Sequence[bool] = (),
                 amp: bool, spec: CompileSpec, labels: str = "labels", emit: Callable[..., None],
                 has: Callable[[str], bool]) -> None:
        self.index = index
        self.layer = layer
        self.x = list(x)
        self.y = y
        self.dy = dy
        self.dy2 = dy2
        self.dx = list(dx)
        self.dx2 = dx2
        self.terms = list(terms)
        self.need = list(need)
        self.amp = amp
        self.spec = spec
        self.labels = labels
        self._emit = emit
        self._has = has

    def t(self, local: str) -> str:
        """Global key of one of this layer's own tensors."""
        return f"L{self.index}.{local}"

    @staticmethod
    def key(index: int, local: str) -> str:
        """Global key of a tensor of layer ``index`` (a fusion reading its producer's, e.g. a relu mask)."""
        return f"L{index}.{local}"

    def w(self, local: str) -> str:
        """The weight as compute ops read it: the 16-bit working copy under AMP when the group has one."""
        k = self.t(local + working_suffix(self.spec.low_dtype))
        return k if self.amp and self._has(k) else self.t(local)

    def dw(self, local: str) -> str:
        """Where the backward op writes the weight gradient: the 16-bit twin under AMP when there is one."""
        k = self.t(local + ".grad16")
        return k if self.amp and self._has(k) else self.t(local + ".grad")

    def loss_divisor(self) -> dict[str, str]:
        """A loss backward's ``div`` argument: with gradient accumulation the window's samples (tr.graph.accumulate's
        accum_div), else nothing (the op divides by its batch)."""
        return {"div": "accum_div"} if self.spec.accumulate > 1 else {}

    def mixup_lam(self) -> dict[str, str]:
        """A training loss's ``lam`` argument: with mixup the step's lam (the targets mix the batch's labels with
        the reversed batch's), else nothing."""
        return {"lam": "mixup_lam"} if self.spec.mixup is not None else {}

    def dx_or_none(self, k: int = 0) -> str | None:
        return self.dx[k] if self.need[k] else None

    def op(self, name: str, attrs: dict[str, Any] | None = None, label: str = "", **args: Any) -> None:
        self._emit(name, args, attrs or {}, self.index, label)


@dataclass(frozen=True, slots=True)
class NoParams:
    """The schema of a kind without parameters."""


@dataclass(frozen=True, slots=True)
class Expansion:
    """What one BluePrint leaf becomes: an ArchLayer kind, its parameters, and the channel count after it
    (None where it is not known: after a flatten)."""

    kind: str
    params: dict[str, Any]
    channels: int | None


class LayerKind:
    """Base class; see the module docstring."""

    kinds: tuple[str, ...] = ()
    schema: ClassVar[type] = NoParams  # the parameters: field names, types and defaults
    nodes: tuple[type, ...] = ()  # the BluePrint leaf types ``expand`` takes
    bn_stats = False  # keeps BN running statistics, folded into an inference scale and bias (bn_update_eq)
    spatial = False  # reads an [N,H,W,C] window (convolution, pooling): meaningless after a flatten
    loss = False  # a loss layer: the compiler appends the task's one after the model's last layer
    first_ok = False  # may be the first layer, the one that reads the input batch
    elementwise = False  # y = f(x) value by value: a bn after it normalises what came before it
    flat_output = False  # writes [N,1,1,C] rows: a bn reading it (through element-wise layers) is a bn1d
    reads_rows = False  # reads its input as [N, H*W*C] rows: a flatten that only feeds such layers is a no-op
    epilogue_acts: tuple[str, ...] = ()  # activations its op applies itself (param "activation"): fused into it

    def describe(self, layer: ArchLayer) -> str:
        """One line for plans and error messages, e.g. ``conv 64 k3 s1 p1``."""
        return layer.kind

    def expand(self, node: Any, channels: int | None) -> Expansion:
        """The ArchLayer a BluePrint leaf of ``nodes`` becomes, given the channel count before it."""
        raise NotImplementedError(f"{type(self).__name__} is made by the passes, not from a BluePrint node")

    def is_identity(self, layer: ArchLayer) -> bool:
        """Whether the layer passes its input through unchanged (dropout(0)): the passes remove it."""
        return False

    def typed(self, layer: ArchLayer) -> Any:
        """The layer's parameters as the kind's schema."""
        return self.schema(**layer.params)

    def check(self, layer: ArchLayer) -> None:
        """Validate parameters; raise LayerProblem."""

    def out_shape(self, layer: ArchLayer, ins: Sequence[Shape]) -> Shape:
        raise NotImplementedError

    def check_producers(self, layer: ArchLayer, producers: Sequence[ArchLayer | None],
                        shapes: Mapping[int, Shape]) -> None:
        """Validate what the layer reads beyond its input shapes: the layers writing its inputs (None: the input
        batch) and every shape so far, by uid; raise LayerProblem."""

    def num_params(self, layer: ArchLayer, ins: Sequence[Shape], out: Shape) -> int:
        """Trained scalars (weights, biases, BN gamma and beta), counted as other frameworks count them."""
        return 0

    def has_params(self, layer: ArchLayer) -> bool:
        return False

    def declare(self, layer: ArchLayer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return []

    def forward(self, layer: ArchLayer, io: IO) -> None:
        raise NotImplementedError

    def takes_second_gradient(self, layer: ArchLayer) -> bool:
        """Whether backward adds ``io.dy2`` to ``io.dy`` itself (a branch point's two gradient contributions,
        summed as the kernel reads them instead of by an accumulate op)."""
        return False

    def adds_input_gradient(self, layer: ArchLayer) -> bool:
        """Whether backward adds ``io.dx2``, the contributions its (first) input's gradient already has from the
        readers after it (a branch point's skip path), into the ``dx[0]`` it writes, instead of an accumulate op
        after it."""
        return False

    def computes_input(self, layer: ArchLayer) -> bool:
        """Whether the layer's forward computes its input value itself from its producer's inputs (``io.terms``)
        and writes it (a layernorm with the add before it fused in); the producer then emits no op."""
        return False

    def backward(self, layer: ArchLayer, io: IO) -> list[str | None]:
        """Emit the backward ops; return, per input, the key holding its gradient contribution (None: none).

        A returned key equal to ``io.dx[k]`` is owned by that input; any other key is shared (borrowed).
        """
        raise NotImplementedError

    def inference(self, layer: ArchLayer, io: IO) -> str:
        """Emit inference ops; return the key holding the output (``io.y``, or an input for no-ops)."""
        raise NotImplementedError


# --- shared checks ----------------------------------------------------------------------------------

def positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise LayerProblem(f"{name} must be an integer, got {v!r}")
    if v < 1:
        raise LayerProblem(f"{name} must be >= 1, got {v}")
    return v


def non_negative_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise LayerProblem(f"{name} must be an integer, got {v!r}")
    if v < 0:
        raise LayerProblem(f"{name} must be >= 0, got {v}")
    return v


def spatial_out(x: Shape, k: int, s: int, p: int, what: str) -> tuple[int, int]:
    if x.h + 2 * p < k or x.w + 2 * p < k:
        raise LayerProblem(f"{what} kernel {k}x{k} is larger than its input {x.h}x{x.w} (padding {p})")
    return (x.h + 2 * p - k) // s + 1, (x.w + 2 * p - k) // s + 1


def complete_params(kind: str, schema: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with the schema's defaults filled in; a name the schema lacks, or a required one missing, is a
    CompileError (a pass or a test built a layer wrongly: the user's values are checked by ``check``)."""
    from tr.core.errors import CompileError

    out: dict[str, Any] = {}
    names = set()
    for f in fields(schema):
        names.add(f.name)
        if f.name in given:
            out[f.name] = given[f.name]
        elif f.default is not MISSING:
            out[f.name] = f.default
        else:
            raise CompileError(f"{kind} layer: parameter {f.name!r} is missing")
    unknown = sorted(set(given) - names)
    if unknown:
        raise CompileError(f"{kind} layer: unknown parameter(s) {unknown}; it takes {sorted(names)}")
    return out
