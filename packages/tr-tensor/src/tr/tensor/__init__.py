"""tr.tensor: the host Tensor container, the DTensor arena descriptor and the compiled Program."""

from tr.tensor.dtensor import DTensor, slot_bytes_for
from tr.tensor.layout import ArenaLayout
from tr.tensor.program import SHAPE_INVARIANT, Branch, InitSpec, Program, Step, VariantInfo
from tr.tensor.tensor import Tensor, load_safetensors, load_tsr, save_safetensors

__all__ = [
    "SHAPE_INVARIANT", "Branch", "InitSpec", "Program", "Step", "VariantInfo",
    "DTensor", "slot_bytes_for", "ArenaLayout", "Tensor", "load_safetensors", "load_tsr", "save_safetensors",
]
