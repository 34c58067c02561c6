"""Memory roles and groups: what an arena tensor is for, and the order the memory plan lays regions out in.

A region is (role, group). The role says what the bytes are for (a master parameter, its gradient, a moment,
an activation, ...); the group is declared by whoever owns the tensor (a layer kind names its parameter
groups and their traits; the compiler names its scalar, input and temporary groups). tr-core knows no layer
kind: the traits a range op selects by (weight decay, an FP16 working copy, an FP16 gradient, whether the
gradient is complete before the first layer's backward) are data on the group.

The memory plan orders regions by (role, group.sort_key()); a range op names its bytes as a :class:`Span`, a
selection of regions by role and traits, which must come out contiguous in that order (the layout resolves
and checks it). The sort key makes every span the compiler asks for contiguous for tr's groups and for groups
whose traits follow them; no single order can do it for every combination (an early bias-like group, a decayed
group without a working copy beside early ones under AMP, a bias-like group with an FP16 gradient): such a plan
is a CompileError naming the region in the way, raised when the plan is compiled, not a wrong range.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

from tr.core.dtype import DType


class Role(Enum):
    """What a region's bytes are for, in layout order (low to high address).

    ``state``: the bytes outlive a step (a checkpoint holds them); ``shared``: initial model state every
    data-parallel rank takes from rank 0; ``scratch``: rewritten before any op reads them in a step (the
    pooled activations and gradient slots, masks, temporaries: the reuse checker's domain).
    """

    RUNNING = "running"  # running statistics a step reads (normalised inference reads them too)
    RUNNING_NEXT = "running_next"  # running statistics a step writes, copied to RUNNING when the step is applied
    FOLDED = "folded"  # inference parameters folded from running statistics
    PARAM = "param"  # FP32 master parameters
    EMA = "ema"  # the exponential moving average of every master parameter
    EMA_FP16 = "ema_fp16"  # FP16 copies of the EMA of groups with an FP16 working copy (decayed ones)
    AMP_COPY = "amp_copy"  # FP16 working copies compute ops read under AMP
    GRAD = "grad"  # FP32 gradients of the master parameters
    RESULT = "result"  # a step's (loss, top1, top5): between the FP32 and FP16 gradients, one collective
    GRAD_FP16 = "grad_fp16"  # FP16 gradients backward ops write under AMP, cast into GRAD
    GRAD_ACCUM = "grad_accum"  # FP32 sums of a window's micro-batch gradients (task.accumulate; dead between windows)
    MOMENT1 = "moment1"  # momentum / first moment
    MOMENT2 = "moment2"  # second moment
    TRUST_RATIO = "trust_ratio"  # LARS per-tensor trust ratios
    INPUT = "input"  # the double-buffered batch (labels and data of buffers a and b)
    ACTIVATION = "activation"  # pooled features and their gradients
    SCALAR = "scalar"  # step counters, flags, the learning rate, the loss scale, tables
    MASK = "mask"  # relu, pool and dropout masks
    TEMP = "temp"  # per-step temporaries (saved statistics, probabilities, labels)
    PREDICTED = "predicted"  # inference's predicted labels
    RESULT_SUM = "result_sum"  # the epoch's accumulated results
    RESIDENT = "resident"  # data sets resident on the device, a JPEG input's decode buffer

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    @property
    def state(self) -> bool:
        return self in _STATE

    @property
    def shared(self) -> bool:
        return self in _SHARED

    @property
    def scratch(self) -> bool:
        return self in _SCRATCH


_ROLE_RANK = {r: i for i, r in enumerate(Role)}
_SHARED = frozenset([Role.RUNNING, Role.RUNNING_NEXT, Role.FOLDED, Role.PARAM, Role.EMA, Role.EMA_FP16])
_STATE = _SHARED | {Role.AMP_COPY, Role.MOMENT1, Role.MOMENT2, Role.TRUST_RATIO, Role.SCALAR, Role.RESULT_SUM}
_SCRATCH = frozenset([Role.ACTIVATION, Role.MASK, Role.TEMP])


@dataclass(frozen=True, slots=True)
class Group:
    """A named set of tensors within a role, with the traits range ops select by.

    Parameter groups (declared by layer kinds):
    ``decayed``: weight decay and LARS apply (else bias-like: no decay, no trust ratio);
    ``amp_copy``: under AMP compute reads an FP16 working copy (role AMP_COPY), cast from the master;
    ``fp16_grad``: under AMP the backward writes an FP16 gradient (GRAD_FP16), cast into the FP32 one;
    ``early``: its gradients are complete before the first layer's backward (the first layer never owns one),
    so data-parallel training reduces them while that backward runs;
    ``norm``: a normalisation layer's scale or shift (what the parameter-group selector "norm" picks).
    ``order``: the position among groups of equal traits (inputs, dtypes, statistics); then the name.
    """

    name: str
    decayed: bool = False
    amp_copy: bool = False
    fp16_grad: bool = False
    early: bool = False
    norm: bool = False
    order: int = 0

    def sort_key(self) -> tuple:
        # Early groups last, next to RESULT (one collective reduces them and the step result); before them
        # bias-like groups without then with a working copy, decayed ones with then without, so the decayed, the
        # bias-like and (without early groups in between) the amp_copy groups are one run each.
        amp_pos = (0 if self.amp_copy else 1) if self.decayed else (1 if self.amp_copy else 0)
        return (self.early, self.decayed, amp_pos, self.fp16_grad, self.order, self.name)

    def traits(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.type in ("bool", bool)}


PLAIN = Group("")
_DTYPE_ORDER = (DType.FP32, DType.FP16, DType.BF16, DType.INT32, DType.INT8, DType.UINT8)


def dtype_group(dtype: DType) -> Group:
    """The group of one element type in a role kept per dtype (scalars, temporaries, activations)."""
    return Group(dtype.value, order=_DTYPE_ORDER.index(dtype))


@dataclass(frozen=True, slots=True)
class Region:
    role: Role
    group: Group = PLAIN

    @property
    def name(self) -> str:
        return f"{self.role.value}/{self.group.name}" if self.group.name else self.role.value

    def sort_key(self) -> tuple:
        return (self.role.rank, self.group.sort_key())

    def __lt__(self, other: Region) -> bool:
        return self.sort_key() < other.sort_key()

    def __repr__(self) -> str:
        return f"Region({self.name})"


_TRAITS = ("decayed", "amp_copy", "fp16_grad", "early")


@dataclass(frozen=True, slots=True)
class Select:
    """The regions of one role whose group has the given traits (None: either), or the one group named."""

    role: Role
    decayed: bool | None = None
    amp_copy: bool | None = None
    fp16_grad: bool | None = None
    early: bool | None = None
    group: str | None = None

    def matches(self, r: Region) -> bool:
        return r.role is self.role and (self.group is None or r.group.name == self.group) and all(
            getattr(r.group, t) == getattr(self, t) for t in _TRAITS if getattr(self, t) is not None)

    def __repr__(self) -> str:
        sel = [t if getattr(self, t) else f"not {t}" for t in _TRAITS if getattr(self, t) is not None]
        sel += [f"group {self.group}"] if self.group is not None else []
        return f"{self.role.value}[{', '.join(sel)}]" if sel else self.role.value


@dataclass(frozen=True, slots=True)
class Span:
    """The bytes of every region some part selects; the layout requires them to be one contiguous run."""

    parts: tuple[Select, ...]

    @classmethod
    def of(cls, role: Role, group: str | None = None, **traits: bool) -> Span:
        """The regions of ``role`` with the given traits, or of the one group named ``group``."""
        unknown = sorted(set(traits) - set(_TRAITS))
        if unknown:
            raise TypeError(f"unknown group trait(s) {unknown}; traits are {list(_TRAITS)}")
        return cls((Select(role, group=group, **traits),))

    def __add__(self, other: Span) -> Span:
        return Span(self.parts + other.parts)

    def matches(self, r: Region) -> bool:
        return any(p.matches(r) for p in self.parts)

    def __repr__(self) -> str:
        return "<" + " + ".join(repr(p) for p in self.parts) + ">"
