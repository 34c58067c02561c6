"""Device-resident input: the raw data sets live in the arena and each batch is augmented inside the step.

A plan compiled with ``CompileSpec.input`` a ResidentInput differs from a host-fed one only at its head:

* ``train_set`` / ``val_set``: the raw uint8 images (N, H, W, C) in role RESIDENT, written once after
  allocation (the task does it);
* ``train_labels`` / ``val_labels``: the labels (INT32), also resident;
* ``data_a`` / ``data_b``: no longer images but the batch's dataset indices (INT32 [B]), with ``labels_a/b``
  written on the device by the transfer graphs' ``batch_select`` (training: TRANSFER_A/B, the next B entries
  of ``train_order`` from ``train_pos``; validation: INPUT_VAL_A/B, positions ``val_pos``..; a data-parallel
  rank, ``data_rank``, takes its positions as tr.data.sharding deals them), so no batch crosses PCIe;
* ``train_order``: the epoch's order, ``shuffle_order`` of ``order_key`` (tr.data.seeds.shuffle_order's seed,
  written once per epoch) in INPUT_TRAIN_BEGIN: the Fisher-Yates permutation tr.data's workers use,
  computed on the device by deterministic reservations (the same permutation, in about 35 parallel rounds for
  60,000 samples; tr/backend/cpu/ops/resident.py); INPUT_VAL_BEGIN restarts ``val_pos``;
* ``aug_key``: the epoch's seed prefix (tr.data.seeds.seed_prefix as one little-endian uint64 in INT32[2]),
  written once per epoch;
* ``aug_x``: the augmented, normalised batch (the plan's input dtype), written by ``augment_affine`` at the
  head of FIRST_FWD_{A,B} (from train_set, with the chain's draws) and of INFER_{A,B} (from val_set,
  normalisation only), and read by the first layer's forward and backward.

So the per-sample draws are a pure function of (seed, epoch, dataset index), like tr.data's workers' (same
streams, same values: tests-integration/test_device_augment.py), independent of the batch size, the batch's
position and the stream timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.shape import Shape
from tr.graph.input_plan import INPUT_REGIONS, INT32_SCALAR, RESIDENT, Declare, batch_dtype, refuse_other_sides
from tr.graph.steps import Part
from tr.graph.symop import SymOp, sym_op

if TYPE_CHECKING:
    from tr.graph.spec import CompileSpec
    from tr.tensor.program import VariantInfo

TRAIN_SET, VAL_SET, KEY, X = "train_set", "val_set", "aug_key", "aug_x"
TRAIN_LABELS, VAL_LABELS, TRAIN_ORDER = "train_labels", "val_labels", "train_order"
TRAIN_POS, VAL_POS, ORDER_KEY, DATA_RANK = "train_pos", "val_pos", "order_key", "data_rank"


@dataclass(frozen=True)
class ResidentInput:
    train_samples: int  # samples of train_set (the whole split: a rank reads its share through the indices)
    val_samples: int  # samples of val_set; 0: none (inference then reads train_set)
    image: tuple[int, int, int]  # (H, W, C) of one raw image; the augmented sample has its H, W and >= C channels
    train_attrs: tuple[tuple[str, Any], ...]  # augment_affine's attributes for training (the chain)
    val_attrs: tuple[tuple[str, Any], ...]  # for validation (the normalisation only)
    shuffle: bool = True  # the training order is the epoch's shuffle (else 0..n-1)

    def validate(self, input_shape: tuple[int, int, int]) -> None:
        for name, v in (("train_samples", self.train_samples), ("val_samples", self.val_samples)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "train_samples" else 0):
                raise ConfigError(f"resident input: {name} must be an integer >= {int(name == 'train_samples')}, "
                                  f"got {v!r}")
        (h, w, c), (ih, iw, ic) = self.image, input_shape
        if (h, w) != (ih, iw) or ic < c:
            raise ConfigError(f"resident input: the data set's images {tuple(self.image)} (H, W, C) do not give the "
                              f"plan's input {tuple(input_shape)}: the device chain keeps the image size (and may "
                              "only pad the channels)")

    @property
    def val_source(self) -> str:
        return VAL_SET if self.val_samples else TRAIN_SET

    # --- the input protocol (tr.graph.input_plan) ---------------------------------------------------------------
    name = "device-resident"

    def check_spec(self, spec: CompileSpec) -> None:
        self.validate(spec.input_shape)
        refuse_other_sides(spec, "device-resident", "is augmented at the images' own size")

    def declare_batch(self, spec: CompileSpec, info: VariantInfo, ab: str, add: Declare) -> None:
        # the batch's dataset indices; the images are gathered from the resident set
        add(f"data_{ab}", Shape(info.batch, 1, 1, 1), INPUT_REGIONS[f"{ab}_data"], DType.INT32)

    def declare_state(self, spec: CompileSpec, info: VariantInfo, add: Declare) -> None:
        h, w, c = self.image
        one = Shape(1, 1, 1, 1)
        add(TRAIN_SET, Shape(self.train_samples, h, w, c), RESIDENT, DType.UINT8)
        if self.val_samples:
            add(VAL_SET, Shape(self.val_samples, h, w, c), RESIDENT, DType.UINT8)
        add(KEY, Shape(1, 1, 1, 2), INT32_SCALAR, DType.INT32)
        dtype, pad = batch_dtype(spec)
        add(X, spec.variant_input(info), INPUT_REGIONS["a_data"], dtype, pad=pad)
        # the labels, the epoch's order and the batch positions: batches are chosen on the device
        add(TRAIN_LABELS, Shape(self.train_samples, 1, 1, 1), RESIDENT, DType.INT32)
        if self.val_samples:
            add(VAL_LABELS, Shape(self.val_samples, 1, 1, 1), RESIDENT, DType.INT32)
        add(TRAIN_ORDER, Shape(self.train_samples, 1, 1, 1), RESIDENT, DType.INT32)
        add(ORDER_KEY, Shape(1, 1, 1, 2), INT32_SCALAR, DType.INT32)
        add(TRAIN_POS, one, INT32_SCALAR, DType.INT32)  # set by shuffle_order
        add(VAL_POS, one, INT32_SCALAR, DType.INT32)  # set by batch_restart
        add(DATA_RANK, one, INT32_SCALAR, DType.INT32)  # the feeder's rank, written at upload

    def first_input(self, ab: str, train: bool, sink: list[SymOp]) -> str:
        """The batch augment_affine gathers from the data set by the transferred indices."""
        src, attrs = (TRAIN_SET, self.train_attrs) if train else (self.val_source, self.val_attrs)
        sink.append(SymOp("augment_affine", {"src": src, "index": f"data_{ab}", "key": KEY, "y": X}, dict(attrs),
                          -1, "the batch from the resident data set" + (", augmented" if train else "")))
        return X

    def transfer(self, spec: CompileSpec, ab: str, buf: int) -> list[SymOp]:
        """The next training batch of the epoch's order, chosen on the device."""
        return [sym_op("batch_select", {"world": spec.world_size, "pad": True}, "the next training batch",
                       order=TRAIN_ORDER, labels_all=TRAIN_LABELS, rank=DATA_RANK, pos=TRAIN_POS, index=f"data_{ab}",
                       labels=f"labels_{ab}")]

    def epoch_parts(self, spec: CompileSpec) -> dict[Part, list[SymOp]]:
        """Validation batches chosen on the device, the epoch's order, validation from its first batch."""
        val_labels = VAL_LABELS if self.val_samples else TRAIN_LABELS
        parts = {gid: [sym_op("batch_select", {"world": spec.world_size, "pad": False}, "the next validation batch",
                              labels_all=val_labels, rank=DATA_RANK, pos=VAL_POS, index=f"data_{ab}",
                              labels=f"labels_{ab}")]
                 for ab, gid in (("a", Part.INPUT_VAL_A), ("b", Part.INPUT_VAL_B))}
        parts[Part.INPUT_TRAIN_BEGIN] = [sym_op("shuffle_order", {"shuffle": self.shuffle}, "the epoch's order",
                                                   key=ORDER_KEY, order=TRAIN_ORDER, pos=TRAIN_POS)]
        parts[Part.INPUT_VAL_BEGIN] = [sym_op("batch_restart", label="validation from its first batch", pos=VAL_POS)]
        return parts
