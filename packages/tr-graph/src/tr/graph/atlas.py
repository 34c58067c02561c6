"""GraphAtlas: the symbolic graphs bound to DTensors for each variant (variant x GraphId).

Only the compute chains (first-layer, deep, inference graphs) and the metric accumulation (weighted by
the variant's own batch scalar) depend on the variant; every other graph is bound once, to the canonical
tensors, and stored under ``"any"`` (tr.tensor.program.SHAPE_INVARIANT). A per-variant graph that comes
out identical in every variant that has it is stored once under ``"any"`` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tr.core.graph_id import GraphId
from tr.core.ops import OpCall
from tr.core.shape import Shape
from tr.graph.graph import ComputationGraph, SymOp, accum_metrics
from tr.tensor.dtensor import DTensor
from tr.tensor.program import SHAPE_INVARIANT, TRAIN_LAST, TRAIN_LOW_LAST, VAL_LAST, VariantInfo

TRAIN_GRAPHS = (GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_FWD_B, GraphId.DEEP_FWD_BWD,
                GraphId.FIRST_LAYER_BWD_A, GraphId.FIRST_LAYER_BWD_B)
INF_GRAPHS = (GraphId.INF_MAIN_A, GraphId.INF_MAIN_B, GraphId.INF_EMA_A, GraphId.INF_EMA_B)
PER_VARIANT = frozenset(TRAIN_GRAPHS + INF_GRAPHS + (GraphId.ACCUM_METRICS,))


def batch_role(v: VariantInfo) -> str:
    if v.train:
        return "batch_train_last" if v.name in (TRAIN_LAST, TRAIN_LOW_LAST) else "batch_train"
    return "batch_val_last" if v.name == VAL_LAST else "batch_val"


class GraphAtlas:
    def __init__(self, variants: Mapping[str, VariantInfo], tensors: Mapping[str, DTensor],
                 shapes: Mapping[str, Mapping[str, Shape]]) -> None:
        self.variants = variants
        self.tensors = tensors  # key -> canonical DTensor
        self.shapes = shapes  # key -> variant -> shape
        self._bound: dict[str, dict[str, DTensor]] = {}

    def tensor(self, key: str, variant: str) -> DTensor:
        cache = self._bound.setdefault(variant, {})
        t = cache.get(key)
        if t is None:
            t = self.tensors[key]
            s = self.shapes[key].get(variant) if variant != SHAPE_INVARIANT else None
            if s is not None and s != t.shape:
                t = t.reshaped(s)
            cache[key] = t
        return t

    def bind(self, ops: Sequence[SymOp], variant: str) -> tuple[OpCall, ...]:
        out = []
        for op in ops:
            args = {k: (self.tensor(v, variant) if isinstance(v, str) else v) for k, v in op.args.items()}
            out.append(OpCall.make(op.op, args, op.attrs, op.layer, op.label))
        return tuple(out)

    def build(self, cg: ComputationGraph) -> dict[tuple[str, GraphId], tuple[OpCall, ...]]:
        graphs: dict[tuple[str, GraphId], tuple[OpCall, ...]] = {}
        for gid in GraphId:
            if gid in PER_VARIANT:
                per: dict[str, tuple[OpCall, ...]] = {}
                for name, info in self.variants.items():
                    if gid == GraphId.ACCUM_METRICS:
                        ops = accum_metrics(batch_role(info), info.train)
                    elif (gid in TRAIN_GRAPHS) == info.train:
                        ops = cg.ops(gid)
                    else:
                        continue
                    if ops:
                        per[name] = self.bind(ops, name)
                calls = list(per.values())
                if len(calls) > 1 and all(c == calls[0] for c in calls[1:]):
                    graphs[(SHAPE_INVARIANT, gid)] = calls[0]
                else:
                    graphs.update(((name, gid), calls) for name, calls in per.items())
            elif cg.ops(gid):
                graphs[(SHAPE_INVARIANT, gid)] = self.bind(cg.ops(gid), SHAPE_INVARIANT)
        return graphs
