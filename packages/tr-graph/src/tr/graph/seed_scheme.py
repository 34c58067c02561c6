"""The arena the seed's allocation scheme would need for the same model (for comparison only: not part of
compiling; the CLI and benchmarks/graph_compile.py ask for it with ``seed_arena_bytes``).

The seed (SEED_SYSTEM.md section 4) gives every tensor of its per-layer lists its own slot for the whole
run and reuses nothing across layers; input gradients overwrite the layer input in place and inference
reuses the training outputs, so neither costs bytes. Per layer, at the largest training variant:
- every layer output, including the unfused ones (FC and add outputs before their relu, the conv and
  BN outputs inside a CBR), in the feature dtype;
- relu: INT8 mask; maxpool, dropout: INT8 mask; conv (and CBR): per-channel sum and square-sum (FP32);
  BN (and CBR): saved mean and inverse std (FP32); GAP: an input-sized gradient slot;
- an FC that reads [N,H,W,C] with H*W > 1 and C % 8 != 0 gets a flatten output first (the seed's rule).
Parameters, their gradients and moments, statistics, inputs and scalars are laid out as ours. The seed
lists a few more tensors (conv gradient slots, loss partials), so this is a lower bound for the seed.
"""

from __future__ import annotations

from collections.abc import Mapping

from tr.core.dtype import DType
from tr.core.shape import Shape
from tr.graph.archplan import ArchPlan
from tr.graph.layers import KINDS
from tr.graph.passes import infer_shapes
from tr.graph.spec import CompileSpec
from tr.tensor.dtensor import slot_bytes_for
from tr.tensor.program import Program


def seed_arena_bytes(arch: ArchPlan, spec: CompileSpec, program: Program) -> int:
    """The seed's arena for ``program`` (compiled from ``arch`` under ``spec``): our fixed slots (parameters,
    gradients, moments, statistics, inputs, scalars) plus the seed scheme's per-layer activation slots."""
    variants = spec.variants()
    train = {v: infer_shapes(arch.layers, spec.variant_input(info)) for v, info in variants.items() if info.train}
    pooled = seed_pooled_bytes(arch, train, spec.amp, {v: spec.variant_input(variants[v]) for v in train})
    m = program.meta
    return m["arena_bytes"] - m["pooled_bytes"] + pooled


def seed_pooled_bytes(arch: ArchPlan, train_shapes: Mapping[str, Mapping[int, Shape]], amp: bool,
                      input_of: Mapping[str, Shape]) -> int:
    """Bytes of the seed's per-layer activation tensors; ``train_shapes``: variant -> layer -> shape."""
    fdt, fpad = (DType.FP16, 8) if amp else (DType.FP32, 1)

    def feat(s: Shape) -> int:
        return slot_bytes_for(s, fdt, fpad)

    def mask(s: Shape) -> int:
        return slot_bytes_for(s, DType.INT8, 8)

    def stat(c: int) -> int:
        return slot_bytes_for(Shape(1, 1, 1, c), DType.FP32)

    total = 0
    for i, L in enumerate(arch.layers):
        if KINDS[L.kind].loss:
            continue
        best = 0
        for v, shapes in train_shapes.items():
            y = shapes[i]
            x = input_of[v] if L.inputs[0] < 0 else shapes[L.inputs[0]]
            b = feat(y)
            if L.kind == "fc":
                if x.h * x.w > 1 and x.c % 8:
                    b += feat(Shape(x.n, 1, 1, x.per_sample()))
                if L.params.get("activation"):
                    b += feat(y) + mask(y)
            elif L.kind == "add" and L.params.get("activation"):
                b += feat(y) + mask(y)
            elif L.kind == "conv":
                b += 2 * stat(y.c)
            elif L.kind in ("bn1d", "bn2d"):
                b += 2 * stat(y.c)
            elif L.kind == "cbr":
                b += 2 * feat(y) + mask(y) + 4 * stat(y.c)
            elif L.kind == "act" and L.params["kind"] == "relu":
                b += mask(y)
            elif L.kind in ("maxpool", "dropout"):
                b += mask(y)
            elif L.kind == "gap":
                b += feat(x)
            best = max(best, b)
        total += best
    return total
