"""The input protocol (issue [20]): how batches reach a plan, declared by the input itself.

A plan reads each training and validation batch from the double-buffered ``data_a/b`` and ``labels_a/b``. How they
are filled is the input's business, and each input is one module that says it through this protocol: the host
pipeline (HostInput below, the default: the batch copied from a host staging buffer), a data set resident in the arena
(tr.graph.resident: indices, the batch gathered and augmented in the step) and JPEG files decoded on the device
(tr.graph.jpeg_input: a geometry table, the decoded regions resampled into the batch). The compiler and the graph
builder call the protocol and know no input by name; ``CompileSpec.input`` holds the plan's (None: the host):

* ``name``: what messages call it; ``check_spec``: refuses a CompileSpec the input cannot feed;
* ``declare_batch``: buffer a's or b's ``data`` (after its labels: the four make the INPUT span);
* ``declare_state``: the input's own tensors (data sets, decode buffers, positions, keys);
* ``first_input``: the key the first layer reads, with any op that makes it at the head of the chain;
* ``transfer``: the ops of buffer a's or b's transfer step;
* ``epoch_parts``: parts of its own (a resident set's validation transfers and per-epoch steps).

Its declarations go through the compiler's ``add`` in the order given, so a plan's layout is a function of the
input's answers alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.memory import Group, Region, Role, dtype_group
from tr.core.shape import Shape
from tr.graph.symop import SymOp, sym_op

if TYPE_CHECKING:
    from tr.graph.spec import CompileSpec
    from tr.graph.steps import Part
    from tr.tensor.program import VariantInfo

# the double-buffered batch: buffer a's labels and data, then buffer b's (one INPUT span)
INPUT_REGIONS = {name: Region(Role.INPUT, Group(name, order=k))
                 for k, name in enumerate(("a_label", "a_data", "b_label", "b_data"))}
RESIDENT = Region(Role.RESIDENT)
INT32_SCALAR = Region(Role.SCALAR, dtype_group(DType.INT32))


class Declare(Protocol):
    """The compiler's declaration of one tensor of the current variant."""

    def __call__(self, key: str, shape: Shape, region: Region, dtype: DType, phase: str = ..., pad: int = ...,
                 init: Any = ...) -> None: ...


@runtime_checkable
class InputPlan(Protocol):
    """What an input declares to the compiler (module docstring)."""

    name: str

    def check_spec(self, spec: CompileSpec) -> None: ...

    def declare_batch(self, spec: CompileSpec, info: VariantInfo, ab: str, add: Declare) -> None: ...

    def declare_state(self, spec: CompileSpec, info: VariantInfo, add: Declare) -> None: ...

    def first_input(self, ab: str, train: bool, sink: list[SymOp]) -> str: ...

    def transfer(self, spec: CompileSpec, ab: str, buf: int) -> list[SymOp]: ...

    def epoch_parts(self, spec: CompileSpec) -> dict[Part, list[SymOp]]: ...


def batch_dtype(spec: CompileSpec) -> tuple[DType, int]:
    """The dtype and channel padding of a batch of images in the arena: AMP's 16-bit type padded to 4 channels,
    else FP32."""
    return (spec.low_dtype, 4) if spec.amp else (DType.FP32, 1)


def declare_images(spec: CompileSpec, info: VariantInfo, ab: str, add: Declare) -> None:
    """``data_{ab}`` as a batch of images of the variant's input shape (a host-fed or device-decoded batch)."""
    dtype, pad = batch_dtype(spec)
    add(f"data_{ab}", spec.variant_input(info), INPUT_REGIONS[f"{ab}_data"], dtype, pad=pad)


def is_input_plan(obj: Any) -> bool:
    """Whether ``obj`` answers the protocol (a name and every method)."""
    return isinstance(obj, InputPlan) and isinstance(obj.name, str)


def refuse_other_sides(spec: CompileSpec, name: str, why: str) -> None:
    """ConfigError unless the plan runs at the samples' own side: no other train or val resolution, no progressive
    resizing (an input made on the device at one side)."""
    if any(r not in (None, spec.input_shape[0]) for r in (spec.train_resolution, spec.val_resolution)):
        raise ConfigError(f"a {name} input {why}: leave the train and val resolutions unset")
    if spec.progressive_resolutions:
        raise ConfigError(f"progressive resizing needs batches the host stages at each epoch's side: a {name} input "
                          "is made at one side")


@dataclass(frozen=True)
class HostInput:
    """The host pipeline's input, the default: each batch is copied from a pinned host staging buffer (tr.data's
    pipeline or an array feeder writes it) into data_a/b and labels_a/b by one h2d_copy."""

    name: str = "host"

    def check_spec(self, spec: CompileSpec) -> None:
        return None

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
