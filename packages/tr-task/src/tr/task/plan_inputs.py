"""What a compiled plan takes from the settings, the BluePrint, the optimizer and the data, checked against each
other.

Every value the user sets either reaches the CompileSpec or is refused here, before anything is allocated:
the BluePrint's ``input_shape`` and ``num_classes``, ``num_classes()``, and the resolutions of
GLOBAL_SETTING. The data pipeline delivers one sample shape for training and validation (one
TransferStation, made by the transforms), so a resolution is the side of the samples the model is compiled
for: the data must deliver it, and a plan whose training and validation sides differ cannot be fed.
"""

from __future__ import annotations

from typing import Any

from tr.core.dtype import DType
from tr.core.errors import CompileError, ConfigError
from tr.core.settings import Settings
from tr.data.fused import out_dtype


def num_classes(explicit: int | None, blueprint: Any, data_classes: int | None) -> int:
    """The class count of the plan: num_classes(), else the BluePrint's, else the data's. Two that are given
    must agree, and the model must have at least the data's classes (a label would index past the logits)."""
    declared = getattr(blueprint, "num_classes", None)
    if explicit is not None and declared is not None and explicit != declared:
        raise ConfigError(f"num_classes({explicit}) differs from the BluePrint's num_classes={declared}")
    n = explicit or declared or data_classes
    if n is None:
        raise CompileError("compile(): the number of classes is unknown; call num_classes(n) or give the "
                           "BluePrint num_classes=")
    if data_classes is not None and n < data_classes:
        raise ConfigError(f"the model is compiled for {n} classes, but the data has {data_classes}")
    return n


def input_shape(blueprint: Any, sample_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """The data's (H, W, C), which a BluePrint that declares ``input_shape`` must match."""
    shape = tuple(int(v) for v in sample_shape)
    declared = getattr(blueprint, "input_shape", None)
    if declared is not None and tuple(declared) != shape:
        raise ConfigError(f"the BluePrint's input_shape={tuple(declared)} (H, W, C) differs from the data's "
                          f"samples {shape}")
    return shape  # type: ignore[return-value]


def resolutions(s: Settings, sample_shape: tuple[int, int, int], validates: bool) -> dict[str, int | None]:
    """CompileSpec's train_resolution and val_resolution from the settings; ConfigError when the data does not
    deliver samples of that side (the transforms decide it: Resize, CenterCrop, RandomResizedCrop, ...)."""
    h, w = int(sample_shape[0]), int(sample_shape[1])
    asked = [("input_resolution", s.input_res), ("train_resolution", s.train_res_end)]
    if validates:
        asked.append(("val_resolution", s.val_res))
    ramp = s.res_ramp
    if ramp is not None and (h, w) != (ramp.max_res, ramp.max_res):
        past = "grows past" if ramp.max_res > min(h, w) else "ends below"
        raise ConfigError(f"{ramp.describe()} {past} the compiled maximum: the data's transforms make {h}x{w} samples "
                          f"(the side the plan, its buffers and validation are at); the schedule must end at it: "
                          f"give max_res {h} or end the transforms in a {ramp.max_res}x{ramp.max_res} crop or resize")
    for name, side in asked:
        if side and (h, w) != (side, side):
            raise ConfigError(f"{name}({side}) asks for {side}x{side} samples, but the data delivers {h}x{w}: end the "
                              f"transforms in a {side}x{side} crop or resize, or leave {name} out")
    train = s.train_res_end or s.input_res or None
    return {"train_resolution": train, "val_resolution": (s.val_res or train) if validates else None}


def train_sides(s: Settings, epochs: int, feeder: Any) -> tuple[int, ...]:
    """Progressive resizing: every epoch's training side (tr.core.resolution), each lower one checked against the
    feeder's data now (its train_side; then back to the final side); () without a schedule."""
    if s.res_ramp is None:
        return ()
    sides = s.res_ramp.schedule(epochs)
    for side in sorted(set(sides)):  # (the final side last: what the feeder is left at)
        feeder.train_side(side)
    return sides


def staging(s: Settings, feeder: Any) -> None:
    """A feeder that stages samples (not a resident set's indices nor JPEG geometry) stages them as float32 or as
    AMP's 16-bit type: other 16-bit bits would be read as the plan's type (FP16 bits as BF16 or back)."""
    if feeder.input_plan() is not None:  # a resident set's indices or JPEG geometry: no samples staged
        return
    got, want = feeder.sample_dtype, s.low_dtype or DType.FP32
    if got is not DType.FP32 and got is not want:
        hint = f" or set amp({got.value!r})" if got in (DType.FP16, DType.BF16) else ""
        raise ConfigError(f"{type(feeder).__name__} stages {got.name} samples, but settings.amp is {s.amp_mode!r} "
                          f"(the plan reads {want.name}): give the feeder dtype {out_dtype(want)!r}{hint}")


def optimizer_spec(opt) -> dict[str, Any]:
    """The CompileSpec fields of a tr.algo optimizer config."""
    hp = opt.hyperparams()
    out: dict[str, Any] = {"optimizer": opt.kind.spec_name, "weight_decay": float(hp.get("weight_decay", 0))}
    if "momentum" in hp:
        out["beta1"] = float(hp["momentum"])  # SGD's and LARS's momentum is the first moment's beta1
    if "beta1" in hp:
        out["beta1"], out["beta2"] = float(hp["beta1"]), float(hp["beta2"])
    if "eps" in hp:
        out["eps"] = float(hp["eps"])
    if "trust_coefficient" in hp:
        out["trust_coefficient"] = float(hp["trust_coefficient"])
    if "trust_clip" in hp:
        out["trust_clip"] = float(hp["trust_clip"])
    return out
