"""The op catalogue: every operation a compiled plan may contain, its argument roles and attributes.

tr.graph emits :class:`OpCall` values from this catalogue; every backend implements every entry (a test
fails otherwise). Ops are dtype-generic (the MLX way): an FC forward is ``fc_fwd`` whether its tensors are
FP32 or FP16; the backend dispatches on the DTensors' dtypes. Ops made outside tr join it through
:func:`register_op` (each in a family of its own; tr.task.extension registers a whole family with its rule and
implementations).

Argument kinds:
- ``tensor``: a DTensor (region, offset, shape, dtype).
- ``span``: a :class:`tr.core.memory.Span` -- the bytes of the regions it selects (one contiguous run).
Roles: ``in`` (read), ``out`` (written), ``inout`` (read and written). ``optional`` arguments may be None.
In-place is explicit: an ``out`` may alias an ``in`` only where the entry says ``inplace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tr.core.errors import CompileError, ConfigError
from tr.core.memory import Span


@dataclass(frozen=True, slots=True)
class Arg:
    name: str
    role: str  # "in" | "out" | "inout"
    kind: str = "tensor"  # "tensor" | "span"
    optional: bool = False


@dataclass(frozen=True, slots=True)
class OpDef:
    name: str
    family: str  # the implementation file: fc, conv, bn, activation, pool, ... (one family per file)
    args: tuple[Arg, ...]
    attrs: tuple[str, ...] = ()
    kind: str = "compute"  # "compute" | "range"
    doc: str = ""
    inplace: tuple[tuple[str, str], ...] = ()  # (out, in) pairs that may share memory

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


def _t(name: str, role: str = "in", optional: bool = False) -> Arg:
    return Arg(name, role, "tensor", optional)


def _s(name: str, role: str = "inout") -> Arg:
    return Arg(name, role, "span")


ACTIVATIONS = ("relu", "tanh", "silu", "sigmoid", "relu6", "leaky_relu", "hardswish", "elu", "gelu")
# Codes that cross the CUDA boundary, each a kind's position in its tuple (so append, never reorder: the
# numbers are what the native ops switch on). tools/gen_native_codes.py writes them into
# packages/tr-backend/csrc/ops/codes.hpp; tests/test_native_codes.py there keeps the header current.
ACTIVATION_CODES = MappingProxyType({kind: i for i, kind in enumerate(ACTIVATIONS)})  # act_fwd/act_bwd's kind
BN_ACTIVATIONS = (None, "relu", "relu6", "silu")  # the batch-norm family's fused epilogue (bn_fwd's activation)
BN_ACTIVATION_CODES = MappingProxyType({act: i for i, act in enumerate(BN_ACTIVATIONS)})
# bn_bwd's activation mask, (where it comes from, the activation): "" none, "y" read from the forward's output,
# "x" recomputed from x, gamma and beta (silu's only way: silu is not invertible)
BN_MASKS = (("", None), ("x", "relu"), ("y", "relu"), ("x", "relu6"), ("y", "relu6"), ("x", "silu"))
BN_MASK_CODES = MappingProxyType({mask: i for i, mask in enumerate(BN_MASKS)})
OPTIMIZER_RULES = ("sgd", "momentum", "nesterov", "adam", "adamw")
OPTIMIZER_RULE_CODES = MappingProxyType({rule: i for i, rule in enumerate(OPTIMIZER_RULES)})  # range_optimizer
ONEHOT_LOSSES = ("bce_logits", "mse")  # onehot_loss_*'s loss: against the (smoothed) one-hot label
ONEHOT_LOSS_CODES = MappingProxyType({loss: i for i, loss in enumerate(ONEHOT_LOSSES)})
CONV_ENGINES = ("auto", "cudnn", "direct")  # TR_CONV: cuDNN else the direct kernels, cuDNN or an error, direct
CONV_ENGINE_CODES = MappingProxyType({engine: i for i, engine in enumerate(CONV_ENGINES)})  # conv_*'s engine
# extern_kernel's parameter types (a user kernel's parameters, packed into 8-byte slots)
EXTERN_PARAMS = ("pointer", "int32", "int64", "float32", "float64")
EXTERN_PARAM_CODES = MappingProxyType({kind: i for i, kind in enumerate(EXTERN_PARAMS)})
LOSS_SCALE_RULES = ("static", "dynamic")  # the seed's only-halving scale; torch.amp.GradScaler's
# Each rule's first scale (GradScaler's init_scale for "dynamic", the seed's for "static"), and GradScaler's
# number of clean steps in a row before the dynamic scale doubles.
INITIAL_LOSS_SCALE = MappingProxyType({"dynamic": 65536.0, "static": 8192.0})
DEFAULT_GROWTH_INTERVAL = 2000
RELU_MASK_ALIGN = 128  # fc's relu bit mask: bits a sample, a multiple of 128 (cuBLASLt's AUX_LD rule)


# image_resample's geometry table: one row of IMAGE_GEOM_COLS INT32 a sample, these columns first (tr.data.jpeg_plan
# writes it, tr/backend/rules/image.py says what each means, tr.graph declares it)
IMAGE_GEOM = ("slot", "roi_h", "roi_w", "top", "left", "crop_h", "crop_w", "flip", "erase_y", "erase_x", "erase_h",
              "erase_w", "roi_y", "roi_x", "out_h", "out_w", "out_y", "out_x", "jit_b", "jit_c", "jit_s", "jit_h",
              "jit_c1", "jit_s1", "jit_order")
IMAGE_GEOM_COLS = 32


def relu_mask_ld(features: int) -> int:
    """Bits a sample of an fc relu mask over ``features`` outputs (fc_fwd's ``mask``)."""
    return -(-features // RELU_MASK_ALIGN) * RELU_MASK_ALIGN


def relu_mask_bytes(features: int) -> int:
    return relu_mask_ld(features) // 8

_DEFS: list[OpDef] = [
    # --- copies and shape ops -------------------------------------------------------------------
    OpDef("copy", "copy", (_t("x"), _t("y", "out")), doc="y = x (same numel; dtype must match)"),
    OpDef("accumulate", "copy", (_t("x"), _t("y", "inout")), doc="y += x (gradient of a branch point)"),
    OpDef("flatten_fwd", "flatten", (_t("x"), _t("y", "out")), doc="[N,H,W,C] -> [N,1,1,H*W*C] (NHWC order)"),
    OpDef("flatten_bwd", "flatten", (_t("dy"), _t("dx", "out")), doc="inverse reshape of flatten_fwd"),
    OpDef("channel_pad_fwd", "flatten", (_t("x"), _t("y", "out")), doc="copy C channels, zero the padding"),
    OpDef("channel_pad_bwd", "flatten", (_t("dy"), _t("dx", "out")), doc="first C channels of dy"),
    # --- fully connected --------------------------------------------------------------------------
    OpDef("fc_fwd", "fc", (_t("x"), _t("w"), _t("b", optional=True), _t("y", "out"), _t("mask", "out", True)),
          ("activation",),
          doc="y = x[N, H*W*C] @ w[out, in]^T + b; activation None or 'relu' (fused epilogue). mask (with relu): "
              "the relu's bit mask, INT8 [N, 1, 1, ld/8] with ld = out rounded up to 128: bit o of sample n (bit "
              "n*ld + o, least significant bit first) is set iff the pre-activation is > 0 (cuBLASLt's RELU_AUX)"),
    OpDef("fc_bwd", "fc",
          (_t("x"), _t("w"), _t("dy"), _t("dw", "out"), _t("db", "out", True), _t("dx", "out", True),
           _t("mask", optional=True)),
          doc="dw = dy^T x, db = sum_n dy, dx = dy w (dx None for the first layer). mask (with dx): the input's "
              "producer's relu mask (fc_fwd's, over in features): dx = dy w where its bit is set, else 0 "
              "(cuBLASLt's DRELU), so the relu's backward needs no op of its own"),
    # --- convolution (a bias is optional: a BN usually follows) ---------------------------------------
    OpDef("conv_fwd", "conv", (_t("x"), _t("w"), _t("b", optional=True), _t("y", "out")),
          ("kernel", "stride", "padding", "groups"),
          doc="NHWC cross-correlation, weight KRSC [K, R, S, C/groups]; groups default 1; + b[K] when given"),
    OpDef("conv_bwd", "conv",
          (_t("x"), _t("w"), _t("dy"), _t("dw", "out"), _t("db", "out", True), _t("dx", "out", True)),
          ("kernel", "stride", "padding", "groups"),
          doc="wgrad, db = sum over N*P*Q of dy (when db is given; FP32) and dgrad (unless dx is None)"),
    # --- batch norm (with the activation and the residual join that follow it fused in) -------------
    OpDef("bn_fwd", "bn",
          (_t("x"), _t("gamma"), _t("beta"), _t("mean_in"), _t("var_in"), _t("mean_out", "out"),
           _t("var_out", "out"), _t("y", "out"), _t("saved_mean", "out"), _t("saved_inv_std", "out"),
           _t("z", optional=True)),
          ("momentum", "eps", "activation"), inplace=(("y", "z"),),
          doc="y = act(bn(x) + z): batch statistics over N*H*W, bn(x) = (x - mean) * (gamma * inv_std) + beta; "
              "z (the residual, optional) is added before the activation (None, 'relu', 'relu6' or 'silu'); "
              "running stats: out = (1-m)*in + m*batch (unbiased var; biased when N*H*W = 1); saved_inv_std = "
              "1/sqrt(biased var + eps)"),
    OpDef("bn_bwd", "bn",
          (_t("x"), _t("gamma"), _t("dy"), _t("saved_mean"), _t("saved_inv_std"), _t("dgamma", "out"),
           _t("dbeta", "out"), _t("dx", "out"), _t("beta", optional=True), _t("y", optional=True),
           _t("dz", "out", True), _t("dy2", optional=True)),
          ("eps", "activation"), inplace=(("dx", "x"), ("dz", "dy")),
          doc="dy (+ dy2, a second contribution added as it is read and rounded to dy's dtype, as an accumulate op "
              "would) is the gradient of bn_fwd's y. With activation 'relu' the mask is y > 0 ('relu6': 0 < y < 6; "
              "'silu': its slope, from x only), read from y when given (needed with a residual), else recomputed "
              "from x with beta exactly as the forward rounded it; g = dy * mask; dz = g (the residual's gradient) "
              "when given; dbeta = sum g, dgamma = sum g*xhat, dx = the BN input gradient of g. eps is "
              "informational: saved_inv_std already includes it"),
    OpDef("bn_inf", "bn", (_t("x"), _t("scale"), _t("bias"), _t("y", "out"), _t("z", optional=True)),
          ("activation",), inplace=(("y", "z"),), doc="y = act(x*scale + bias + z)"),
    # --- batch norm + relu + max pooling in one pass (a CBR followed by a max pool) --------------------
    OpDef("bn_maxpool_fwd", "bn_pool",
          (_t("x"), _t("gamma"), _t("beta"), _t("mean_in"), _t("var_in"), _t("mean_out", "out"),
           _t("var_out", "out"), _t("y", "out"), _t("mask", "out"), _t("saved_mean", "out"),
           _t("saved_inv_std", "out")),
          ("momentum", "eps", "kernel", "stride", "padding"),
          doc="y = maxpool(relu(bn(x))) with bn_fwd's statistics and maxpool_fwd's INT8 argmax mask, the relu "
              "output rounded to x's dtype before the window's max is taken; the full-resolution activation is "
              "never stored"),
    OpDef("bn_maxpool_bwd", "bn_pool",
          (_t("x"), _t("gamma"), _t("beta"), _t("dy"), _t("mask"), _t("saved_mean"), _t("saved_inv_std"),
           _t("dgamma", "out"), _t("dbeta", "out"), _t("dx", "out")),
          ("eps", "kernel", "stride", "padding"), inplace=(("dx", "x"),),
          doc="the gradient of bn_maxpool_fwd: dy routed to the argmax as maxpool_bwd does (sums of overlapping "
              "windows rounded to x's dtype), masked by the relu recomputed from x, then bn_bwd's reduction"),
    OpDef("bn_update_eq", "bn",
          (_t("gamma"), _t("beta"), _t("mean"), _t("var"), _t("scale", "out"), _t("bias", "out")), ("eps",),
          doc="scale = gamma/sqrt(var+eps); bias = beta - mean*scale"),
    # --- layer norm: each N*H*W position normalised over its C values (ViT's LayerNorm over the embedding) --
    OpDef("ln_fwd", "layernorm",
          (_t("x"), _t("gamma"), _t("beta"), _t("y", "out"), _t("saved_mean", "out", True),
           _t("saved_rstd", "out", True), _t("z", optional=True), _t("sum", "out", True)), ("eps",),
          inplace=(("sum", "x"), ("sum", "z")),
          doc="per row of C values: mean, biased var (both accumulated in float64), rstd = 1/sqrt(var + eps); "
              "y = (x - mean) * rstd * gamma + beta in float32 with mean and rstd rounded to float32. gamma, beta: "
              "FP32 [1,1,1,C]. Training passes saved_mean and saved_rstd (FP32 [N,H,W,1]: one per row) for the "
              "backward; inference passes neither. With z (the residual join before a pre-norm LayerNorm, fused in) "
              "the row normalised is x + z, added in float32 and rounded to x's dtype as add_fwd rounds it, and "
              "written to sum when given (the skip path and ln_bwd read it)"),
    OpDef("ln_bwd", "layernorm",
          (_t("x"), _t("gamma"), _t("dy"), _t("saved_mean"), _t("saved_rstd"), _t("dx", "out", True),
           _t("dgamma", "out"), _t("dbeta", "out"), _t("dx2", optional=True)),
          inplace=(("dx", "dx2"),),
          doc="xhat = (x - mean) * rstd, g = dy * gamma; dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)) "
              "(None when the input needs no gradient); dgamma = sum over rows of dy * xhat, dbeta = sum over rows "
              "of dy (FP32; fixed-order sums, no atomics: the same bytes on every run; the CPU backend adds rows into "
              "float64, the CUDA one adds four rows in float32 and then float64). dx2 (with dx): a contribution "
              "x's gradient already has (a branch point's skip path), added to dx as it is written: dx is rounded "
              "to its dtype, then dx2 added and rounded again, as an accumulate op would"),
    # --- attention: multi-head scaled dot-product self-attention over tokens [N,1,T,C] (ViT's; H = 1, W = T) ----
    OpDef("attention_fwd", "attention",
          (_t("qkv"), _t("y", "out"), _t("stats", "out", True), _t("seed", "inout", True), _t("key", "out", True)),
          ("heads", "scale", "dropout"),
          doc="qkv [N,1,T,3D] (FP32, FP16 or BF16) holds per token [q (D) | k (D) | v (D)], each split into `heads` "
              "heads of dh = D / heads channels, head h on channels [h*dh, (h+1)*dh) (torch.nn.MultiheadAttention's "
              "packed in_proj output); per sample and head, in float32 from the widened values: S = (q k^T) * scale, "
              "P = softmax(S) by rows (max subtracted), y = P v rounded once to y's dtype (qkv's; y [N,1,T,D], the "
              "heads concatenated in order); stats FP32 [N,1,heads,T] = each row's log-sum-exp of S, saved for the "
              "backward in training (inference passes none). Fixed order: the same bytes on every run. With "
              "dropout = p > 0 (training only; absent or 0: none, and no seed or key): seed (INT32[2] = uint64) is "
              "first advanced, seed = splitmix64(seed), and stored into key (INT32[2], the layer's, for the "
              "backward); P_ij of sample n and head h is kept iff philox.uniform(key, ((n*heads + h)*T + i)*T + j) "
              ">= p, y = (keep * P / (1-p)) v; stats stay the undropped rows' log-sum-exp"),
    OpDef("attention_bwd", "attention",
          (_t("qkv"), _t("y"), _t("dy"), _t("stats"), _t("dqkv", "out"), _t("key", "in", True)),
          ("heads", "scale", "dropout"),
          doc="attention_fwd's gradient, in float32: P = exp(S - stats) recomputed from qkv; dV = P^T dy, dP = dy "
              "V^T, D_i = rowsum(dy * y) (y as stored, widened), dS = P * (dP - D_i), dQ = (dS K) * scale, dK = "
              "(dS^T Q) * scale; dqkv [N,1,T,3D] = [dQ | dK | dV] per token in qkv's layout and dtype (dy's, y's), "
              "rounded once. With dropout = p > 0 the keep bits are redrawn from the forward's key: dV = P'^T dy and "
              "dP = keep * (dy V^T) / (1-p), P' = keep * P / (1-p) (D_i = rowsum(dy * y) still: y = P' v)"),
    # --- activations (kind in ACTIVATIONS) ----------------------------------------------------------
    OpDef("act_fwd", "activation", (_t("x"), _t("y", "out"), _t("mask", "out", True)), ("kind",),
          doc="y = f(x); when a mask is given, also write the INT8 mask (x > 0) (only relu's backward reads it)"),
    OpDef("act_bwd", "activation", (_t("x"), _t("dy"), _t("dx", "out"), _t("mask", "in", True)), ("kind",),
          doc="dx = f'(x) * dy, recomputed from x (or from the relu mask). For relu, relu6 and leaky_relu the "
              "compiler may pass the activation's OUTPUT as x: their derivative test is strict (x > 0, 0 < x < 6), "
              "which gives the same result on outputs as on inputs", inplace=(("dx", "x"), ("dx", "dy"))),
    OpDef("act_inf", "activation", (_t("x"), _t("y", "out")), ("kind",)),
    # --- dropout ---------------------------------------------------------------------------------
    OpDef("dropout_fwd", "dropout", (_t("x"), _t("y", "out"), _t("mask", "out"), _t("seed", "inout")), ("p",),
          doc="seed (INT32[2] = uint64 little-endian) is first advanced: seed = splitmix64(seed), stored back; "
              "then element i (flat NHWC index) is kept iff philox.uniform(seed, i) >= p; y = keep*x/(1-p)"),
    OpDef("dropout_bwd", "dropout", (_t("dy"), _t("mask"), _t("dx", "out")), ("p",), inplace=(("dx", "dy"),)),
    # --- stochastic depth (drop path): a residual branch dropped for a whole sample ---------------------
    OpDef("drop_path_fwd", "drop_path", (_t("x"), _t("y", "out"), _t("mask", "out"), _t("seed", "inout")), ("p",),
          doc="seed (INT32[2] = uint64 little-endian) is first advanced: seed = splitmix64(seed), stored back; then "
              "sample n (x's first dimension) is kept iff philox.uniform(seed, n) >= p: y[n] = x[n]/(1-p) where "
              "kept, else 0 (even for inf or NaN); mask INT8 [N] 0/1 (timm's DropPath, torchvision's "
              "StochasticDepth(p, 'row'))"),
    OpDef("drop_path_bwd", "drop_path", (_t("dy"), _t("mask"), _t("dx", "out")), ("p",),
          doc="dx[n] = dy[n]/(1-p) where mask[n], else 0", inplace=(("dx", "dy"),)),
    # --- Mixup / CutMix of the training batch with its reverse (tr.core.mixup) ----------------------------
    OpDef("mixup", "mixup", (_t("x", "inout"), _t("seed", "inout"), _t("lam", "out")),
          ("mixup_alpha", "cutmix_alpha", "prob", "switch_prob"),
          doc="seed (INT32[2] = uint64) is first advanced: seed = splitmix64(seed), stored back; then the step's "
              "draw tr.core.mixup.draw(seed, ...) (whether to mix, Mixup or CutMix, lam ~ Beta(alpha, alpha), "
              "the box; float64, bit for bit on every backend) mixes x [N,H,W,C] (float) in place with x.flip(0): "
              "Mixup x[n] = x[n]*lam + x[N-1-n]*(1-lam) in float32 (each product rounded, then the sum, rounded "
              "once to x's dtype), CutMix x[n] takes x[N-1-n]'s box; lam (FP32 [1]) = the corrected lam (1: the "
              "step did not mix), which softmax_ce_fwd/bwd read (timm's Mixup, mode 'batch', correct_lam)"),
    # --- device-resident augmentation ------------------------------------------------------------
    OpDef("augment_affine", "augment", (_t("src"), _t("index"), _t("key"), _t("y", "out")),
          ("pad", "degrees", "scale", "erase_p", "erase_scale", "erase_ratio", "erase_value", "flip_p", "mean", "std",
           "crop_slot", "rotation_slot", "scale_slot"),
          doc="y[b] = normalise(erase(flip(the source image src[index[b]] sampled once, bilinearly, through the "
              "inverse maps of RandomScale, RandomRotation and Pad + RandomCrop))); every draw from the Philox "
              "streams tr.data's workers use, keyed by splitmix64(key ^ index[b]) (key: INT32[2] = uint64, "
              "tr.data.seeds.seed_prefix of the epoch); tr/backend/rules/augment.py has the rule"),
    # --- images decoded on the device (issue [13]): crop, resize, flip, erase and normalise -------------
    OpDef("image_resample", "image", (_t("src"), _t("geom"), _t("y", "out")), ("mean", "std", "erase_value"),
          doc="y[b] = normalise(erase(flip(resize(crop of sample b's decoded RGB pixels in src)))), the bytes of "
              "tr.data's CPU chain RandomResizedCrop + RandomHorizontalFlip + FusedNormalization(+ RandomErasing) "
              "given the same pixels: src (UINT8, flat) holds each sample's decoded region (RGB u8 HWC) at byte "
              "geom[b, slot]; geom (INT32 [B,1,1,16], columns tr/backend/rules/image.py GEOM) says its size, the "
              "crop box inside it, the flip and the erase box; the resize is tr.data's antialiased bilinear "
              "(PIL's triangle filter, 14-bit fixed-point weights, the two passes in tr.data's order with a u8 "
              "intermediate); y (B, H, W, C_out >= 3) FP16 or FP32 = float(x) * a_c + b_c with a_c = "
              "float32(1 / (255 std_c)), b_c = float32(-mean_c / std_c), extra channels 0, erased pixels "
              "erase_value (normalised space, one or per channel); a UINT8 y (B, H, W, 3) gets the resized pixels "
              "alone (no flip, erasing or normalisation: image_jitter's input)"),
    OpDef("image_jitter", "image", (_t("x"), _t("geom"), _t("y", "out")), ("mean", "std", "erase_value"),
          doc="y[b] = normalise(erase(flip(ColorJitter(x[b])))): tr.data's ColorJitter on the resized u8 batch x "
              "(UINT8 [B,H,W,3], image_resample's with a UINT8 y) with geom's factors and order (its jit_ columns: "
              "torchvision's float32 formulas, each result truncated to u8, contrast's grey mean over the image), "
              "then image_resample's flip, normalisation and erasing"),
    OpDef("shuffle_order", "resident", (_t("key"), _t("order", "out"), _t("pos", "out")), ("shuffle",), kind="range",
          doc="order (INT32 [n]) = tr.core.philox.shuffle_indices(n, seed), seed the uint64 in key (INT32[2], "
              "little-endian): the epoch's Fisher-Yates permutation, the one tr.data's workers use (without "
              "shuffle: 0..n-1); pos (INT32[1]) = 0, the epoch's first batch"),
    OpDef("batch_select", "resident", (_t("order", optional=True), _t("labels_all"), _t("rank"), _t("pos", "inout"),
                                       _t("index", "out"), _t("labels", "out")), ("world", "pad"), kind="range",
          doc="the next batch of a resident data set for data-parallel rank r (INT32[1] rank) of `world`: the "
              "rank takes epoch positions r, r + world, ... (tr.data.sharding; with pad the order repeats from "
              "its start up to a multiple of world, so share = ceil(n / world), else the positions < n); "
              "count = min(B, share - pos) (B = index's rows, n = labels_all's numel); for i < count, q = pos + "
              "i, position = (r + world * q) mod n, index[i] = order[position] (the position itself without "
              "order) and labels[i] = labels_all[index[i]] (the rest keep their values); then pos += B"),
    OpDef("batch_restart", "resident", (_t("pos", "out"),), kind="range", doc="pos = 0 (validation's first batch)"),
    # --- pooling ---------------------------------------------------------------------------------
    OpDef("maxpool_fwd", "pool", (_t("x"), _t("y", "out"), _t("mask", "out")), ("kernel", "stride", "padding"),
          doc="INT8 mask = argmax position kh*k+kw in the window, first max wins"),
    OpDef("maxpool_bwd", "pool", (_t("dy"), _t("mask"), _t("dx", "out")), ("kernel", "stride", "padding")),
    OpDef("maxpool_inf", "pool", (_t("x"), _t("y", "out")), ("kernel", "stride", "padding")),
    OpDef("avgpool_fwd", "pool", (_t("x"), _t("y", "out")), ("kernel", "stride", "padding"),
          doc="average over the window, padding excluded from the count"),
    OpDef("avgpool_bwd", "pool", (_t("dy"), _t("dx", "out")), ("kernel", "stride", "padding")),
    OpDef("gap_fwd", "pool", (_t("x"), _t("y", "out")), doc="mean over H, W"),
    OpDef("gap_bwd", "pool", (_t("dy"), _t("dx", "out")), doc="dx = dy / (H*W)"),
    # --- residual ----------------------------------------------------------------------------------
    OpDef("add_fwd", "add", (_t("a"), _t("b"), _t("y", "out")), ("activation",),
          doc="y = a + b, then optional relu (activation None or 'relu')", inplace=(("y", "a"), ("y", "b"))),
    # --- a Vision Transformer's tokens: [N, 1, T, C] (H = 1, W = T tokens, C channels) ----------------
    OpDef("tokens_fwd", "tokens", (_t("x"), _t("cls", "in", True), _t("pos", "in", True), _t("y", "out")),
          doc="x [N,H,W,C] (a patch embedding's output) -> y [N,1,T,C]: T = H*W, + 1 with a class token cls (FP32 "
              "[1,1,1,C]) as token 0; the patch tokens in row order; plus pos (FP32 [1,1,T,C]) when given; float32, "
              "rounded once"),
    OpDef("tokens_bwd", "tokens", (_t("dy"), _t("dx", "out", True), _t("dcls", "out", True),
                                    _t("dpos", "out", True)),
          doc="dx = dy's patch tokens (unless dx is None); dcls = sum over samples of dy's token 0, dpos = sum over "
              "samples of dy (FP32, samples added in order)"),
    OpDef("token_pick_fwd", "tokens", (_t("x"), _t("y", "out")),
          doc="y [N,1,1,C] = token 0 of x [N,1,T,C] (class-token pooling)"),
    OpDef("token_pick_bwd", "tokens", (_t("dy"), _t("dx", "out")),
          doc="dx [N,1,T,C]: dy at token 0, zero at the others"),
    # --- channel scaling (squeeze-excitation's join) ------------------------------------------------
    OpDef("scale_fwd", "scale", (_t("x"), _t("s"), _t("y", "out")),
          doc="y[n,h,w,c] = x[n,h,w,c] * s[n,0,0,c] (s [N,1,1,C]: one factor per sample and channel)"),
    OpDef("scale_bwd", "scale", (_t("x"), _t("s"), _t("dy"), _t("ds", "out"), _t("dx", "out", True)),
          doc="ds[n,0,0,c] = sum over h, w of dy * x; dx = dy * s (broadcast over H, W) unless dx is None"),
    # --- loss ------------------------------------------------------------------------------------
    OpDef("softmax_ce_fwd", "softmax_ce",
          (_t("logits"), _t("labels"), _t("probs", "out"), _t("result", "out"), _t("lam", optional=True)),
          ("label_smoothing",),
          doc="probs = softmax(logits); result[0] = mean loss, result[1:3] = top1, top5 fractions. With lam (FP32 "
              "[1], the mixup op's) the loss is lam * CE(y) + (1-lam) * CE(y reversed): cross-entropy against "
              "timm's mixup_target (the samples' order reversed, N-1-n for n); top-1/top-5 still score y"),
    OpDef("softmax_ce_bwd", "softmax_ce",
          (_t("probs"), _t("labels"), _t("scale"), _t("dlogits", "out"), _t("div", optional=True),
           _t("lam", optional=True)),
          ("label_smoothing",),
          doc="dlogits = (probs - smooth(onehot)) * factor, factor = fl32(scale[0] / N) (the quotient in float64); "
              "with div (FP32 [1]: a gradient-accumulation window's samples, task.accumulate) div[0] takes N's "
              "place, so div[0] == N gives the same bytes. With lam (FP32 [1]): v = probs - ls/K, minus "
              "fl32((1-ls)*lam) where c == y[n], minus fl32((1-ls)*fl32(1-lam)) where c == y[N-1-n], in that order "
              "(float32), then times factor: lam = 1 gives the plain bytes"),
    OpDef("softmax_ce_inf", "softmax_ce",
          (_t("logits"), _t("labels"), _t("result", "out"), _t("pred", "out", True)), ("label_smoothing",),
          doc="result = (mean loss, top1, top5); pred = argmax"),
    # --- elementwise losses against the one-hot label (tr.algo.onehot_loss) ----------------------------
    OpDef("onehot_loss_fwd", "onehot_loss", (_t("logits"), _t("labels"), _t("result", "out")),
          ("loss", "label_smoothing"),
          doc="loss 'bce_logits' or 'mse' of the logits against t = (1-ls)*onehot + ls/K, mean over N*K; result = "
              "(loss, top1, top5 fractions)"),
    OpDef("onehot_loss_bwd", "onehot_loss",
          (_t("logits"), _t("labels"), _t("scale"), _t("dlogits", "out"), _t("div", optional=True)),
          ("loss", "label_smoothing"), inplace=(("dlogits", "logits"),),
          doc="dlogits = dl/dz * scale[0] / (N*K): sigmoid(z) - t (bce_logits) or 2 (z - t) (mse); with div (FP32 "
              "[1], as softmax_ce_bwd's) div[0]*K takes N*K's place"),
    OpDef("onehot_loss_inf", "onehot_loss",
          (_t("logits"), _t("labels"), _t("result", "out"), _t("pred", "out", True)), ("loss", "label_smoothing"),
          doc="result = (mean loss, top1, top5); pred = argmax"),
    # --- scalars -----------------------------------------------------------------------------------
    # hold (optional, INT32 [1]) gates a step's bookkeeping on a gradient-accumulation window: when hold[0] != 0
    # (a micro-step that does not close its window, accum_window's) the op does nothing
    OpDef("scalar_increment", "scalar", (_t("x", "inout"), _t("hold", optional=True)),
          doc="x += 1 (INT32 step counters); nothing when hold[0] != 0"),
    OpDef("count_flag", "scalar", (_t("flag"), _t("count", "inout"), _t("hold", optional=True)),
          doc="count += (flag != 0) (INT32): skipped steps counted on the device, read once per epoch; nothing "
              "when hold[0] != 0"),
    OpDef("lr_lookup", "scalar", (_t("table"), _t("step"), _t("lr", "out")),
          doc="lr = table[min(step, len-1)]: the learning rate stays on the device"),
    OpDef("loss_scale_update", "scalar",
          (_t("flag"), _t("scale", "inout"), _t("tracker", "inout", True), _t("hold", optional=True)),
          ("rule", "growth_interval"),
          doc="rule 'static' (the seed's, the default): if flag: scale = max(1, scale/2). rule 'dynamic' "
              "(torch.amp.GradScaler's; needs tracker, INT32 clean steps in a row): if flag: scale /= 2, tracker "
              "= 0; else tracker += 1 and when it reaches growth_interval, scale *= 2 (kept only if finite) and "
              "tracker = 0. Nothing (scale and tracker untouched) when hold[0] != 0"),
    # --- range ops (one kernel per byte range, independent of the number of layers) ----------------
    OpDef("range_clear", "range", (_s("span", "out"),), kind="range"),
    OpDef("range_copy", "range", (_s("src", "in"), _s("dst", "out"), _t("flag", "in", True)), kind="range",
          doc="dst = src; with a flag, nothing happens when flag != 0 (BN statistics of a skipped step are "
              "discarded: the next forward rewrites the statistics it writes from the ones it reads)"),
    OpDef("range_cast", "range", (_s("src", "in"), _s("dst", "out")), ("src_dtype", "dst_dtype"), kind="range",
          doc="element-wise cast; FP32 slots are twice their FP16 twins' so elements line up"),
    OpDef("range_check_finite", "range", (_s("span", "inout"), _t("flag", "inout"), _t("hold", optional=True)),
          ("clip", "accumulate"), kind="range",
          doc="flag = any(!isfinite) (set, not OR-ed; Inf is flagged even when clipping); with accumulate, "
              "flag |= any(!isfinite) instead (a second span, e.g. the BN statistics, joins the gradients' "
              "flag); with clip > 0 also clamp elements to [-clip, clip]. With hold (INT32 [1]) and hold[0] != 0 "
              "nothing is read or clipped and flag = 1 (a held micro-step skips the optimizer and every flagged "
              "op); with accumulate the flag is then left as it is"),
    OpDef("range_scale", "range", (_s("span", "inout"), _t("factor")), kind="range", doc="x *= factor[0]"),
    OpDef("clip_grad_norm", "clip",
          (_s("g", "in"), _t("scale"), _t("flag"), _t("divisor", "out"), _t("norm", "out")), ("max_norm",),
          kind="range",
          doc="global-norm clipping (torch.nn.utils.clip_grad_norm_): norm = ||g||_2 / scale[0] over the whole "
              "span (a float64 sum of squares in a fixed order), coef = max_norm / (norm + 1e-6); divisor = "
              "scale[0] / min(coef, 1), what the optimizer divides g by instead of the loss scale. With flag set "
              "(a skipped step) divisor = scale[0]"),
    OpDef("clip_agc", "clip", (_t("w"), _t("g", "inout"), _t("scale"), _t("flag")), ("clip", "eps", "per_unit"),
          kind="range",
          doc="adaptive gradient clipping (Brock et al. 2021; timm's adaptive_clip_grad) of one trained tensor: per "
              "unit (per_unit: each row of the first dimension, a conv's or fc's output unit; else the whole "
              "tensor), with gn = ||g|| / scale[0] and wn = clip * max(||w||, eps), g is multiplied by wn / max(gn, "
              "1e-6) unless gn < wn (norms in float64, a fixed order). Nothing happens when flag != 0"),
    OpDef("range_allreduce_mean", "range", (_s("span", "inout"),), kind="range",
          doc="mean over ranks in place; identity with one rank"),
    OpDef("range_optimizer", "range",
          (_s("w"), _s("g", "in"), Arg("m", "inout", "span", True), Arg("v", "inout", "span", True),
           _t("lr"), _t("flag"), _t("grad_scale"), _t("step", "in", True)),
          ("rule", "beta1", "beta2", "eps", "weight_decay", "lr_scale"), kind="range",
          doc="rule in OPTIMIZER_RULES; g is divided by grad_scale; nothing happens when flag != 0. step counts "
              "completed updates (incremented after the optimizer); Adam's bias correction uses t = step + 1. "
              "The learning rate is lr[0] * lr_scale (default 1: a parameter group's multiplier)"),
    OpDef("tensor_optimizer", "range",
          (_t("w", "inout"), _t("g"), _t("m", "inout", True), _t("v", "inout", True), _t("lr"), _t("flag"),
           _t("grad_scale"), _t("step", "in", True)),
          ("rule", "beta1", "beta2", "eps", "weight_decay", "lr_scale"), kind="range",
          doc="range_optimizer's update of one trained tensor and its twins (the layer-wise rate decay updates each "
              "tensor with its own lr_scale)"),
    OpDef("lars_update", "range",
          (_t("w", "inout"), _t("g"), _t("m", "inout"), _t("lr"), _t("flag"), _t("grad_scale"), _t("ratio", "out")),
          ("nesterov", "momentum", "weight_decay", "trust_coefficient", "eps", "trust_clip"), kind="range",
          doc="per weight tensor: trust ratio (at most trust_clip) then momentum update (SEED_SYSTEM.md §7)"),
    OpDef("range_ema", "range", (_s("src", "in"), _s("dst", "inout"), _t("flag", "in", True), _t("step", "in", True)),
          ("decay", "warmup"), kind="range",
          doc="dst = decay*dst + (1-decay)*src; with a flag, nothing happens when flag != 0 (a skipped step "
              "leaves the EMA weights as they were). With warmup > 0 (and the INT32 step counter, the steps taken "
              "including this one) the decay is decay * (1 - exp(-step / warmup)) (YOLOv5's ModelEMA ramp)"),
    OpDef("accum_metrics", "range",
          (_t("result"), _t("accum", "inout"), _t("batch"), _t("flag", "in", True), _t("samples", "inout", True)),
          kind="range",
          doc="accum += result * batch[0] and samples += batch[0] (when given); with a flag, nothing happens "
              "when flag != 0 (a skipped step's loss is not part of the epoch's mean)"),
    # --- gradient accumulation (task.accumulate): a window of k micro-steps makes one optimizer step ---------
    OpDef("accum_window", "accum", (_t("pos", "inout"), _t("hold", "out"), _t("first", "out"), _t("div", "out")),
          ("accumulate", "steps", "batch", "last_batch"), kind="range",
          doc="the micro-step's place in its window (pos, hold, first INT32 [1], div FP32 [1]; attributes "
              "accumulate = k >= 2 micro-steps a window, steps = S >= 1 micro-steps an epoch, batch = m >= 1 "
              "samples a micro-batch, last_batch = the epoch's last micro-batch's, in [1, m]): p = pos[0] (in [0, "
              "S)), w0 = p - p % k, n = min(k, S - w0); hold = (p != w0 + n - 1) (the window goes on), first = "
              "(p == w0), div = (n - 1) * m + (w0 + n == S ? last_batch : m) (the window's samples), pos = (p + 1 "
              "== S ? 0 : p + 1)"),
    OpDef("range_accumulate", "accum",
          (_s("src", "inout"), _s("acc", "inout"), _t("hold"), _t("first")), kind="range",
          doc="a window's gradient sum, element-wise in FP32 over spans of one size (src: GRAD, acc: its "
              "GRAD_ACCUM twins; hold, first INT32 [1]): if hold[0]: acc = first[0] ? src : acc + src; else (the "
              "closing micro-step): src = first[0] ? src : acc + src, so the sum lands in src, which every later "
              "op reads"),
    OpDef("window_result", "accum",
          (_t("result", "inout"), _t("window", "inout"), _t("batch"), _t("hold"), _t("first")), kind="range",
          doc="a window's mean of the step results, in float32: result FP32 [n] (the loss's result row), window "
              "FP32 [n + 1], batch FP32 [1] (the micro-batch's samples), hold, first INT32 [1]. If first[0]: "
              "window = 0; window[:n] += result * batch[0]; window[n] += batch[0]; if not hold[0]: result = "
              "window[:n] / window[n]"),
    OpDef("h2d_copy", "transfer", (_t("labels", "out"), _t("data", "out")), ("buffer", "packed"), kind="range",
          doc="copy host staging buffer `buffer` (0 = A, 1 = B) into the device input tensors; with `packed` (a "
              "progressive-resizing side below the buffer's) the samples lie packed at data's shape at the buffer's "
              "start"),
]

_TABLE: dict[str, OpDef] = {d.name: d for d in _DEFS}
assert len(_TABLE) == len(_DEFS), "duplicate op name"
# A read-only view of the live table: register_op's entries appear in it (and in every module that imported it).
CATALOGUE: MappingProxyType[str, OpDef] = MappingProxyType(_TABLE)
TR_OPS: frozenset[str] = frozenset(_TABLE)  # tr's own entries: the ones register_op did not add
TR_FAMILIES: frozenset[str] = frozenset(d.family for d in _DEFS)  # tr's op families (a module each per backend)

_ROLES = ("in", "out", "inout")
_ARG_KINDS = ("tensor", "span")
_OP_KINDS = ("compute", "range")


def _identifier(what: str, v: object) -> str:
    if not isinstance(v, str) or not v.isidentifier():
        raise ConfigError(f"{what} must be a Python identifier (a str), got {v!r}")
    return v


def _check_entry(d: OpDef) -> None:
    """An OpDef made outside tr is well formed: the checks test_ops.py makes of tr's own entries."""
    if not isinstance(d, OpDef):
        raise ConfigError(f"register_op takes a tr.core.ops.OpDef, got {type(d).__name__}")
    _identifier("an op's name", d.name)
    _identifier(f"op {d.name!r}: its family", d.family)
    if not isinstance(d.args, tuple) or not d.args:
        raise ConfigError(f"op {d.name!r}: args must be a non-empty tuple of Arg, got {d.args!r}")
    names: set[str] = set()
    for a in d.args:
        if not isinstance(a, Arg):
            raise ConfigError(f"op {d.name!r}: every argument must be a tr.core.ops.Arg, got {a!r}")
        _identifier(f"op {d.name!r}: an argument's name", a.name)
        if a.name in names:
            raise ConfigError(f"op {d.name!r}: argument {a.name!r} is listed twice")
        names.add(a.name)
        if a.role not in _ROLES or a.kind not in _ARG_KINDS or not isinstance(a.optional, bool):
            raise ConfigError(f"op {d.name!r}: argument {a.name!r} has role {a.role!r}, kind {a.kind!r}, optional "
                              f"{a.optional!r}; expected a role in {_ROLES}, a kind in {_ARG_KINDS}, a bool")
    if not isinstance(d.attrs, tuple) or len(set(d.attrs)) != len(d.attrs):
        raise ConfigError(f"op {d.name!r}: attrs must be a tuple of distinct names, got {d.attrs!r}")
    for at in d.attrs:
        _identifier(f"op {d.name!r}: an attribute's name", at)
    if d.kind not in _OP_KINDS:
        raise ConfigError(f"op {d.name!r}: kind {d.kind!r} is not one of {_OP_KINDS}")
    if not isinstance(d.doc, str):
        raise ConfigError(f"op {d.name!r}: doc must be a str, got {type(d.doc).__name__}")
    if not isinstance(d.inplace, tuple):
        raise ConfigError(f"op {d.name!r}: inplace must be a tuple of (out, in) pairs, got {d.inplace!r}")
    for pair in d.inplace:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(p in names for p in pair)
                and d.arg(pair[0]).role in ("out", "inout")):
            raise ConfigError(f"op {d.name!r}: inplace pair {pair!r} must name an out (or inout) argument and "
                              f"another argument of {sorted(names)}")


def register_op(d: OpDef) -> OpDef:
    """Add an op made outside tr to the catalogue (tr.task.extension.register_op_family calls it with the family's
    implementations). Its family must be new: tr's families are implemented in tr's own modules. A name the
    catalogue has is refused; so is a malformed entry (ConfigError naming the bad value)."""
    _check_entry(d)
    if d.name in _TABLE:
        raise ConfigError(f"op {d.name!r} is already in the catalogue (family {_TABLE[d.name].family!r}); "
                          "choose another name")
    if d.family in TR_FAMILIES:
        raise ConfigError(f"op {d.name!r}: family {d.family!r} is one of tr's own; an op made outside tr belongs "
                          f"to a family of its own (tr's are {sorted(TR_FAMILIES)})")
    _TABLE[d.name] = d
    return d


def unregister_op(name: str) -> OpDef:
    """Remove an op that register_op added (tr's own entries stay); returns its entry."""
    if name in TR_OPS:
        raise ConfigError(f"op {name!r} is tr's own; only ops added by register_op can be removed")
    try:
        return _TABLE.pop(name)
    except KeyError:
        raise ConfigError(f"op {name!r} is not registered") from None


def op_def(name: str) -> OpDef:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise CompileError(f"unknown op {name!r}; the catalogue has {sorted(CATALOGUE)}") from None


@dataclass(frozen=True)
class OpCall:
    """One call of a catalogued op: arguments by name (DTensor, Span or None) and attributes."""

    op: str
    args: MappingProxyType[str, Any]
    attrs: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    layer: int = -1  # the ArchPlan layer that emitted it (-1: none), for error messages and profiles
    label: str = ""
    part: str = ""  # where the compiler filed it (tr.graph.steps.Part), for profiles and plan printouts

    @staticmethod
    def make(op: str, args: dict[str, Any], attrs: dict[str, Any] | None = None, layer: int = -1,
             label: str = "", part: str = "") -> OpCall:
        d = op_def(op)
        attrs = dict(attrs or {})
        names = {a.name for a in d.args}
        for k in args:
            if k not in names:
                raise CompileError(f"op {op}: unknown argument {k!r} (expects {sorted(names)})")
        full: dict[str, Any] = {}
        for a in d.args:
            v = args.get(a.name)
            if v is None and not a.optional:
                raise CompileError(f"op {op}: required argument {a.name!r} is missing")
            if v is not None and a.kind == "span" and not isinstance(v, Span):
                raise CompileError(f"op {op}: argument {a.name!r} must be a Span, got {type(v).__name__}")
            full[a.name] = v
        for k in attrs:
            if k not in d.attrs:
                raise CompileError(f"op {op}: unknown attribute {k!r} (expects {list(d.attrs)})")
        return OpCall(op, MappingProxyType(full), MappingProxyType(attrs), layer, label, part)

    def __repr__(self) -> str:
        a = ", ".join(f"{k}={v!r}" for k, v in self.args.items() if v is not None)
        at = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        where = f" @L{self.layer}" if self.layer >= 0 else ""
        return f"{self.op}({a}{'; ' + at if at else ''}){where}"
