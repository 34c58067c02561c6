"""What a native op takes, typed: the declaration every native CUDA op's argument record is generated from.

A :class:`NativeOp` names the op (``scale_fwd``: the C++ factory of that name in csrc/ops/<family>.cu) and its
fields in order. tools/gen_native_ops.py turns the declarations into one C++ struct per op
(csrc/ops/args/<family>.hpp: ``ScaleFwdArgs``, which the factory takes) and its nanobind class
(``tr.backend._native.ScaleFwdArgs``: keyword-only, every field checked against its type when the record is
made). A builder fills a record by keyword (:meth:`tr.backend.cuda.binder.CudaBinder.make`): a misspelt,
missing or mistyped field fails there, naming the op and the field, before any device is touched.

Field types (the C++ member; what Python passes):
- ``tensor`` / ``tensor?``: ``Dev`` (a device address and its dtype code; ``CudaBinder.dev``); ``?``: may be
  None (then the member's pointer is null and ``if (a.dx)`` is false).
- ``ptr`` / ``ptr?``: ``void*``; an int address (pinned host memory, a handle); ``?``: may be None or 0.
- ``i64``, ``f64``, ``bool``: ``std::int64_t``, ``double``, ``bool``; a bool field takes only True or False.
- ``dt``, ``act``, ``bn_act``, ``bn_mask``, ``opt_rule``, ``onehot_loss``, ``conv_engine``: the enums of
  csrc/ops/codes.hpp (DT, ActKind, BnAct, BnMask, OptRule, OneHotLoss, ConvEngine), generated from tr.core's
  tables; an int code from tr.core, refused when it is not one of the enum's.
- ``i64s``, ``f64s``: ``std::vector<std::int64_t>``, ``std::vector<double>``; ``extern_params``:
  ``std::vector<ExternParam>``, a sequence of codes of tr.core.ops.EXTERN_PARAM_CODES, each checked.
A scalar field may have a default (its keyword may then be left out).
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tr.core.errors import ConfigError

# a code of one of codes.hpp's enums
ENUMS = ("dt", "act", "bn_act", "bn_mask", "opt_rule", "onehot_loss", "conv_engine")
FIELD_TYPES = ("tensor", "tensor?", "ptr", "ptr?", "i64", "f64", "bool", *ENUMS, "i64s", "f64s", "extern_params")
# names the records or their generated bindings use themselves
RESERVED = ("op", "fields", "field_types", "self", "rec")
SCALARS = ("i64", "f64", "bool", *ENUMS)


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # one of FIELD_TYPES
    doc: str
    default: Any = None  # scalars only; None: the keyword is required

    @property
    def optional(self) -> bool:
        return self.type.endswith("?") or self.default is not None


@dataclass(frozen=True)
class NativeOp:
    name: str  # the factory's name, snake_case
    doc: str
    fields: tuple[Field, ...]

    @property
    def cls(self) -> str:
        """The C++ struct and the Python class: ``scale_fwd`` -> ``ScaleFwdArgs``."""
        return "".join(part.capitalize() for part in self.name.split("_")) + "Args"

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def check(self, values: Mapping[str, Any]) -> None:
        """ConfigError naming the op and the field for an unknown or missing field or a value not of its
        field's type (the extension checks again, and the ranges of enum codes)."""
        names = [f.name for f in self.fields]
        for name in values:
            if name not in names:
                near = difflib.get_close_matches(name, names, n=1)
                raise ConfigError(f"native op {self.name} has no field {name!r}"
                                  + (f" (did you mean {near[0]!r}?)" if near else f"; its fields: {names}"))
        for f in self.fields:
            if f.name not in values:
                if f.optional:
                    continue
                raise ConfigError(f"native op {self.name}: field {f.name!r} ({f.type}: {f.doc}) is missing")
            if not _fits(f.type, values[f.name]):
                v = values[f.name]
                raise ConfigError(f"native op {self.name}: field {f.name!r} takes {_WHAT[f.type]}, got {v!r} "
                                  f"({type(v).__name__})")


_WHAT = {"tensor": "a Dev", "tensor?": "a Dev or None", "ptr": "an int address", "ptr?": "an int address or None",
         "i64": "an int", "f64": "a float", "bool": "True or False", "dt": "a dtype code (int)",
         "act": "an activation code (int)", "bn_act": "a BN activation code (int)", "bn_mask": "a BN mask code (int)",
         "opt_rule": "an optimizer rule code (int)", "onehot_loss": "a one-hot loss code (int)",
         "conv_engine": "a convolution engine code (int)",
         "i64s": "a sequence of ints", "f64s": "a sequence of floats",
         "extern_params": "a sequence of parameter type codes (ints)"}


def _int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _fits(kind: str, v: Any) -> bool:
    if kind.endswith("?") and v is None:
        return True
    if kind in ("tensor", "tensor?"):
        return type(v).__name__ == "Dev"
    if kind in ("i64", "ptr", "ptr?", *ENUMS):
        return _int(v)
    if kind == "f64":
        return isinstance(v, numbers.Real) and not isinstance(v, bool)
    if kind == "bool":
        return isinstance(v, bool)
    if kind in ("i64s", "extern_params"):
        return isinstance(v, Sequence) and all(_int(x) for x in v)
    if kind == "f64s":
        return isinstance(v, Sequence) and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v)
    return False


def native_op(name: str, doc: str, *fields: Field) -> NativeOp:
    if not name.isidentifier() or name != name.lower():
        raise ValueError(f"native op name {name!r} must be a snake_case identifier")
    seen: set[str] = set()
    for f in fields:
        if f.type not in FIELD_TYPES:
            raise ValueError(f"native op {name}: field {f.name!r} has type {f.type!r}, not one of {FIELD_TYPES}")
        if not f.name.isidentifier() or f.name in seen or f.name in RESERVED:
            raise ValueError(f"native op {name}: field name {f.name!r} is not a fresh identifier")
        if f.default is not None and f.type not in SCALARS:
            raise ValueError(f"native op {name}: field {f.name!r} of type {f.type} cannot have a default")
        seen.add(f.name)
    return NativeOp(name, doc, tuple(fields))


def tensor(name: str, doc: str, optional: bool = False) -> Field:
    return Field(name, "tensor?" if optional else "tensor", doc)


def ptr(name: str, doc: str, optional: bool = False) -> Field:
    return Field(name, "ptr?" if optional else "ptr", doc)


def i64(name: str, doc: str, default: int | None = None) -> Field:
    return Field(name, "i64", doc, default)


def f64(name: str, doc: str, default: float | None = None) -> Field:
    return Field(name, "f64", doc, default)


def flag(name: str, doc: str, default: bool | None = None) -> Field:
    return Field(name, "bool", doc, default)


def code(name: str, enum: str, doc: str) -> Field:
    """A field of one of codes.hpp's enums (ENUMS)."""
    if enum not in ENUMS:
        raise ValueError(f"field {name!r}: {enum!r} is not one of the enums {ENUMS}")
    return Field(name, enum, doc)


def i64s(name: str, doc: str) -> Field:
    return Field(name, "i64s", doc)


def f64s(name: str, doc: str) -> Field:
    return Field(name, "f64s", doc)


def extern_params(name: str, doc: str) -> Field:
    return Field(name, "extern_params", doc)
