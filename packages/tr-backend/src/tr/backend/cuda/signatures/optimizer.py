"""Native ops of csrc/ops/optimizer.cu: optimizer updates with device-side control (lr, the NaN/Inf flag, the
loss scale and Adam's step are read from device memory; a set flag skips the step). All values FP32."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import code, f64, flag, i64, native_op, ptr, tensor

_LR = tensor("lr", "FP32 [1]: the step's learning rate")
_FLAG = tensor("flag", "INT32 [1]: the step's NaN/Inf flag; set: nothing is written")
_SCALE = tensor("grad_scale", "FP32 [1]: g is divided by it")
_WD = f64("weight_decay", "the weight decay (>= 0)")

RANGE_OPTIMIZER = native_op(
    "range_optimizer", "One element-wise update of w from g (and m, v) over spans of n elements, by rule.",
    ptr("w", "device address of the weights' span"), ptr("g", "device address of the gradients' span"),
    ptr("m", "device address of the first moment's span; every rule but sgd", optional=True),
    ptr("v", "device address of the second moment's span; adam and adamw", optional=True),
    _LR, _FLAG, _SCALE,
    tensor("step", "INT32 [1]: completed updates (bias correction uses step + 1); adam and adamw", optional=True),
    i64("n", "elements of each span"),
    code("rule", "opt_rule", "tr.core.ops.OPTIMIZER_RULE_CODES: sgd, momentum, nesterov, adam or adamw"),
    f64("beta1", "momentum, or Adam's first-moment decay"), f64("beta2", "Adam's second-moment decay"),
    f64("eps", "Adam's denominator term"), _WD,
    f64("lr_scale", "the learning rate is lr[0] times this, in float64 (a parameter group's multiplier)",
        default=1.0))

LARS_UPDATE = native_op(
    "lars_update", "LARS momentum update of one tensor: the trust ratio from the norms of w and g (fixed-order "
    "float64 sums), written to ratio.",
    tensor("w", "FP32 [n]"), tensor("g", "FP32 [n]"), tensor("m", "FP32 [n]: the momentum"), _LR, _FLAG, _SCALE,
    tensor("ratio", "FP32 [1]: the step's trust ratio (1 when skipped)"), i64("n", "elements"),
    flag("nesterov", "Nesterov momentum"), f64("momentum", "the momentum, in [0, 1]"), _WD,
    f64("trust_coefficient", "the trust coefficient"), f64("eps", "the ratio's denominator term"),
    f64("trust_clip", "the trust ratio's upper bound"))

OPS = (RANGE_OPTIMIZER, LARS_UPDATE)
