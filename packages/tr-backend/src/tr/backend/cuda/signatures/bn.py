"""Native ops of csrc/ops/bn.cu: batch normalisation over the m = N*H*W rows of NHWC features per channel, with
the following relu, relu6 or silu and residual add fused in. The feature tensors of one call share x's dtype
(FP32, FP16 or BF16); every per-channel tensor is FP32 [c]."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import code, f64, i64, native_op, tensor

_M, _C = i64("m", "rows: N*H*W"), i64("c", "channels")
_ACT = code("act", "bn_act", "the fused activation (tr.core.ops.BN_ACTIVATION_CODES)")
_FEAT = "[m, c]"
_VEC = "FP32 [c]"

BN_FWD = native_op(
    "bn_fwd", "Training forward y = act(bn(x) + z) from the batch statistics; running statistics updated, the "
    "saved ones written for the backward.",
    tensor("x", _FEAT), tensor("gamma", _VEC), tensor("beta", _VEC),
    tensor("mean_in", _VEC + ": running mean"), tensor("var_in", _VEC + ": running variance"),
    tensor("mean_out", _VEC + ": updated running mean"), tensor("var_out", _VEC + ": updated running variance"),
    tensor("y", _FEAT), tensor("saved_mean", _VEC + ": batch mean"),
    tensor("saved_inv_std", _VEC + ": 1 / sqrt(biased batch variance + eps)"),
    tensor("z", _FEAT + ": the residual, added before act; absent: none", optional=True),
    _M, _C, _ACT, f64("momentum", "running statistics' weight of the batch, in [0, 1]"),
    f64("eps", "variance term (>= 0)"))

BN_BWD = native_op(
    "bn_bwd", "g = (dy + dy2) * act'(.); dz = g when given; dbeta = sum g, dgamma = sum g * xhat, dx = the BN "
    "input gradient of g.",
    tensor("x", _FEAT), tensor("dy", _FEAT), tensor("dx", _FEAT + "; may be x"), tensor("gamma", _VEC),
    tensor("saved_mean", _VEC + ": the forward's"), tensor("saved_inv_std", _VEC + ": the forward's"),
    tensor("dgamma", _VEC), tensor("dbeta", _VEC),
    tensor("beta", _VEC + "; a mask recomputed from x reads it", optional=True),
    tensor("y", _FEAT + ": the forward's output; a mask read from y reads it", optional=True),
    tensor("dz", _FEAT + ": the residual's gradient g, written when given; may be dy", optional=True),
    tensor("dy2", _FEAT + ": a second gradient added to dy; absent: none", optional=True),
    _M, _C, code("mask", "bn_mask", "the activation mask and its source (tr.core.ops.BN_MASK_CODES)"))

BN_INF = native_op(
    "bn_inf", "Inference y = act(x * scale + bias + z) with the folded parameters.",
    tensor("x", _FEAT), tensor("scale", _VEC), tensor("bias", _VEC), tensor("y", _FEAT),
    tensor("z", _FEAT + ": the residual, added before act; absent: none", optional=True), _M, _C, _ACT)

BN_UPDATE_EQ = native_op(
    "bn_update_eq", "The folded inference parameters: scale = gamma / sqrt(var + eps), bias = beta - mean * scale.",
    tensor("gamma", _VEC), tensor("beta", _VEC), tensor("mean", _VEC + ": running mean"),
    tensor("var", _VEC + ": running variance"), tensor("scale", _VEC), tensor("bias", _VEC), _C,
    f64("eps", "variance term (>= 0)"))

OPS = (BN_FWD, BN_BWD, BN_INF, BN_UPDATE_EQ)
