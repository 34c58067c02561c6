"""The typed arguments of every native CUDA op, declared once per op family (one module per csrc/ops/<family>
file), from which tools/gen_native_ops.py generates the C++ structs and their nanobind classes (see _types)."""

from __future__ import annotations

import importlib

from tr.backend.cuda.signatures._types import NativeOp

# the op families, as csrc/ops names their files; each module's OPS holds its native ops
FAMILIES = ("accum", "activation", "attention", "attention_sdpa", "augment", "bn", "bn_pool", "clip", "collective",
            "conv", "copy", "drop_path", "dropout", "extern_kernel", "fc", "image", "layernorm", "mixup",
            "onehot_loss",
            "optimizer", "pool", "range", "resident", "scalar", "scale", "softmax_ce", "tokens", "transfer")


def all_ops() -> list[tuple[str, NativeOp]]:
    """(family, native op) for every declared op, families in FAMILIES' order; names are unique."""
    out: list[tuple[str, NativeOp]] = []
    seen: dict[str, str] = {}
    for family in FAMILIES:
        module = importlib.import_module(f"{__name__}.{family}")
        for op in module.OPS:
            if op.name in seen:
                raise ValueError(f"native op {op.name} is declared by {seen[op.name]} and {family}")
            seen[op.name] = family
            out.append((family, op))
    return out
