"""EMA weights in the compiled plan: the EMA twins, the per-step update and the EMA inference parts.

Every master weight (role PARAM) has an EMA twin of its group (tr.graph.layers.base.DeclCtx.param), so the
EMA regions mirror the PARAM regions byte for byte and one range op covers all of them:

- EMA_START, SEMA_SWITCH (steps ema_start, sema_switch): E <- W when EMA begins, W <- E at SEMA's epoch ends.
- EMA_UPDATE: E = decay*E + (1-decay)*W, after the optimizer, flagged: a skipped (non-finite) step leaves E
  as it was, as it leaves W. With ema_warmup > 0 the decay is ema_decay * (1 - exp(-step / ema_warmup)), step the
  counter of steps taken (this one included, skipped ones too), so the EMA follows the weights closely at first.
- PREPARE_EMA (step ema_prepare): prepares the EMA model for inference, once before its validation: folds each BN's
  EMA gamma/beta with the main model's running statistics (role RUNNING) into the inference scale/bias (the EMA
  model has no statistics of its own: it validates with the main model's, the seed's "BN stats copied"),
  and under AMP casts the EMA weights to their EMA_FP16 twins. The fold overwrites the main model's FOLDED
  scale/bias: the caller refolds them (step epoch_end) after the EMA validation.
- INFER_EMA_A/B (steps val_ema_*): INFER_A/B with every weight argument replaced by its EMA twin (same
  features, same order, so the pooled memory plan of INFER holds for them).
"""

from __future__ import annotations

from tr.core.dtype import DType
from tr.core.memory import Role, Span
from tr.graph.archplan import ArchPlan
from tr.graph.graph import ComputationGraph, SymOp
from tr.graph.layers import KINDS
from tr.graph.layers.base import working_suffix
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part

MASTERS, EMA_WEIGHTS = Span.of(Role.PARAM), Span.of(Role.EMA)
EMA_WITH_FP16 = Span.of(Role.EMA, decayed=True, amp_copy=True)  # the groups that have an EMA_FP16 twin
EMA_FP16 = Span.of(Role.EMA_FP16)
INF_EMA = {Part.INFER_A: Part.INFER_EMA_A, Part.INFER_B: Part.INFER_EMA_B}


def ema_key(key: str) -> str:
    """The E twin of master weight ``key`` (declared by DeclCtx.param)."""
    return key + ".ema"


def ema_twins(keys_by_twin: list[tuple[str, str]]) -> dict[str, str]:
    """(key, twin role) of the declared tensors -> {master or 16-bit working copy key: its EMA twin's key}."""
    out = {}
    declared = {key for key, _ in keys_by_twin}
    for key, twin in keys_by_twin:
        if twin == "w":
            out[key] = ema_key(key)
        elif twin == "a":  # "<master>.fp16" (.bf16) -> "<master>.ema16", or the FP32 EMA master without one
            master = key.rsplit(".", 1)[0]
            out[key] = master + ".ema16" if master + ".ema16" in declared else ema_key(master)
    return out


def add_ema_graphs(cg: ComputationGraph, arch: ArchPlan, spec: CompileSpec, twins: dict[str, str]) -> None:
    """EMA_START, SEMA_SWITCH, EMA_UPDATE, PREPARE_EMA and INFER_EMA_A/B (see the module doc). ``twins``: every
    master weight key and every AMP working copy key -> the key of its EMA twin that inference reads instead."""
    assert spec.ema_decay is not None
    ramp = spec.ema_warmup > 0  # the decay ramps up with the steps taken
    cg.graphs[Part.EMA_UPDATE] = [SymOp(
        "range_ema", {"src": MASTERS, "dst": EMA_WEIGHTS, "flag": "nan_flag", **({"step": "step"} if ramp else {})},
        {"decay": spec.ema_decay, **({"warmup": spec.ema_warmup} if ramp else {})}, -1,
        "EMA weights (a skipped step leaves them)")]
    cg.graphs[Part.EMA_START] = [SymOp("range_copy", {"src": MASTERS, "dst": EMA_WEIGHTS}, {}, -1,
                                       "EMA weights start as the weights")]
    cg.graphs[Part.SEMA_SWITCH] = [SymOp("range_copy", {"src": EMA_WEIGHTS, "dst": MASTERS}, {}, -1,
                                         "SEMA: weights <- EMA")]
    prep = []
    for i, L in enumerate(arch.layers):
        if KINDS[L.kind].bn_stats:
            p = f"L{i}."
            prep.append(SymOp("bn_update_eq", {
                "gamma": ema_key(p + "gamma"), "beta": ema_key(p + "beta"), "mean": p + "prev_mean",
                "var": p + "prev_var", "scale": p + "eq_scale", "bias": p + "eq_bias"},
                {"eps": L.params["eps"]}, i, "EMA gamma/beta with the main model's statistics"))
    if spec.amp and any(k.endswith(working_suffix(spec.low_dtype)) for k in twins):
        prep.append(SymOp("range_cast", {"src": EMA_WITH_FP16, "dst": EMA_FP16},
                          {"src_dtype": DType.FP32, "dst_dtype": spec.low_dtype}, -1,
                          f"EMA {spec.low_dtype.name} weights"))
    if prep:
        cg.graphs[Part.PREPARE_EMA] = prep
    for main, part in INF_EMA.items():
        cg.graphs[part] = [SymOp(op.op, {k: twins.get(v, v) if isinstance(v, str) else v for k, v in op.args.items()},
                                dict(op.attrs), op.layer, op.label) for op in cg.ops(main)]
