"""TensorTable: every tensor of a plan by key, with its shape in each variant and its slot.

A tensor's slot is the largest ``slot_bytes_for`` over the variants of the timeline that uses it (train
variants for training tensors, val variants for inference tensors, all for the rest), so one placement
serves every variant: variants differ only in the shapes their op calls carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region
from tr.core.shape import Shape
from tr.graph.layers.base import ANY, INF, PARAM, POOLED, STATE, TRAIN, Decl, Init
from tr.tensor.dtensor import slot_bytes_for
from tr.tensor.program import VariantInfo


@dataclass
class TensorInfo:
    key: str
    region: Region
    dtype: DType
    pad_c: int
    cls: str
    phase: str
    order: int
    layer: int = -1
    init: Init | None = None
    twin: str = ""
    shapes: dict[str, Shape] = field(default_factory=dict)
    slot: int = 0
    canonical: Shape | None = None

    @property
    def pooled(self) -> bool:
        return self.cls in POOLED


class TensorTable:
    def __init__(self, variants: dict[str, VariantInfo]) -> None:
        self.variants = variants
        self.infos: dict[str, TensorInfo] = {}
        self._phase_variants = {
            TRAIN: [v for v, i in variants.items() if i.train],
            INF: [v for v, i in variants.items() if not i.train],
            ANY: list(variants),
        }

    def __contains__(self, key: str) -> bool:
        return key in self.infos

    def __getitem__(self, key: str) -> TensorInfo:
        return self.infos[key]

    def __len__(self) -> int:
        return len(self.infos)

    def phase_variants(self, phase: str) -> list[str]:
        return self._phase_variants[phase]

    def add(self, key: str, variant: str, shape: Shape, region: Region, dtype: DType, *, pad_c: int = 1,
            cls: str, phase: str, layer: int = -1, init: Init | None = None, twin: str = "") -> None:
        info = self.infos.get(key)
        if info is None:
            info = TensorInfo(key, region, dtype, pad_c, cls, phase, len(self.infos), layer, init, twin)
            self.infos[key] = info
        elif (info.region, info.dtype, info.cls) != (region, dtype, cls):
            raise CompileError(f"tensor {key} is declared differently in variant {variant}: "
                               f"{region.name}/{dtype.name}/{cls} vs {info.region.name}/{info.dtype.name}/{info.cls}")
        info.shapes[variant] = shape

    def add_decl(self, prefix: str, d: Decl, variant: str, layer: int) -> None:
        self.add(prefix + d.local, variant, d.shape, d.region, d.dtype, pad_c=d.pad_c, cls=d.cls, phase=d.phase,
                 layer=layer, init=d.init, twin=d.twin)

    def finish(self, used: set[str]) -> list[TensorInfo]:
        """Drop pooled tensors no op uses; compute slots; check that persistent tensors keep one shape."""
        out = []
        for info in self.infos.values():
            if info.pooled and info.key not in used:
                continue
            vs = [v for v in self._phase_variants[info.phase] if v in info.shapes]
            if not vs:
                raise CompileError(f"tensor {info.key} has no shape in any {info.phase} variant")
            if info.cls in (PARAM, STATE):
                shapes = {info.shapes[v] for v in self.variants if v in info.shapes}
                if len(shapes) > 1:
                    where = ", ".join(f"{v}: {info.shapes[v]}" for v in self.variants if v in info.shapes)
                    raise CompileError(
                        f"layer {info.layer}: {info.key} would change shape between variants ({where}); weights "
                        "and statistics must not depend on the batch or resolution (put gap() before the fc, "
                        "or train and validate at one resolution)")
            best = -1
            for v in vs:
                s = slot_bytes_for(info.shapes[v], info.dtype, info.pad_c)
                if s > best:
                    best, info.canonical = s, info.shapes[v]
            info.slot = best
            out.append(info)
        return out
