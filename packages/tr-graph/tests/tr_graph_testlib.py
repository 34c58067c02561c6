"""Helpers shared by the tr-graph tests (imported as a module: conftest puts this folder on sys.path)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import MappingProxyType

from tr.core.ops import OpCall
from tr.graph.spec import CompileSpec
from tr.tensor.dtensor import DTensor
from tr.tensor.program import Program

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


def relocate(program: Program, moves: dict[int, int]) -> Program:
    """The same program with some tensors moved to other offsets (to plant bad plans)."""

    def fix(v):
        if isinstance(v, DTensor) and v.id in moves:
            return dataclasses.replace(v, offset=moves[v.id])
        return v

    graphs = {k: tuple(OpCall(c.op, MappingProxyType({a: fix(v) for a, v in c.args.items()}), c.attrs, c.layer,
                              c.label) for c in calls) for k, calls in program.graphs.items()}
    return dataclasses.replace(program, graphs=graphs, tensors=tuple(fix(t) for t in program.tensors))


def by_name(program: Program) -> dict[str, DTensor]:
    return {t.name: t for t in program.tensors}
