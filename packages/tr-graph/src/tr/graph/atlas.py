"""GraphAtlas: the symbolic parts bound to DTensors for each variant (variant x Part).

Only the compute chains (first-layer, deep, inference parts) and the metric accumulation (weighted by
the variant's own batch scalar) depend on the variant; every other part is bound once, to the canonical
tensors, and stored under ``"any"`` (tr.tensor.program.SHAPE_INVARIANT). A per-variant part that comes
out identical in every variant that has it is stored once under ``"any"`` too. Every call carries its
part's label (OpCall.part); tr.graph.steps assembles the parts into steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tr.core.ops import OpCall
from tr.core.shape import Shape
from tr.graph.accumulate import window_result
from tr.graph.graph import ComputationGraph, SymOp, accum_metrics
from tr.graph.steps import INFER_PARTS, TRAIN_PARTS, Part
from tr.tensor.dtensor import DTensor
from tr.tensor.program import SHAPE_INVARIANT, TRAIN_LAST, VAL_LAST, VariantInfo, base_variant

PER_VARIANT = TRAIN_PARTS | INFER_PARTS | {Part.ACCUM_METRICS, Part.ACCUM_RESULT}
Bound = dict[tuple[str, Part], tuple[OpCall, ...]]


def batch_role(v: VariantInfo) -> str:
    name = base_variant(v.name)  # (a progressive side's variants weigh by their kind's batch)
    if v.train:
        return "batch_train_last" if name == TRAIN_LAST else "batch_train"
    return "batch_val_last" if name == VAL_LAST else "batch_val"


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

    def bind(self, ops: Sequence[SymOp], variant: str, part: Part | None = None) -> tuple[OpCall, ...]:
        out = []
        label = part.value if part is not None else ""
        for op in ops:
            args = {k: (self.tensor(v, variant) if isinstance(v, str) else v) for k, v in op.args.items()}
            out.append(OpCall.make(op.op, args, op.attrs, op.layer, op.label, label))
        return tuple(out)

    def build(self, cg: ComputationGraph) -> Bound:
        bound: Bound = {}
        for part in Part:
            if part in PER_VARIANT:
                per: dict[str, tuple[OpCall, ...]] = {}
                for name, info in self.variants.items():
                    if part == Part.ACCUM_METRICS:
                        weight = cg.train_metrics_weight if info.train else None
                        ops = accum_metrics(weight or batch_role(info), info.train)
                    elif part == Part.ACCUM_RESULT:  # gradient accumulation's window means (tr.graph.accumulate)
                        if not (info.train and cg.train_metrics_weight):
                            continue
                        ops = window_result(batch_role(info))
                    elif (part in TRAIN_PARTS) == info.train:
                        ops = cg.ops(part)
                    else:
                        continue
                    if ops:
                        per[name] = self.bind(ops, name, part)
                calls = list(per.values())
                if len(calls) > 1 and all(c == calls[0] for c in calls[1:]):
                    bound[(SHAPE_INVARIANT, part)] = calls[0]
                else:
                    bound.update(((name, part), calls) for name, calls in per.items())
            elif cg.ops(part):
                bound[(SHAPE_INVARIANT, part)] = self.bind(cg.ops(part), SHAPE_INVARIANT, part)
        return bound


def lookup(bound: Bound, variant: str, part: Part) -> tuple[OpCall, ...]:
    """The part's calls bound to ``variant``, or its calls bound once for every variant."""
    got = bound.get((variant, part))
    return got if got is not None else bound.get((SHAPE_INVARIANT, part), ())
