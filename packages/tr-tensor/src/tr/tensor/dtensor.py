"""DTensor: a descriptor of a tensor inside an arena (no memory of its own).

A DTensor is (region, offset, shape, dtype, slot_bytes). ``offset`` is -1 until the MemoryPlan is
finalised. The CPU backend views the arena with compact NHWC strides; the CUDA backend may pad the channel
dimension to ``pad_c`` (8 for FP16 features, so vectorised kernels and tensor cores see aligned rows).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tr.core.align import align_up, align_up_256
from tr.core.dtype import DType
from tr.core.errors import ShapeError
from tr.core.memory import Region
from tr.core.shape import Shape

SLOT_GUARD_BYTES = 16  # the seed's tail guard, kept so slots of equal shape compare equal with the seed


def slot_bytes_for(shape: Shape, dtype: DType, pad_c: int = 1) -> int:
    """Bytes reserved for a tensor; an FP32/INT32 slot is exactly twice the FP16 slot of the same shape.

    The factor of two lets one element-wise kernel cast a whole FP32 region range into its FP16 twin range
    (and back): element k of the FP32 range lines up with element k of the FP16 range.
    """
    padded_c = align_up(shape.c, pad_c)
    elems = shape.n * shape.h * shape.w * padded_c
    if dtype.itemsize == 4:
        return 2 * align_up_256(elems * 2 + SLOT_GUARD_BYTES)
    return align_up_256(elems * dtype.itemsize + SLOT_GUARD_BYTES)


@dataclass(frozen=True, slots=True)
class DTensor:
    id: int
    name: str
    region: Region
    shape: Shape
    dtype: DType
    slot_bytes: int
    offset: int = -1
    pad_c: int = 1

    def __post_init__(self) -> None:
        if self.slot_bytes < 0:
            raise ShapeError(f"DTensor {self.name}: slot_bytes must be >= 0, got {self.slot_bytes}")
        if self.slot_bytes and self.slot_bytes < self.nbytes:
            raise ShapeError(
                f"DTensor {self.name}: slot of {self.slot_bytes} B cannot hold {self.shape} {self.dtype.name} "
                f"({self.nbytes} B)"
            )

    @property
    def numel(self) -> int:
        return self.shape.numel()

    @property
    def nbytes(self) -> int:
        """Bytes of the compact (CPU) layout."""
        return self.numel * self.dtype.itemsize

    @property
    def padded_c(self) -> int:
        return align_up(self.shape.c, self.pad_c)

    @property
    def cpu_strides(self) -> tuple[int, int, int, int]:
        """Element strides (n, h, w, c) of the compact NHWC layout."""
        n, h, w, c = self.shape.dims
        return (h * w * c, w * c, c, 1)

    @property
    def device_strides(self) -> tuple[int, int, int, int]:
        """Element strides (n, h, w, c) with the channel dimension padded to ``pad_c``."""
        n, h, w, _ = self.shape.dims
        pc = self.padded_c
        return (h * w * pc, w * pc, pc, 1)

    @property
    def allocated(self) -> bool:
        """False for a tensor given no bytes (slot_bytes 0)."""
        return self.slot_bytes > 0

    @property
    def placed(self) -> bool:
        return self.offset >= 0

    @property
    def end(self) -> int:
        return self.offset + self.slot_bytes

    def at(self, offset: int) -> DTensor:
        if offset % 256:
            raise ShapeError(f"DTensor {self.name}: offset {offset} is not 256-byte aligned")
        return replace(self, offset=offset)

    def reshaped(self, shape: Shape) -> DTensor:
        """Same slot, another shape of equal or smaller size (e.g. the last batch of an epoch)."""
        t = replace(self, shape=shape)
        return t

    def __repr__(self) -> str:
        where = f"@{self.offset}" if self.placed else "@?"
        return f"DTensor#{self.id}({self.name}, {self.region.name}{where}, {self.shape}, {self.dtype.name})"
