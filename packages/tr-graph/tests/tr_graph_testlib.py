"""Helpers shared by the tr-graph tests (imported as a module: conftest puts this folder on sys.path)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tr.core.ops import OpCall
from tr.graph.atlas import Bound, GraphAtlas
from tr.graph.compiler import compile_program
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part
from tr.tensor.dtensor import DTensor
from tr.tensor.program import Branch, Program, Step

ROOT = Path(__file__).resolve().parents[3]


def load_models():
    spec = importlib.util.spec_from_file_location("tr_examples_models", ROOT / "examples" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tr_examples_models", mod)
    spec.loader.exec_module(mod)
    return mod


def mlp_spec(**kw) -> CompileSpec:
    base = {"input_shape": (28, 28, 1), "num_classes": 10, "batch": 128}
    base.update(kw)
    return CompileSpec(**base)


def part_calls(program: Program, step: str, p: Part) -> tuple[OpCall, ...]:
    """The calls the compiler filed under part ``p`` inside the named step."""
    return program.step(step).calls_of(p.value)


def compile_bound(blueprint: Any, spec: CompileSpec) -> tuple[Program, Bound]:
    """compile_program, plus the parts GraphAtlas.build bound for every variant (before tr.graph.steps assembles
    them into steps)."""
    seen: list[Bound] = []
    build = GraphAtlas.build

    def spy(self: GraphAtlas, cg: Any) -> Bound:
        seen.append(build(self, cg))
        return seen[-1]

    GraphAtlas.build = spy  # type: ignore[method-assign]
    try:
        program = compile_program(blueprint, spec)
    finally:
        GraphAtlas.build = build  # type: ignore[method-assign]
    (bound,) = seen
    return program, bound


def map_calls(program: Program, fn) -> dict[str, Step]:
    """The program's steps with every call replaced by ``fn(step name, call)``, branches and waits kept."""
    return {name: Step(name, tuple(Branch(b.stream, tuple(fn(name, c) for c in b.calls), b.after)
                                   for b in step.branches))
            for name, step in program.steps.items()}


def relocate(program: Program, moves: dict[int, int]) -> Program:
    """The same program with some tensors moved to other offsets (to plant bad plans)."""

    def fix(v):
        if isinstance(v, DTensor) and v.id in moves:
            return dataclasses.replace(v, offset=moves[v.id])
        return v

    steps = map_calls(program, lambda _, c: dataclasses.replace(
        c, args=MappingProxyType({a: fix(v) for a, v in c.args.items()})))
    return dataclasses.replace(program, steps=steps, tensors=tuple(fix(t) for t in program.tensors))


def by_name(program: Program) -> dict[str, DTensor]:
    return {t.name: t for t in program.tensors}
