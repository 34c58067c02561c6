"""The host pipeline's input: each batch is copied from a pinned host staging buffer (tr.data's pipeline or an
array feeder writes it) into ``data_a/b`` and ``labels_a/b`` by one ``h2d_copy`` (tr.graph.input_plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tr.graph.input_plan import Declare, declare_images
from tr.graph.symop import SymOp, sym_op

if TYPE_CHECKING:
    from tr.graph.spec import CompileSpec
    from tr.graph.steps import Part
    from tr.tensor.program import VariantInfo


@dataclass(frozen=True)
class HostInput:
    def declare_batch(self, spec: CompileSpec, info: VariantInfo, ab: str, add: Declare) -> None:
        declare_images(spec, info, ab, add)

    def declare_state(self, spec: CompileSpec, info: VariantInfo, add: Declare) -> None:
        return None

    def first_input(self, ab: str, train: bool, sink: list[SymOp]) -> str:
        return f"data_{ab}"

    def transfer(self, spec: CompileSpec, ab: str, buf: int) -> list[SymOp]:
        return [sym_op("h2d_copy", {"buffer": buf}, labels=f"labels_{ab}", data=f"data_{ab}")]

    def epoch_parts(self, spec: CompileSpec) -> dict[Part, list[SymOp]]:
        return {}


HOST_INPUT = HostInput()
