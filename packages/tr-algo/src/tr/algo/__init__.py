"""tr.algo: losses, optimizers, LR schedulers and initializers: configuration and reference math, no execution.

Backends implement the kernels; the numpy functions here (``update.step_weight``/``step_bias``,
``loss.cross_entropy_grad``, ``Scheduler.table``, ``init.initialize``) are the spec they are tested against.
"""

from tr.algo.init import (
    FanMode,
    Initializer,
    InitKind,
    InitSpec,
    constant,
    fans,
    initialize,
    kaiming_normal,
    kaiming_uniform,
    ones,
    truncated_normal,
    xavier_normal,
    xavier_uniform,
    zeros,
)
from tr.algo.loss import (
    CrossEntropyLoss,
    cross_entropy_grad,
    cross_entropy_loss,
    cross_entropy_per_sample,
    log_softmax,
    top_k_correct,
)
from tr.algo.onehot_loss import (
    ONEHOT_LOSSES,
    BCEWithLogitsLoss,
    MSELoss,
    onehot_loss,
    onehot_loss_grad,
    onehot_target,
)
from tr.algo.optimizer import (
    LARS,
    RULE_HYPERPARAMS,
    SGD,
    Adam,
    AdamW,
    Optimizer,
    OptimizerKind,
    Slot,
    bias_rule,
    slots_for,
)
from tr.algo.plateau import PlateauState, ReduceLROnPlateau
from tr.algo.scheduler import (
    SCHEDULERS,
    WSDLR,
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWithWarmRestartsLR,
    ExponentialLR,
    MultiStepLR,
    PolynomialLR,
    Scheduler,
    StepLR,
)
from tr.algo.update import (
    OptimizerState,
    adam_bias_correction,
    apply_rule,
    init_state,
    lars_trust_ratio,
    step_bias,
    step_weight,
)

__all__ = [
    "FanMode", "Initializer", "InitKind", "InitSpec", "constant", "fans", "initialize", "kaiming_normal",
    "kaiming_uniform", "ones", "truncated_normal", "xavier_normal", "xavier_uniform", "zeros",
    "CrossEntropyLoss", "cross_entropy_grad", "cross_entropy_loss", "cross_entropy_per_sample", "log_softmax",
    "top_k_correct", "ONEHOT_LOSSES", "BCEWithLogitsLoss", "MSELoss", "onehot_loss", "onehot_loss_grad",
    "onehot_target",
    "LARS", "RULE_HYPERPARAMS", "SGD", "Adam", "AdamW", "Optimizer", "OptimizerKind", "Slot", "bias_rule",
    "slots_for",
    "SCHEDULERS", "WSDLR", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWithWarmRestartsLR", "ExponentialLR",
    "MultiStepLR", "PolynomialLR", "Scheduler", "StepLR", "PlateauState", "ReduceLROnPlateau",
    "OptimizerState", "adam_bias_correction", "apply_rule", "init_state", "lars_trust_ratio", "step_bias",
    "step_weight",
]
__version__ = "0.1.0"
