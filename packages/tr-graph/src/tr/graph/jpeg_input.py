"""JPEG input decoded on the device (issue [13]): the batch arrives as compressed files, not pixels.

A plan compiled with ``CompileSpec.input`` a JpegInput differs from a host-fed one only in what its transfer
graphs do:

* ``jpeg_src``: the decode buffer (UINT8, ``capacity`` bytes, role RESIDENT): each batch's decoded regions
  (RGB u8 HWC at the slots of its geometry table), written before the batch's transfer graph runs, on the
  transfer stream (nvJPEG on CUDA; the feeder's CPU decode on the CPU backend: tr.task.jpeg_feeder);
* ``geom_a`` / ``geom_b``: the batch's geometry table (INT32 [B, 1, 1, IMAGE_GEOM_COLS], tr.core.ops), which the
  host staging buffer holds instead of images;
* TRANSFER_A/B: ``h2d_copy`` of the labels and the geometry, then ``image_resample(jpeg_src, geom) -> data_a/b``:
  the crop, resize, flip, erasing and normalisation of tr.data's chain, so ``data_a/b`` hold the normalised
  batch as in a host-fed plan and the step graphs are the same. With a ColorJitter (``jitter``) the resize
  writes the u8 pixels to ``jpeg_u8`` (UINT8 [B, H, W, 3], role RESIDENT) and ``image_jitter`` does the rest. The
  same transfer graphs serve validation (its chain is in its geometry tables: Resize + CenterCrop; a validation
  sample's jitter has no op switched on).

One decode buffer is enough: batch k+1 is decoded on the transfer stream after batch k's transfer graph, which
is the only reader, and the step reads data_a/b, which stay double-buffered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.ops import IMAGE_GEOM_COLS
from tr.core.shape import Shape
from tr.graph.input_plan import INPUT_REGIONS, RESIDENT, Declare, declare_images, refuse_other_sides
from tr.graph.symop import SymOp, sym_op

if TYPE_CHECKING:
    from tr.graph.spec import CompileSpec
    from tr.graph.steps import Part
    from tr.tensor.program import VariantInfo

JPEG_SRC, GEOM_A, GEOM_B, JPEG_U8 = "jpeg_src", "geom_a", "geom_b", "jpeg_u8"


@dataclass(frozen=True)
class JpegInput:
    capacity: int  # bytes of the decode buffer: any batch's regions fit (tr.data.jpeg_plan.JpegPlanner.capacity)
    attrs: tuple[tuple[str, Any], ...]  # image_resample's attributes (mean, std, erase_value)
    jitter: bool = False  # a ColorJitter after the resize: image_resample writes the u8 pixels to jpeg_u8, image_jitter
    # jitters, flips, erases and normalises them into data_a/b

    def validate(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity < 1:
            raise ConfigError(f"JPEG input: capacity must be an integer >= 1, got {self.capacity!r}")

    # --- the input protocol (tr.graph.input_plan) ---------------------------------------------------------------
    name = "device-decoded JPEG"

    def check_spec(self, spec: CompileSpec) -> None:
        self.validate()
        refuse_other_sides(spec, "JPEG", "is resized to the samples' size by its chain")

    def declare_batch(self, spec: CompileSpec, info: VariantInfo, ab: str, add: Declare) -> None:
        declare_images(spec, info, ab, add)  # the resampled, normalised batch, as a host-fed plan's

    def declare_state(self, spec: CompileSpec, info: VariantInfo, add: Declare) -> None:
        n = info.batch
        add(GEOM_A, Shape(n, 1, 1, IMAGE_GEOM_COLS), INPUT_REGIONS["a_data"], DType.INT32)
        add(GEOM_B, Shape(n, 1, 1, IMAGE_GEOM_COLS), INPUT_REGIONS["b_data"], DType.INT32)
        add(JPEG_SRC, Shape(1, 1, 1, self.capacity), RESIDENT, DType.UINT8)
        if self.jitter:  # the resized pixels before the colour jitter
            x = spec.variant_input(info)
            add(JPEG_U8, Shape(n, x.h, x.w, 3), RESIDENT, DType.UINT8)

    def first_input(self, ab: str, train: bool, sink: list[SymOp]) -> str:
        return f"data_{ab}"

    def transfer(self, spec: CompileSpec, ab: str, buf: int) -> list[SymOp]:
        """The batch's geometry, then its decoded regions into the input."""
        geom = GEOM_A if ab == "a" else GEOM_B
        ops = [sym_op("h2d_copy", {"buffer": buf}, "labels and the batch's geometry", labels=f"labels_{ab}",
                      data=geom)]
        if self.jitter:
            return ops + [sym_op("image_resample", {}, "the decoded batch cropped and resized", src=JPEG_SRC,
                                 geom=geom, y=JPEG_U8),
                          sym_op("image_jitter", dict(self.attrs), "colour-jittered, flipped, normalised", x=JPEG_U8,
                                 geom=geom, y=f"data_{ab}")]
        return ops + [sym_op("image_resample", dict(self.attrs), "the decoded batch cropped, resized, normalised",
                             src=JPEG_SRC, geom=geom, y=f"data_{ab}")]

    def epoch_parts(self, spec: CompileSpec) -> dict[Part, list[SymOp]]:
        return {}
