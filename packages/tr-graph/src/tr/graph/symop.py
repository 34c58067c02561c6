"""SymOp: one op call of a ComputationGraph part, its tensors named by key (tr.graph.graph binds nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SymOp:
    op: str
    args: dict[str, Any]  # argument name -> tensor key, Span or None
    attrs: dict[str, Any] = field(default_factory=dict)
    layer: int = -1
    label: str = ""


def sym_op(op: str, attrs: dict[str, Any] | None = None, label: str = "", layer: int = -1, **args: Any) -> SymOp:
    """A SymOp with its tensor arguments as keywords."""
    return SymOp(op, args, attrs or {}, layer, label)
