"""``@cuda_op(name)``: register a builder as the CUDA implementation of a catalogued op."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tr.backend.registry import register_op

F = TypeVar("F", bound=Callable)


def cuda_op(name: str) -> Callable[[F], F]:
    return register_op("cuda", name)
