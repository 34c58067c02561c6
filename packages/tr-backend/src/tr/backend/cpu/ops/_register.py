"""``@cpu_op(name)``: register a builder as the CPU implementation of a catalogued op."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tr.backend.registry import register_op

F = TypeVar("F", bound=Callable)


def cpu_op(name: str) -> Callable[[F], F]:
    return register_op("cpu", name)
